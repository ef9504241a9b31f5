//! The centroids file: one per partition level, what a client needs to find its true block
//! (its nearest centroid), fetched once per version instead of carried in the document.
//!
//! # Format (version 1, little-endian)
//! ```text
//! offset  size        field
//! 0       4           magic "PMCT"
//! 4       2           format version (1)
//! 6       2           d, feature dimension (1..=limits::MAX_FEATURE_DIM)
//! 8       4           B, centroid count (1..=limits::MAX_BLOCKS)
//! 12      2           scale denominator, 32767 (the only value of version 1)
//! 14      2           reserved, 0
//! 16      2·B·d       centroids, row-major, i16 q in -32767..=32767, value = q / 32767
//! ```
//! Nothing follows. The document lists the file's size (exactly [`file_len`]) and SHA-256
//! (hex, of these bytes); a client refuses a file whose size, hash or header disagrees.
//!
//! # Why i16 with the block format's fixed scale
//! Centroids are means of unit-norm features, so every coordinate is in [-1, 1]: the block
//! format's quantisation (`blocks::quantise`, `q / 32767`) holds them to 1.5·10⁻⁵ with no
//! per-level scale to choose, check or get wrong. Every accepted file is canonical: q = −32768
//! (which the encoder never writes) is refused, so bytes and values are one to one and
//! `encode(decode(f)) == f`. Decoding is an exact i16→f32 conversion and one correctly rounded
//! IEEE division, so the browser (wasm) and the server (x86) decode bit-identical f32 values;
//! the server builds each level with exactly these decoded centroids
//! ([`crate::partition::build_level`]), so a client's nearest centroid is its true
//! block by the server's own assignment. f16 would have needed NaN/infinity and subnormal
//! rules and a conversion the wasm target lacks natively, for no gain in size.

use crate::blocks::{quantise, FEATURE_SCALE};
use shared::api::{LevelDoc, PartitionDoc};
use shared::digest::hash_hex;
use shared::error::{Error, Result};
use shared::params::limits;

const MAGIC: &[u8; 4] = b"PMCT";
const VERSION: u16 = 1;
/// Bytes before the centroids.
pub const HEADER: usize = 16;
/// The header's scale denominator (the block format's feature scale).
const SCALE: u16 = 32767;

/// Errors in a centroids file: typed, never a panic, whatever the bytes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CentroidsError {
    #[error("centroids file is malformed: {0}")]
    Malformed(String),
    #[error("centroids file has {got} bytes, the partition declares {declared}")]
    Size { declared: u64, got: u64 },
    #[error("centroids hash mismatch: expected {expected}, got {got}")]
    HashMismatch { expected: String, got: String },
    #[error("centroids file does not fit the partition: {0}")]
    Shape(String),
}

impl From<CentroidsError> for Error {
    fn from(e: CentroidsError) -> Self {
        Error::InvalidParameter {
            name: "centroids",
            reason: e.to_string(),
        }
    }
}

/// A level's decoded centroids, verified against the document (so a search cannot use
/// another level's or version's: [`Centroids::check_for`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Centroids {
    pub dim: usize,
    /// `B × dim`, row-major, dequantised.
    pub values: Vec<f32>,
    /// SHA-256 (hex) of the file they were decoded from.
    pub hash: String,
}

impl Centroids {
    pub fn len(&self) -> usize {
        self.values.len() / self.dim.max(1)
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Refuse centroids that are not the ones `level` lists (a caller mixing levels or
    /// versions gets an error, never a wrong block).
    pub fn check_for(&self, doc: &PartitionDoc, level: &LevelDoc) -> Result<()> {
        if !self.hash.eq_ignore_ascii_case(&level.centroids_hash)
            || self.dim != doc.feature_dim
            || self.len() != level.blocks as usize
        {
            return Err(CentroidsError::Shape(
                "these centroids are not the level's the document lists".into(),
            )
            .into());
        }
        Ok(())
    }
}

/// Bytes of a centroids file of `b` rows of dimension `dim` (`None` if it overflows `u64`).
pub fn file_len(b: u64, dim: u64) -> Option<u64> {
    b.checked_mul(dim)?
        .checked_mul(2)?
        .checked_add(HEADER as u64)
}

/// The largest centroids file any valid document can declare.
pub const MAX_FILE_BYTES: u64 = (HEADER + 2 * limits::MAX_BLOCKS * limits::MAX_FEATURE_DIM) as u64;

/// Encode `centroids` (`B × dim`, row-major; finite; clamped to [-1, 1] like block features).
pub fn encode(centroids: &[f32], dim: usize) -> Result<Vec<u8>> {
    if dim == 0 || dim > limits::MAX_FEATURE_DIM || !centroids.len().is_multiple_of(dim) {
        return Err(Error::InvalidParameter {
            name: "centroids",
            reason: format!(
                "{} values are not rows of dimension {dim} (1..={})",
                centroids.len(),
                limits::MAX_FEATURE_DIM
            ),
        });
    }
    let b = centroids.len() / dim;
    if b == 0 || b > limits::MAX_BLOCKS {
        return Err(Error::TooLarge {
            what: "centroids",
            count: b,
            limit: limits::MAX_BLOCKS,
        });
    }
    if centroids.iter().any(|v| !v.is_finite()) {
        return Err(Error::NonFinite { what: "centroids" });
    }
    let mut out = Vec::with_capacity(HEADER + 2 * centroids.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(dim as u16).to_le_bytes());
    out.extend_from_slice(&(b as u32).to_le_bytes());
    out.extend_from_slice(&SCALE.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for &v in centroids {
        out.extend_from_slice(&quantise(v).to_le_bytes());
    }
    Ok(out)
}

/// Decode a centroids file: `(dim, values)`. Refuses a wrong magic, version, scale or
/// reserved field, out-of-range shapes, a length other than the header's exactly (trailing
/// bytes included) and the non-canonical q = −32768. Never panics.
pub fn decode(bytes: &[u8]) -> std::result::Result<(usize, Vec<f32>), CentroidsError> {
    let bad = |m: &str| CentroidsError::Malformed(m.to_string());
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return Err(bad("missing the PMCT header"));
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    if u16_at(4) != VERSION {
        return Err(bad("unknown format version"));
    }
    if u16_at(12) != SCALE || u16_at(14) != 0 {
        return Err(bad("unknown scale or reserved field"));
    }
    let dim = u16_at(6) as usize;
    let b = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if dim == 0 || dim > limits::MAX_FEATURE_DIM || b == 0 || b > limits::MAX_BLOCKS {
        return Err(bad("dimension or centroid count out of range"));
    }
    let need = file_len(b as u64, dim as u64).unwrap_or(u64::MAX);
    if bytes.len() as u64 != need {
        return Err(CentroidsError::Malformed(format!(
            "length {} does not match {b} centroids of dimension {dim} (expected {need})",
            bytes.len()
        )));
    }
    let mut values = Vec::with_capacity(b * dim);
    for c in bytes[HEADER..].chunks_exact(2) {
        let q = i16::from_le_bytes([c[0], c[1]]);
        if q == i16::MIN {
            return Err(bad("value -32768 is outside the format's range"));
        }
        values.push(q as f32 / FEATURE_SCALE);
    }
    Ok((dim, values))
}

/// What a client does with a fetched centroids file: its size and SHA-256 checked against
/// what the document lists for `level`, then decoded and its shape checked against the
/// document (`B` of the level, the document's dimension). Any disagreement is an error.
pub fn verify(
    doc: &PartitionDoc,
    level: usize,
    bytes: &[u8],
) -> std::result::Result<Centroids, CentroidsError> {
    let l = doc
        .levels
        .get(level)
        .ok_or_else(|| CentroidsError::Shape(format!("level {level} is not in the partition")))?;
    if bytes.len() as u64 != l.centroids_bytes {
        return Err(CentroidsError::Size {
            declared: l.centroids_bytes,
            got: bytes.len() as u64,
        });
    }
    let got = hash_hex(bytes);
    if !got.eq_ignore_ascii_case(&l.centroids_hash) {
        return Err(CentroidsError::HashMismatch {
            expected: l.centroids_hash.clone(),
            got,
        });
    }
    let (dim, values) = decode(bytes)?;
    if dim != doc.feature_dim || values.len() != l.blocks as usize * dim {
        return Err(CentroidsError::Shape(format!(
            "{} centroids of dimension {dim}; the level has {} of dimension {}",
            values.len() / dim,
            l.blocks,
            doc.feature_dim
        )));
    }
    Ok(Centroids {
        dim,
        values,
        hash: got,
    })
}

/// The centroids as every client decodes them: `encode` then `decode` (the server builds its
/// levels with these, so client and server agree bit for bit).
pub fn quantised(centroids: &[f32], dim: usize) -> Result<Vec<f32>> {
    let bytes = encode(centroids, dim)?;
    Ok(decode(&bytes)?.1)
}

/// Where a level's centroids file is fetched: `{blocks_url}/{level}/centroids` (a block is
/// `{blocks_url}/{level}/{number}`, so the name cannot collide with one).
pub fn centroids_url(doc: &PartitionDoc, level: usize) -> String {
    format!("{}/{level}/centroids", doc.blocks_url.trim_end_matches('/'))
}

/// The file name of a level's centroids beside its blocks.
pub const FILE_NAME: &str = "centroids";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_canonical_and_within_half_a_step() {
        let c: Vec<f32> = (0..3 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes = encode(&c, 5).unwrap();
        assert_eq!(bytes.len() as u64, file_len(3, 5).unwrap());
        let (dim, back) = decode(&bytes).unwrap();
        assert_eq!(dim, 5);
        for (a, b) in c.iter().zip(&back) {
            assert!((a - b).abs() <= 0.5 / FEATURE_SCALE + 1e-7, "{a} {b}");
        }
        // Decoded values encode to the same bytes, and quantising twice changes nothing.
        assert_eq!(encode(&back, 5).unwrap(), bytes);
        assert_eq!(quantised(&back, 5).unwrap(), back);
    }

    #[test]
    fn encode_refuses_bad_input() {
        assert!(encode(&[0.0; 6], 4).is_err());
        assert!(encode(&[], 4).is_err());
        assert!(encode(&[0.0; 4], 0).is_err());
        assert!(encode(&[0.0, f32::NAN], 2).is_err());
        assert!(encode(&[f32::INFINITY, 0.0], 2).is_err());
        assert!(encode(&vec![0.0; limits::MAX_BLOCKS + 1], 1).is_err());
    }

    #[test]
    fn decode_refuses_every_damage() {
        let bytes = encode(&[0.5, -0.25, 1.0, -1.0], 2).unwrap();
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "trailing byte");
        assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "short");
        assert!(decode(&bytes[..HEADER]).is_err(), "no rows");
        for at in [0, 4, 6, 8, 12, 14] {
            let mut d = bytes.clone();
            d[at] ^= 0x40;
            assert!(decode(&d).is_err(), "header byte {at}");
        }
        let mut min = bytes.clone();
        min[HEADER..HEADER + 2].copy_from_slice(&i16::MIN.to_le_bytes());
        assert!(decode(&min).is_err(), "-32768");
        // A header claiming 2^32 − 1 rows is refused before anything is allocated.
        let mut huge = bytes.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
    }
}
