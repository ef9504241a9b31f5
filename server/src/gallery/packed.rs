//! A packed copy of the catalogue beside the store (`gallery.packed` next to `gallery.redb`):
//! every item's id, label, pixels and features in one sequential file, so a restart of a large
//! gallery reads one file instead of two million B-tree rows.
//!
//! It is a cache, never the truth: it is used only if its header names this store (its
//! instance id: a store deleted and seeded anew starts its counters again), the store's
//! current generation (bumped by every write of items or features, in the same transaction)
//! and model weights version, and its CRC-32 matches; otherwise the store's rows are read and
//! the file is rewritten (atomically: written aside, then renamed). So a stale file is never
//! used.
//!
//! Layout: `PMPACK1\0`, store instance (u64 LE), store generation (u64 LE), weights version (u8 length + UTF-8), item
//! count (u64), pixels per item (u32), features per item (u32), CRC-32 of the payload (u32),
//! then per item: id (u64), label (u32), pixels, features (f32 LE).

use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::gallery::store::StoredItem;

const MAGIC: &[u8; 8] = b"PMPACK1\0";
/// Larger counts or rows are a corrupt header, not an allocation to attempt.
const MAX_ITEMS: u64 = 10_000_000;
const MAX_ROW: u32 = 1 << 16;
/// Bytes read and parsed at a time.
pub const PIECE_BYTES: usize = 32 << 20;

/// Where the packed copy of the store at `store_path` lives.
pub fn path_for(store_path: &Path) -> PathBuf {
    store_path.with_extension("packed")
}

/// Items, each with its features, in the store's order.
pub type Catalogue = Vec<(StoredItem, Vec<f32>)>;

/// Read the packed catalogue if it is valid for `instance`, generation `version` and `weights`; `None` if it is
/// missing, stale or damaged. (Start-up opens it and reads it into the mapped catalogue, or
/// into memory: `state::open`.)
#[cfg(test)]
pub fn read(path: &Path, instance: u64, version: u64, weights: &str) -> Option<Catalogue> {
    open(path, instance, version, weights)?.read_all(PIECE_BYTES)
}

/// A packed catalogue whose header names this store, generation and weights and whose length
/// is the one its header describes; its rows not read yet (nor their CRC checked).
pub struct Packed {
    r: BufReader<std::fs::File>,
    /// Where the rows start.
    payload: u64,
    pub count: usize,
    /// Pixels and features of every row.
    pub pixels: usize,
    pub dim: usize,
    crc: u32,
}

/// One row of a packed catalogue, borrowed from the piece read.
pub struct PackedRow<'a> {
    pub id: u64,
    pub label: u32,
    pub pixels: &'a [u8],
    /// `dim` little-endian `f32`.
    features: &'a [u8],
}

impl PackedRow<'_> {
    pub fn features(&self) -> impl Iterator<Item = f32> + '_ {
        self.features
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// The packed catalogue at `path` if its header is valid for `instance`, generation `version`
/// and `weights` and the file is exactly as long as it describes; `None` otherwise.
pub fn open(path: &Path, instance: u64, version: u64, weights: &str) -> Option<Packed> {
    let file = std::fs::File::open(path).ok()?;
    let mut r = BufReader::with_capacity(1 << 16, file);
    let mut head = [0u8; 8];
    r.read_exact(&mut head).ok()?;
    if &head != MAGIC || read_u64(&mut r)? != instance || read_u64(&mut r)? != version {
        return None;
    }
    let mut wlen = [0u8; 1];
    r.read_exact(&mut wlen).ok()?;
    let mut w = vec![0u8; wlen[0] as usize];
    r.read_exact(&mut w).ok()?;
    if w != weights.as_bytes() {
        return None;
    }
    let count = read_u64(&mut r)?;
    let (pixels, dim) = (read_u32(&mut r)?, read_u32(&mut r)?);
    let crc = read_u32(&mut r)?;
    if count > MAX_ITEMS || pixels > MAX_ROW || dim > MAX_ROW {
        return None;
    }
    let row = 12 + pixels as usize + 4 * dim as usize;
    let len = (count as usize).checked_mul(row)?;
    // The header is 8 + 8 + 8 + 1 + weights + 8 + 4 + 4 + 4 bytes; anything but exactly the
    // payload after it is a different file than the header describes.
    let head = 45 + weights.len();
    if r.get_ref().metadata().ok()?.len() != (head + len) as u64 {
        return None;
    }
    Some(Packed {
        r,
        payload: head as u64,
        count: count as usize,
        pixels: pixels as usize,
        dim: dim as usize,
        crc,
    })
}

impl Packed {
    fn row_len(&self) -> usize {
        12 + self.pixels + 4 * self.dim
    }

    /// Every row, in order, handed to `visit` a piece of whole rows at a time (about
    /// `piece_bytes`, one buffer reused): at 1,000,000 items the rows are 1 GB, never held.
    /// Can be called again (each call reads the file from its first row). `None` if a read
    /// fails or the rows' CRC-32 is not the header's — known only after the last piece, so
    /// whatever `visit` made of the rows must then be dropped.
    pub fn for_each_piece(
        &mut self,
        piece_bytes: usize,
        mut visit: impl FnMut(&[PackedRow<'_>]),
    ) -> Option<()> {
        self.r.seek(SeekFrom::Start(self.payload)).ok()?;
        let row = self.row_len();
        let per_piece = (piece_bytes / row).max(1);
        let mut buf = vec![0u8; per_piece * row];
        let mut hasher = crc32fast::Hasher::new();
        let mut left = self.count;
        while left > 0 {
            let n = left.min(per_piece);
            let piece = &mut buf[..n * row];
            self.r.read_exact(piece).ok()?;
            hasher.update(piece);
            let rows: Vec<PackedRow> = piece
                .chunks_exact(row)
                .map(|b| PackedRow {
                    id: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                    label: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
                    pixels: &b[12..12 + self.pixels],
                    features: &b[12 + self.pixels..],
                })
                .collect();
            visit(&rows);
            left -= n;
        }
        (hasher.finalize() == self.crc).then_some(())
    }

    /// Every row, each item with its features, read in pieces of about `piece_bytes` (each
    /// parsed in parallel); `None` if damaged ([`Packed::for_each_piece`]).
    pub fn read_all(mut self, piece_bytes: usize) -> Option<Catalogue> {
        let mut out: Catalogue = Vec::with_capacity(self.count);
        self.for_each_piece(piece_bytes, |rows| {
            out.par_extend(rows.par_iter().map(|r| {
                let item = StoredItem {
                    id: r.id,
                    label: r.label,
                    pixels: r.pixels.to_vec(),
                };
                (item, r.features().collect())
            }))
        })?;
        Some(out)
    }
}

/// One item to pack: `(id, label, pixels, features)`.
pub type Row<'a> = (u64, u32, &'a [u8], &'a [f32]);

/// Write the packed catalogue for `version` and `weights` (aside, then renamed over `path`).
/// Every row must have the same pixel and feature lengths.
pub fn write(
    path: &Path,
    instance: u64,
    version: u64,
    weights: &str,
    rows: &[Row],
) -> std::io::Result<()> {
    let (pixels, dim) = rows.first().map_or((0, 0), |r| (r.2.len(), r.3.len()));
    if rows.iter().any(|r| r.2.len() != pixels || r.3.len() != dim) || weights.len() > 255 {
        return Err(std::io::Error::other("rows of different shapes"));
    }
    let mut hasher = crc32fast::Hasher::new();
    for r in rows {
        hasher.update(&r.0.to_le_bytes());
        hasher.update(&r.1.to_le_bytes());
        hasher.update(r.2);
        for v in r.3 {
            hasher.update(&v.to_le_bytes());
        }
    }
    let tmp = path.with_extension("packed.tmp");
    {
        let mut w = BufWriter::with_capacity(8 << 20, std::fs::File::create(&tmp)?);
        w.write_all(MAGIC)?;
        w.write_all(&instance.to_le_bytes())?;
        w.write_all(&version.to_le_bytes())?;
        w.write_all(&[weights.len() as u8])?;
        w.write_all(weights.as_bytes())?;
        w.write_all(&(rows.len() as u64).to_le_bytes())?;
        w.write_all(&(pixels as u32).to_le_bytes())?;
        w.write_all(&(dim as u32).to_le_bytes())?;
        w.write_all(&hasher.finalize().to_le_bytes())?;
        for r in rows {
            w.write_all(&r.0.to_le_bytes())?;
            w.write_all(&r.1.to_le_bytes())?;
            w.write_all(r.2)?;
            for v in r.3 {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(tmp, path)
}

fn read_u64(r: &mut impl Read) -> Option<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

fn read_u32(r: &mut impl Read) -> Option<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).ok()?;
    Some(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_catalogue_round_trips_and_is_refused_when_stale_or_damaged() {
        let dir = std::env::temp_dir().join(format!("pm-packed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("g.packed");
        let px: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 6]).collect();
        let fs: Vec<Vec<f32>> = (0..5).map(|i| vec![i as f32 * 0.5, -1.0]).collect();
        let rows: Vec<Row> = (0..5)
            .map(|i| {
                (
                    10 + i as u64,
                    i as u32 % 3,
                    px[i].as_slice(),
                    fs[i].as_slice(),
                )
            })
            .collect();
        write(&path, 3, 7, "w1", &rows).unwrap();
        let rows = read(&path, 3, 7, "w1").unwrap();
        assert_eq!(rows.len(), 5);
        // Read two rows at a time: the same rows.
        assert_eq!(
            open(&path, 3, 7, "w1").unwrap().read_all(2 * (12 + 6 + 8)),
            Some(rows.clone())
        );
        for (i, (it, f)) in rows.iter().enumerate() {
            assert_eq!(
                (it.id, it.label, &it.pixels),
                (10 + i as u64, i as u32 % 3, &px[i])
            );
            assert_eq!(f, &fs[i]);
        }
        // Another store, catalogue version or weights: not used.
        assert!(read(&path, 4, 7, "w1").is_none());
        assert!(read(&path, 3, 8, "w1").is_none());
        assert!(read(&path, 3, 7, "w2").is_none());
        // One flipped byte in the payload, a truncated file, trailing bytes: not used.
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        let last = bad.len() - 3;
        bad[last] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(read(&path, 3, 7, "w1").is_none());
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(read(&path, 3, 7, "w1").is_none());
        let mut long = good.clone();
        long.push(0);
        std::fs::write(&path, &long).unwrap();
        assert!(read(&path, 3, 7, "w1").is_none());
        assert!(read(&dir.join("missing.packed"), 3, 7, "w1").is_none());
        // Rows of different shapes are refused.
        let odd: Vec<Row> = vec![(1, 0, &[1, 2], &[0.0]), (2, 0, &[1], &[0.0])];
        assert!(write(&path, 3, 1, "w", &odd).is_err());
        std::fs::remove_dir_all(dir).ok();
    }
}
