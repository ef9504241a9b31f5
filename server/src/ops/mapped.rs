//! Large bytes as file pages rather than the process's own memory, in
//! `PartitionSettings::pir_dir`: a version's PIR structures (the hintless ranking's feature
//! planes and packing plans, the thumbnail database, the ranking table and the public files,
//! read through `pir::held` or as [`axum::body::Bytes`] for files that are sent) and the
//! catalogue's pixels and features (`item::mapped`) are written to a file there and read
//! through a read-only mapping of it. Each answer still reads all of them, so they stay in the page cache while
//! searches come; but the kernel may reclaim them (they are clean file pages, read again on
//! the next answer) and the process's own memory (RssAnon) no longer holds them: at
//! 1,000,000 items 2.9 GB of a version's 3.0 GB of PIR.
//!
//! Each file is unlinked as soon as it is created: only this mapping refers to it, nothing
//! else can open or change it, and its disk space is freed when the version is dropped — or
//! when the process ends, however it ends.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ::pir::held::SharedBytes;
use axum::body::Bytes;
use memmap2::{Mmap, UncheckedAdvice};

/// The mappings one owner made (a version's PIR, the catalogue), noted to let their pages go
/// when nothing needs them ([`Pages::release`]). Weak references: a mapping lives exactly as
/// long as the bytes that read it (one a failed build dropped is not kept).
#[derive(Default)]
pub struct Pages(Mutex<Vec<Weak<Mmap>>>);

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pages({} bytes mapped)", self.mapped_len())
    }
}

impl Pages {
    fn keep(&self, map: &Arc<Mmap>) {
        let mut maps = self.0.lock().unwrap_or_else(|e| e.into_inner());
        maps.retain(|m| m.strong_count() > 0);
        maps.push(Arc::downgrade(map));
    }

    /// Takes the mappings' pages out of the process's resident set (`MADV_DONTNEED`): they stay
    /// in the page cache until the kernel needs the memory, and a later read faults them in
    /// again from the file — the same bytes. For pages nothing reads for a while (a catalogue
    /// a build has read, a replaced version in its grace period), which would otherwise stay
    /// counted in the server's resident size. Safe at any time, also while something reads
    /// them.
    pub fn release(&self) {
        let maps = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for map in maps.iter().filter_map(Weak::upgrade) {
            // SAFETY: every mapping here is a shared, read-only mapping of a file this process
            // unlinked when it created it and never writes after mapping it
            // (`create_and_map`), so dropping its pages changes no byte anyone can read: every
            // later access repopulates them from the file's unchanged contents (madvise(2),
            // MADV_DONTNEED on shared file mappings). The undefined behaviour
            // `unchecked_advise` warns of is for private or anonymous mappings, whose contents
            // would change.
            if let Err(e) = unsafe { map.unchecked_advise(UncheckedAdvice::DontNeed) } {
                tracing::debug!(error = %e, "releasing mapped pages failed");
            }
        }
    }

    /// `read` over `items` a slice of `slice` at a time, these pages let go after each: for a
    /// pass that reads every item of a mapped catalogue (or a sample spread over it), whose
    /// pages would otherwise all stay in the resident set until it ends — a read maps the
    /// file's pages around it too, so even a 1-in-50 sample touches them all (0.8 GB at
    /// 1,000,000 items). Stops at `read`'s first error.
    pub fn read_in_slices<T, E>(
        &self,
        items: &[T],
        slice: usize,
        mut read: impl FnMut(&[T]) -> Result<(), E>,
    ) -> Result<(), E> {
        for part in items.chunks(slice.max(1)) {
            read(part)?;
            self.release();
        }
        Ok(())
    }

    /// Bytes of the mappings still in use.
    pub fn mapped_len(&self) -> usize {
        let maps = self.0.lock().unwrap_or_else(|e| e.into_inner());
        maps.iter().filter_map(Weak::upgrade).map(|m| m.len()).sum()
    }
}

/// The mapping as the owner of [`Bytes`] and [`SharedBytes`].
struct Owner(Arc<Mmap>);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Writes `len` bytes with `write` to a new, already unlinked file in `dir` (created if
/// missing) and maps it read-only, kept in `pages`. Refused if `write` writes another number
/// of bytes.
pub fn write_and_map(
    dir: &Path,
    what: &str,
    len: usize,
    pages: &Pages,
    write: impl FnOnce(&mut (dyn Write + Send)) -> std::io::Result<()>,
) -> std::io::Result<Bytes> {
    let map = create_and_map(dir, what, Some(len), pages, write)?;
    Ok(Bytes::from_owner(Owner(map)))
}

/// [`write_and_map`] as shared bytes for `pir::held`; with `len` `None` for bytes whose length
/// is known only once written (the hintless ranking's plans, written as they are built): the
/// whole file, whatever `write` wrote (not empty), which whoever reads them checks
/// (`pir::held`).
pub fn shared(
    dir: &Path,
    what: &str,
    len: Option<usize>,
    pages: &Pages,
    write: impl FnOnce(&mut (dyn Write + Send)) -> std::io::Result<()>,
) -> std::io::Result<SharedBytes> {
    let map = create_and_map(dir, what, len, pages, write)?;
    Ok(Arc::new(Owner(map)))
}

fn create_and_map(
    dir: &Path,
    what: &str,
    len: Option<usize>,
    pages: &Pages,
    write: impl FnOnce(&mut (dyn Write + Send)) -> std::io::Result<()>,
) -> std::io::Result<Arc<Mmap>> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!(
        "{what}-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    write(&mut out)?;
    out.flush()?;
    drop(out);
    let written = file.metadata()?.len();
    if len.is_some_and(|len| written != len as u64) || written == 0 {
        return Err(std::io::Error::other(format!(
            "{what}: {written} bytes written, {len:?} expected"
        )));
    }
    // SAFETY: the file was unlinked right after this process created it, so no other process
    // can open it by name, and this process never writes to it after this point: the mapping
    // sees fixed bytes for as long as it lives.
    let map = Arc::new(unsafe {
        memmap2::MmapOptions::new()
            .len(usize::try_from(written).map_err(std::io::Error::other)?)
            .map(&file)?
    });
    pages.keep(&map);
    Ok(map)
}

/// `files` written one after another to one mapped file, each returned as a [`Bytes`] of the
/// mapping; empty files stay empty. On failure the files are returned as they were.
pub fn files(
    dir: &Path,
    what: &str,
    pages: &Pages,
    files: Vec<Bytes>,
) -> Result<Vec<Bytes>, (std::io::Error, Vec<Bytes>)> {
    let len: usize = files.iter().map(Bytes::len).sum();
    if len == 0 {
        return Ok(files);
    }
    let map = match write_and_map(dir, what, len, pages, |out| {
        files.iter().try_for_each(|f| out.write_all(f))
    }) {
        Ok(m) => m,
        Err(e) => return Err((e, files)),
    };
    let mut at = 0;
    Ok(files
        .iter()
        .map(|f| {
            let part = map.slice(at..at + f.len());
            at += f.len();
            part
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_back_from_the_mapping_and_leave_nothing_on_disk() {
        let dir = std::env::temp_dir().join(format!("pm-mapped-{}", std::process::id()));
        let given = vec![
            Bytes::from_static(b"table"),
            Bytes::new(),
            Bytes::from(vec![7u8; 100_000]),
        ];
        let pages = Pages::default();
        let back = files(&dir, "test", &pages, given.clone()).unwrap();
        assert_eq!(back, given);
        // Pages let go are read again from the file: the same bytes.
        pages.release();
        assert_eq!(back, given);
        assert_eq!(pages.mapped_len(), 100_005);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        let short = write_and_map(&dir, "short", 10, &pages, |out| out.write_all(b"abc"));
        assert!(short.is_err());
        let all = shared(&dir, "streamed", None, &pages, |out| {
            out.write_all(b"planes and plans")
        })
        .unwrap();
        assert_eq!((*all).as_ref(), b"planes and plans");
        assert_eq!(pages.mapped_len(), 100_005 + 16);
        drop(all);
        assert_eq!(pages.mapped_len(), 100_005, "a dropped mapping is not kept");
        // A failure mid-way comes back as it is; nothing is mapped, nothing stays on disk.
        let failed = shared(&dir, "failed", None, &pages, |out| {
            out.write_all(&[1; 1000])?;
            Err(std::io::Error::other("disk full"))
        });
        assert_eq!(failed.err().unwrap().to_string(), "disk full");
        assert!(shared(&dir, "empty", None, &pages, |_| Ok(())).is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn slices_are_read_in_order_and_the_first_error_stops_them() {
        let pages = Pages::default();
        let items: Vec<u32> = (0..10).collect();
        let mut seen = Vec::new();
        pages
            .read_in_slices(&items, 3, |s| {
                assert!(s.len() <= 3);
                seen.extend_from_slice(s);
                Ok::<_, ()>(())
            })
            .unwrap();
        assert_eq!(seen, items);
        let mut calls = 0;
        let stopped = pages.read_in_slices(&items, 4, |s| {
            calls += 1;
            if s[0] == 4 {
                return Err(s[0]);
            }
            Ok(())
        });
        assert_eq!((stopped, calls), (Err(4), 2));
    }
}
