//! Where an item's pixels and features live: in the process's memory (an item added through
//! the API), or read in place from one file that start-up writes and maps ([`map_items`]).
//!
//! Why: at 1,000,000 items the pixels (784 bytes each) and features (64 `f32`) held as two
//! allocations an item were about 1.1 GB of the server's own memory, more than half of what
//! it holds while serving — and serving never reads them: searches read the PIR databases and
//! the block files, which were built from them. Mapped, they are clean file pages, resident
//! only while something reads them (a rebuild re-embeds and rebuilds from them) and
//! reclaimable by the kernel under pressure (read again from the file on next use), and a
//! rebuild's new snapshot shares them with the old one instead of holding both.
//!
//! The file is unlinked as soon as it is created ([`crate::ops::mapped`]): only this process
//! can see it, nothing changes it, and its space is freed when the last item reading it is
//! dropped, or when the process ends.

use std::io::Write;
use std::ops::Deref;
use std::path::Path;

use axum::body::Bytes;

use super::GalleryItem;
use crate::ops::mapped::{write_and_map, Pages};

/// An item's greyscale pixels, held or mapped; cheap to clone (a shared reference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pixels(Bytes);

impl Pixels {
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

impl Deref for Pixels {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Pixels {
    fn from(v: Vec<u8>) -> Self {
        Pixels(Bytes::from(v))
    }
}

/// An item's features, held or read in place from the mapping (native-endian `f32`, aligned:
/// checked when made, see [`Features::mapped`]); cheap to clone.
#[derive(Clone, Debug)]
pub struct Features(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Held(Vec<f32>),
    /// `f32` bytes, 4-aligned, a whole number of values (checked in [`Features::mapped`]).
    Mapped(Bytes),
}

impl Features {
    /// `bytes` read as `f32`s in place; `None` unless they are 4-aligned and a whole number of
    /// values (then every bit pattern is an `f32`, so reading them is sound).
    fn mapped(bytes: Bytes) -> Option<Features> {
        bytemuck::try_cast_slice::<u8, f32>(&bytes).ok()?;
        Some(Features(Repr::Mapped(bytes)))
    }

    pub fn as_slice(&self) -> &[f32] {
        match &self.0 {
            Repr::Held(v) => v,
            // Alignment and length were checked when made; the bytes never move.
            Repr::Mapped(b) => bytemuck::cast_slice(b),
        }
    }
}

impl Deref for Features {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.as_slice()
    }
}

impl PartialEq for Features {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl From<Vec<f32>> for Features {
    fn from(v: Vec<f32>) -> Self {
        Features(Repr::Held(v))
    }
}

/// Moves every item's pixels and features into one new mapped file in `dir` (every item's
/// features, then every item's pixels) and points the items at it. On an error nothing is
/// changed (the items keep their own copies) and the error is returned for the caller to log.
/// The mapping is noted in `pages`, to let its pages go after a build has read the items
/// ([`Pages::release`]). The values read back are the same bits: [`write_and_map`] refuses a
/// short write, and the mapping is of exactly what was written.
pub fn map_items(dir: &Path, items: &mut [GalleryItem], pages: &Pages) -> std::io::Result<()> {
    let features: usize = items.iter().map(|it| it.features.len() * 4).sum();
    let pixels: usize = items.iter().map(|it| it.pixels.len()).sum();
    if features + pixels == 0 {
        return Ok(());
    }
    let map = write_and_map(dir, "catalogue", features + pixels, pages, |out| {
        for it in items.iter() {
            out.write_all(bytemuck::cast_slice(it.features.as_slice()))?;
        }
        for it in items.iter() {
            out.write_all(&it.pixels)?;
        }
        Ok(())
    })?;
    // Every view first, then the swap: all or nothing.
    let (mut f_at, mut p_at) = (0, features);
    let mut views = Vec::with_capacity(items.len());
    for it in items.iter() {
        let f_len = it.features.len() * 4;
        let f = Features::mapped(map.slice(f_at..f_at + f_len))
            .ok_or_else(|| std::io::Error::other("mapped features are not aligned"))?;
        let p = Pixels(map.slice(p_at..p_at + it.pixels.len()));
        (f_at, p_at) = (f_at + f_len, p_at + it.pixels.len());
        views.push((f, p));
    }
    for (it, (f, p)) in items.iter_mut().zip(views) {
        (it.features, it.pixels) = (f, p);
    }
    Ok(())
}

/// Which part of the catalogue's file [`map_read`] asks to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every item's features, native-endian `f32`.
    Features,
    /// Every item's pixels.
    Pixels,
}

/// [`map_items`] for `count` items read from elsewhere (a packed catalogue), each of `dim`
/// features and `pixels` pixels, written straight into the file and never held:
/// `write(Part::Features, out)` writes every item's features, then `write(Part::Pixels, out)`
/// every item's pixels, in the same order. At 1,000,000 items, reading them into memory first
/// held 1.3 GB for a moment — more than a row shard holds in all. The views come back in that
/// order; refused (nothing mapped) unless each part is exactly `count` items long, or where
/// `write` fails.
pub fn map_read(
    dir: &Path,
    pages: &Pages,
    count: usize,
    dim: usize,
    pixels: usize,
    mut write: impl FnMut(Part, &mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<Vec<(Features, Pixels)>> {
    let features = count * dim * 4;
    let map = write_and_map(dir, "catalogue", features + pixels * count, pages, |out| {
        for (part, len) in [(Part::Features, features), (Part::Pixels, pixels * count)] {
            let mut counted = Counted { out, n: 0 };
            write(part, &mut counted)?;
            if counted.n != len {
                return Err(std::io::Error::other(format!(
                    "{part:?}: {} bytes written, {len} expected",
                    counted.n
                )));
            }
        }
        Ok(())
    })?;
    (0..count)
        .map(|i| {
            let f = Features::mapped(map.slice(i * dim * 4..(i + 1) * dim * 4))
                .ok_or_else(|| std::io::Error::other("mapped features are not aligned"))?;
            let at = features + i * pixels;
            Ok((f, Pixels(map.slice(at..at + pixels))))
        })
        .collect()
}

/// A writer that counts what passes through it.
struct Counted<'a> {
    out: &'a mut (dyn Write + Send),
    n: usize,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.n += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, px: u8, f: f32) -> GalleryItem {
        GalleryItem::with_features(id, 3, vec![px; 784], vec![f, -f, f32::MIN_POSITIVE, 0.5])
            .unwrap()
    }

    #[test]
    fn mapped_items_read_the_same_bits_and_leave_nothing_on_disk() {
        let dir = std::env::temp_dir().join(format!("pm-items-{}", std::process::id()));
        let mut items: Vec<GalleryItem> = (0..5).map(|i| item(i, i as u8 * 40, i as f32)).collect();
        let before: Vec<(Vec<u8>, Vec<f32>)> = items
            .iter()
            .map(|it| (it.pixels.to_vec(), it.features.to_vec()))
            .collect();
        let pages = Pages::default();
        map_items(&dir, &mut items, &pages).unwrap();
        for round in 0..2 {
            for (it, (px, f)) in items.iter().zip(&before) {
                assert!(matches!(it.features.0, Repr::Mapped(_)));
                assert_eq!(
                    (it.pixels.as_slice(), it.features.as_slice()),
                    (&px[..], &f[..])
                );
                if round == 0 {
                    assert_eq!(
                        it.png(),
                        item(0, px[0], 0.0).png(),
                        "thumbnails from mapped pixels"
                    );
                }
            }
            // Pages let go are read again from the file: the same bytes.
            pages.release();
        }
        let empty = Pages::default();
        map_items(&dir, &mut [], &empty).unwrap();
        assert_eq!(empty.mapped_len(), 0, "nothing to map");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        // The mapping outlives the items that were cloned from it.
        let kept = items[4].pixels.clone();
        drop(items);
        assert_eq!(kept.as_slice(), &[160u8; 784][..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn items_read_into_the_mapping_are_the_bits_written_and_a_short_part_is_refused() {
        let dir = std::env::temp_dir().join(format!("pm-read-{}", std::process::id()));
        let pages = Pages::default();
        let rows: Vec<([f32; 3], [u8; 5])> = (0..4)
            .map(|i| ([i as f32, -0.5, f32::MAX], [i as u8; 5]))
            .collect();
        let views = map_read(&dir, &pages, 4, 3, 5, |part, out| {
            for (f, p) in &rows {
                match part {
                    Part::Features => out.write_all(bytemuck::cast_slice(f))?,
                    Part::Pixels => out.write_all(p)?,
                }
            }
            Ok(())
        })
        .unwrap();
        for ((f, p), (want_f, want_p)) in views.iter().zip(&rows) {
            assert_eq!((f.as_slice(), p.as_slice()), (&want_f[..], &want_p[..]));
        }
        // One item's pixels short (the total made up by the features): refused.
        let short = map_read(&dir, &pages, 4, 3, 5, |part, out| match part {
            Part::Features => out.write_all(&[0; 4 * 3 * 4 + 5]),
            Part::Pixels => out.write_all(&[0; 3 * 5]),
        });
        assert!(short.is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `u32` words as bytes: 4-aligned.
    struct Words(Vec<u32>);
    impl AsRef<[u8]> for Words {
        fn as_ref(&self) -> &[u8] {
            bytemuck::cast_slice(&self.0)
        }
    }

    #[test]
    fn misaligned_or_partial_feature_bytes_are_refused() {
        let b = Bytes::from_owner(Words(vec![0x3f80_0000; 5]));
        assert_eq!(
            Features::mapped(b.slice(0..16)).unwrap().as_slice(),
            &[1.0; 4]
        );
        assert!(Features::mapped(b.slice(1..17)).is_none(), "misaligned");
        assert!(Features::mapped(b.slice(0..6)).is_none(), "a partial value");
    }
}
