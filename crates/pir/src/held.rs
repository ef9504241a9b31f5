//! Numbers a server holds either in memory or read in place from bytes another owner keeps — in
//! the server, a file it wrote and mapped: the hintless ranking's packing plans and feature
//! planes (1.6 GB and 0.6 GB at 1,000,000 items) are then file pages the kernel can reclaim
//! and read again, not the process's own memory.
//!
//! The bytes are the little-endian words, as [`Held::write`] writes them; [`Held::share`]
//! checks that they equal the words held before it drops them, so a shared buffer always holds
//! what was built. Words too large to hold until they are shared (the plans, written as each is
//! built) are written out by [`Held::write_out`], which keeps only their SHA-256: `share` then
//! checks the bytes against that digest.

use std::io::Write;
use std::ops::Range;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Bytes that stay put and unchanged while anything reads them (a read-only file mapping, a
/// buffer).
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for i8 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// Plain integers: no padding, and every bit pattern is a value, so their bytes can be read as
/// them in place.
pub trait Word: Copy + Send + Sync + sealed::Sealed + 'static {}
impl Word for u8 {}
impl Word for i8 {}
impl Word for u32 {}
impl Word for u64 {}

/// Words held in memory or read from shared bytes.
pub(crate) enum Held<T: Word> {
    Owned(Vec<T>),
    /// Written out by [`Held::write_out`] and dropped: not readable until shared.
    Written {
        /// How many words were written.
        words: usize,
        /// SHA-256 of their bytes (without the padding).
        sha256: [u8; 32],
    },
    Shared {
        bytes: SharedBytes,
        /// Byte range of the words in `bytes` (aligned for `T`, checked when shared).
        range: Range<usize>,
    },
}

impl<T: Word> Clone for Held<T> {
    fn clone(&self) -> Self {
        match self {
            Held::Owned(v) => Held::Owned(v.clone()),
            &Held::Written { words, sha256 } => Held::Written { words, sha256 },
            Held::Shared { bytes, range } => Held::Shared {
                bytes: Arc::clone(bytes),
                range: range.clone(),
            },
        }
    }
}

impl<T: Word + PartialEq> PartialEq for Held<T> {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl<T: Word> std::fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("words", &(self.byte_len() / std::mem::size_of::<T>()))
            .field("owned", &self.is_owned())
            .finish()
    }
}

/// The bytes of `words` as they lie in memory (little-endian on the hosts [`Held::write`]
/// accepts).
fn as_bytes<T: Word>(words: &[T]) -> &[u8] {
    // SAFETY: `T` is a plain integer without padding, so its memory is initialised bytes; the
    // slice covers exactly the words' memory and borrows them.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

impl<T: Word> Held<T> {
    /// The words. Panics on words written out and not yet shared: their owner keeps them
    /// unreadable until then (a streamed score database is answered from only once shared).
    pub fn get(&self) -> &[T] {
        match self {
            Held::Owned(v) => v,
            Held::Written { .. } => panic!("words written out are read only once shared"),
            Held::Shared { bytes, range } => {
                let b = &(**bytes).as_ref()[range.clone()];
                // SAFETY: every bit pattern is a `T` (`Word`); `share` checked the alignment of
                // this range and the bytes do not move while shared (`SharedBytes`).
                let (pre, words, post) = unsafe { b.align_to::<T>() };
                assert!(
                    pre.is_empty() && post.is_empty(),
                    "shared words are aligned"
                );
                words
            }
        }
    }

    /// Bytes of the words (what [`Held::write`] writes before its padding).
    pub fn byte_len(&self) -> usize {
        match self {
            Held::Written { words, .. } => words * std::mem::size_of::<T>(),
            _ => std::mem::size_of_val(self.get()),
        }
    }

    /// Bytes [`Held::write`] writes: the words, padded to a multiple of 8.
    pub fn padded_len(&self) -> usize {
        self.byte_len().next_multiple_of(8)
    }

    /// Whether the words are in memory of their own (not shared).
    pub fn is_owned(&self) -> bool {
        matches!(self, Held::Owned(_))
    }

    /// Writes the words little-endian, then zeros to a multiple of 8 bytes. Refused on a
    /// big-endian host (the words are read back in place).
    pub fn write(&self, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
        if cfg!(target_endian = "big") {
            return Err(std::io::Error::other(
                "held words are written in place only on little-endian hosts",
            ));
        }
        if let Held::Written { .. } = self {
            return Err(std::io::Error::other("the words were written out already"));
        }
        out.write_all(as_bytes(self.get()))?;
        out.write_all(&[0u8; 8][..self.padded_len() - self.byte_len()])
    }

    /// [`Held::write`], then drops the words, keeping only their SHA-256 (computed as they are
    /// written) for [`Held::share`] to check the bytes against. Unchanged if writing fails.
    pub fn write_out(&mut self, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
        let Held::Owned(words) = self else {
            return Err(std::io::Error::other("only words held are written out"));
        };
        if cfg!(target_endian = "big") {
            return Err(std::io::Error::other(
                "held words are written in place only on little-endian hosts",
            ));
        }
        // A mebibyte at a time: hashed while it is in the cache, then written.
        let mut sha = Sha256::new();
        for part in as_bytes(words).chunks(1 << 20) {
            sha.update(part);
            out.write_all(part)?;
        }
        out.write_all(&[0u8; 8][..self.padded_len() - self.byte_len()])?;
        *self = Held::Written {
            words: self.get().len(),
            sha256: sha.finalize().into(),
        };
        Ok(())
    }

    /// Reads the words from `bytes[offset..]` (what [`Held::write`] or [`Held::write_out`]
    /// wrote there) instead of holding them: refused unless the bytes there are aligned and
    /// equal to the words held — or, written out, have the SHA-256 kept of them. Returns the
    /// offset after them (and their padding).
    pub fn share(&mut self, bytes: &SharedBytes, offset: usize) -> Result<usize> {
        let len = self.byte_len();
        let end = offset + self.padded_len();
        let refuse = |reason: &str| Error::InvalidParameter {
            name: "shared words",
            reason: reason.into(),
        };
        let b = (**bytes).as_ref();
        if cfg!(target_endian = "big") {
            return Err(refuse("only on little-endian hosts"));
        }
        if end > b.len() {
            return Err(refuse("the bytes are shorter than the words"));
        }
        if !(b.as_ptr() as usize + offset).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(refuse("the bytes are not aligned for the words"));
        }
        let here = &b[offset..offset + len];
        match self {
            Held::Written { sha256, .. } => {
                if Sha256::digest(here)[..] != sha256[..] {
                    return Err(refuse("the bytes differ from the words written (SHA-256)"));
                }
            }
            _ => {
                if *here != *as_bytes(self.get()) {
                    return Err(refuse("the bytes differ from the words held"));
                }
            }
        }
        *self = Held::Shared {
            bytes: Arc::clone(bytes),
            range: offset..offset + len,
        };
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_words_read_back_and_wrong_bytes_are_refused() {
        let mut a = Held::Owned(vec![1u64, u64::MAX, 7]);
        let mut b = Held::Owned(vec![3u32, 9, 11]);
        let mut out = Vec::new();
        a.write(&mut out).unwrap();
        b.write(&mut out).unwrap();
        assert_eq!(out.len(), 24 + 16);
        // A Vec<u64> is 8-aligned; copy the bytes into one.
        let mut words = vec![0u64; out.len() / 8];
        as_bytes_mut(&mut words).copy_from_slice(&out);
        let shared: SharedBytes = Arc::new(WordsBytes(words));
        let end = a.share(&shared, 0).unwrap();
        assert_eq!(b.share(&shared, end).unwrap(), 40);
        assert!(!a.is_owned() && !b.is_owned());
        assert_eq!(a.get(), &[1, u64::MAX, 7]);
        assert_eq!(b.get(), &[3, 9, 11]);
        // Other bytes, a misaligned offset or too few bytes are refused.
        let mut c = Held::Owned(vec![2u64]);
        assert!(c.share(&shared, 0).is_err());
        let mut d = Held::Owned(vec![9u32]);
        assert!(d.share(&shared, 26).is_err());
        assert!(Held::Owned(vec![1u64; 9]).share(&shared, 0).is_err());
        assert!(c.is_owned() && d.is_owned());
    }

    struct WordsBytes(Vec<u64>);
    impl AsRef<[u8]> for WordsBytes {
        fn as_ref(&self) -> &[u8] {
            as_bytes(&self.0)
        }
    }

    fn as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: plain integers; the slice covers exactly the words' memory.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
    }
}
