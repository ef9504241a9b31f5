//! The block file: what a client downloads, identical for every client, and the client's exact
//! ranking over the blocks it downloaded.
//!
//! # Format (version 2, little-endian, columnar so it compresses well)
//! ```text
//! offset  size        field
//! 0       4           magic "PMBK"
//! 4       2           format version (2)
//! 6       2           d, feature dimension (≤ 4,096)
//! 8       2           t, thumbnail side (t×t grey pixels)
//! 10      2           reserved, 0
//! 12      4           n, item count (≤ 2^20)
//! 16      8·n         item ids (u64)
//! ..      n           labels (u8)
//! ..      2·d·n       features, i16, value = q / 32767 (unit-norm features, |v| ≤ 1)
//! ..      p·n         thumbnails, p = ⌈3·t²/8⌉ bytes each: 3 bits a pixel (`publish::thumbs`;
//!                     light object on dark, as the model sees it)
//! ```
//! Nothing follows. A block's hash is the SHA-256 of these bytes (hex); the partition document
//! lists it, and the client refuses a block whose bytes do not match. Servers may send the
//! bytes gzip-compressed (`Content-Encoding`); the hash is of the uncompressed bytes.
//!
//! # Exactness of the ranking
//! The client ranks by squared L2 distance between its exact query features and the block's
//! dequantised features. Quantisation moves each gallery vector by at most `√d / 65534`
//! (1.2·10⁻⁴ at d = 64) in L2, so only pairs of gallery items whose distances to the query are
//! that close can swap; the evaluation measures the effect.

use crate::thumbs;
use crate::topk::TopK;
use shared::error::{Error, Result};
use shared::params::limits;

pub(crate) const MAGIC: &[u8; 4] = b"PMBK";
pub(crate) const VERSION: u16 = 2;
const HEADER: usize = 16;
/// Quantisation scale of the features.
pub const FEATURE_SCALE: f32 = 32767.0;

/// Errors in a block file: the client shows them, never panics.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BlockError {
    #[error("block file is malformed: {0}")]
    Malformed(String),
    #[error("block hash mismatch: expected {expected}, got {got}")]
    HashMismatch { expected: String, got: String },
}

impl From<BlockError> for Error {
    fn from(e: BlockError) -> Self {
        Error::InvalidParameter {
            name: "block",
            reason: e.to_string(),
        }
    }
}

/// One gallery item as it goes into a block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockItem<'a> {
    pub id: u64,
    pub label: u8,
    pub features: &'a [f32],
    pub thumbnail: &'a [u8],
}

/// A decoded block: columns as in the file, features dequantised.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub dim: usize,
    pub thumb_side: usize,
    pub ids: Vec<u64>,
    pub labels: Vec<u8>,
    /// `n × d`, dequantised.
    pub features: Vec<f32>,
    /// `n × t·t` grey bytes, as drawn (decoded from the file's 3-bit form).
    pub thumbnails: Vec<u8>,
}

impl Block {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn thumbnail(&self, i: usize) -> &[u8] {
        let t = self.thumb_side * self.thumb_side;
        &self.thumbnails[i * t..(i + 1) * t]
    }
}

/// Quantise one feature value.
#[inline]
pub fn quantise(v: f32) -> i16 {
    (v.clamp(-1.0, 1.0) * FEATURE_SCALE).round() as i16
}

/// Encode items into a block file.
pub fn encode(items: &[BlockItem<'_>], dim: usize, thumb_side: usize) -> Result<Vec<u8>> {
    if dim == 0 || dim > limits::MAX_FEATURE_DIM || thumb_side > limits::MAX_THUMB_SIDE {
        return Err(Error::InvalidParameter {
            name: "block",
            reason: format!("dimension {dim} or thumbnail side {thumb_side} out of range"),
        });
    }
    if items.len() > limits::MAX_BLOCK_ITEMS {
        return Err(Error::TooLarge {
            what: "block items",
            count: items.len(),
            limit: limits::MAX_BLOCK_ITEMS,
        });
    }
    let t2 = thumb_side * thumb_side;
    let n = items.len();
    let mut out = Vec::with_capacity(HEADER + n * (9 + 2 * dim + thumbs::packed_len(thumb_side)));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(dim as u16).to_le_bytes());
    out.extend_from_slice(&(thumb_side as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    for it in items {
        out.extend_from_slice(&it.id.to_le_bytes());
    }
    out.extend(items.iter().map(|it| it.label));
    for it in items {
        if it.features.len() != dim || it.thumbnail.len() != t2 {
            return Err(Error::DimensionMismatch {
                what: "block item",
                expected: dim,
                got: it.features.len(),
            });
        }
        if it.features.iter().any(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "block item features",
            });
        }
        for &v in it.features {
            out.extend_from_slice(&quantise(v).to_le_bytes());
        }
    }
    for it in items {
        thumbs::pack_into(it.thumbnail, thumb_side, &mut out)?;
    }
    Ok(out)
}

pub use shared::digest::hash_hex;

/// Bytes of a block file of `n` items of dimension `dim` with `t`×`t` thumbnails (`None` if it
/// does not fit a `u64`): a partition document's declared sizes must agree with it.
pub fn file_len(n: u64, dim: u64, t: u64) -> Option<u64> {
    let thumb = t
        .checked_mul(t)?
        .checked_mul(thumbs::BITS as u64)?
        .div_ceil(8);
    let per_item = 9u64.checked_add(dim.checked_mul(2)?)?.checked_add(thumb)?;
    n.checked_mul(per_item)?.checked_add(HEADER as u64)
}

/// The most bytes a gzip stream of `bytes` uncompressed bytes can take (stored blocks: 5 bytes
/// per 16 KiB, plus the header and trailer), with room to spare.
pub fn max_transfer_len(bytes: u64) -> u64 {
    bytes.saturating_add(bytes / 1_024).saturating_add(1_024)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The header's dimension, thumbnail side and item count, once the file's length agrees with
/// them (checked before anything is allocated for a count the bytes do not hold).
fn shape(bytes: &[u8]) -> std::result::Result<(usize, usize, usize), BlockError> {
    let bad = |m: &str| BlockError::Malformed(m.to_string());
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return Err(bad("missing the PMBK header"));
    }
    if u16_at(bytes, 4) != VERSION {
        return Err(bad("unknown format version"));
    }
    let dim = u16_at(bytes, 6) as usize;
    let thumb_side = u16_at(bytes, 8) as usize;
    let n = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    if dim == 0
        || dim > limits::MAX_FEATURE_DIM
        || n > limits::MAX_BLOCK_ITEMS
        || thumb_side > limits::MAX_THUMB_SIDE
    {
        return Err(bad("dimension, thumbnail side or item count out of range"));
    }
    let need = file_len(n as u64, dim as u64, thumb_side as u64).unwrap_or(u64::MAX);
    if bytes.len() as u64 != need {
        return Err(BlockError::Malformed(format!(
            "length {} does not match {n} items of dimension {dim} (expected {need})",
            bytes.len()
        )));
    }
    Ok((dim, thumb_side, n))
}

/// The item ids of a block file whose shape is checked as [`decode`] checks it, without
/// decoding its features or thumbnails (for a server reading its own files, which needs only
/// the ids: it neither checks a hash nor the thumbnails' padding).
pub fn decode_ids(bytes: &[u8]) -> std::result::Result<Vec<u64>, BlockError> {
    let (_, _, n) = shape(bytes)?;
    Ok(read_ids(bytes, n))
}

/// The `n` ids after the header (the caller has checked the length with [`shape`]).
fn read_ids(bytes: &[u8], n: usize) -> Vec<u64> {
    bytes[HEADER..HEADER + 8 * n]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Decode a block file, after checking its hash against `expected_hash` (hex) when given.
pub fn decode(bytes: &[u8], expected_hash: Option<&str>) -> std::result::Result<Block, BlockError> {
    if let Some(expected) = expected_hash {
        let got = hash_hex(bytes);
        if !got.eq_ignore_ascii_case(expected) {
            return Err(BlockError::HashMismatch {
                expected: expected.to_string(),
                got,
            });
        }
    }
    let (dim, thumb_side, n) = shape(bytes)?;
    let t2 = thumb_side * thumb_side;
    let ids = read_ids(bytes, n);
    let mut at = HEADER + 8 * n;
    let labels = bytes[at..at + n].to_vec();
    at += n;
    let features = bytes[at..at + 2 * dim * n]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32 / FEATURE_SCALE)
        .collect();
    at += 2 * dim * n;
    let p = thumbs::packed_len(thumb_side);
    let mut thumbnails = Vec::with_capacity(t2 * n);
    for i in 0..n {
        thumbs::unpack_into(
            &bytes[at + i * p..at + (i + 1) * p],
            thumb_side,
            &mut thumbnails,
        )
        .map_err(|e| BlockError::Malformed(format!("item {i}: {e}")))?;
    }
    Ok(Block {
        dim,
        thumb_side,
        ids,
        labels,
        features,
        thumbnails,
    })
}

/// One ranked result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub label: u8,
    /// Squared L2 distance to the query.
    pub distance: f32,
    /// Which of the ranked blocks holds it, and where.
    pub block: usize,
    pub index: usize,
}

/// The exact top `k` of the union of `blocks` for `query` (its exact features), nearest first,
/// ties to the lower id; an item held by several blocks counts once.
pub fn rank(query: &[f32], blocks: &[Block], k: usize) -> Result<Vec<Hit>> {
    if k == 0 || k > limits::MAX_RANK_K {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("must be in 1..={}", limits::MAX_RANK_K),
        });
    }
    // The blocks' dimension is checked against the query's below.
    shared::error::ensure_query_f32(query, query.len())?;
    for b in blocks {
        if b.dim != query.len() {
            return Err(Error::DimensionMismatch {
                what: "block features",
                expected: query.len(),
                got: b.dim,
            });
        }
    }
    // Rank positions over all blocks, then deduplicate ids among the best candidates: take
    // enough that duplicates cannot crowd out the k-th distinct item.
    let copies = blocks.len().max(1);
    let mut top = TopK::new(k * copies);
    let mut pos = Vec::new();
    for (bi, b) in blocks.iter().enumerate() {
        for (i, f) in b.features.chunks_exact(b.dim).enumerate() {
            let d: f32 = f.iter().zip(query).map(|(x, y)| (x - y) * (x - y)).sum();
            // Ties between equal distances break on the item id (stable across blocks).
            top.push(d, pos.len() as u32);
            pos.push((bi, i));
        }
    }
    let mut cands: Vec<(f32, u64, usize, usize)> = top
        .into_pairs()
        .into_iter()
        .map(|(d, p)| {
            let (bi, i) = pos[p as usize];
            (d, blocks[bi].ids[i], bi, i)
        })
        .collect();
    cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out: Vec<Hit> = Vec::with_capacity(k);
    for (d, id, bi, i) in cands {
        if out.iter().any(|h| h.id == id) {
            continue;
        }
        out.push(Hit {
            id,
            label: blocks[bi].labels[i],
            distance: d,
            block: bi,
            index: i,
        });
        if out.len() == k {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize, dim: usize) -> (Vec<Vec<f32>>, Vec<Vec<u8>>) {
        let feats = (0..n)
            .map(|i| {
                let mut v: Vec<f32> = (0..dim)
                    .map(|j| ((i * 7 + j * 3) % 11) as f32 - 5.0)
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect();
        // Grey values the 3-bit thumbnails hold exactly.
        let thumbs = (0..n)
            .map(|i| vec![thumbs::grey((i % 8) as u8); 4])
            .collect();
        (feats, thumbs)
    }

    fn block_of(ids: &[u64], feats: &[Vec<f32>], thumbs: &[Vec<u8>]) -> Vec<u8> {
        let its: Vec<BlockItem> = ids
            .iter()
            .map(|&id| BlockItem {
                id,
                label: (id % 10) as u8,
                features: &feats[id as usize],
                thumbnail: &thumbs[id as usize],
            })
            .collect();
        encode(&its, feats[0].len(), 2).unwrap()
    }

    #[test]
    fn ids_alone_agree_with_the_full_decode() {
        let (f, t) = items(20, 8);
        let bytes = block_of(&[3, 1, 7], &f, &t);
        assert_eq!(decode_ids(&bytes).unwrap(), vec![3, 1, 7]);
        assert_eq!(
            decode_ids(&bytes).unwrap(),
            decode(&bytes, None).unwrap().ids
        );
        assert!(decode_ids(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn round_trip_and_hash_check() {
        let (f, t) = items(20, 8);
        let bytes = block_of(&[3, 1, 7], &f, &t);
        let h = hash_hex(&bytes);
        let b = decode(&bytes, Some(&h)).unwrap();
        assert_eq!(b.ids, vec![3, 1, 7]);
        assert_eq!(b.labels, vec![3, 1, 7]);
        assert_eq!(b.thumbnail(2), &[thumbs::grey(7); 4]);
        for (q, x) in b.features[..8].iter().zip(&f[3]) {
            assert!((q - x).abs() <= 0.5 / FEATURE_SCALE + 1e-7);
        }
        let mut tampered = bytes.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(matches!(
            decode(&tampered, Some(&h)),
            Err(BlockError::HashMismatch { .. })
        ));
        assert!(decode(&bytes[..bytes.len() - 1], None).is_err());
        assert!(decode(b"PMBK", None).is_err());
        assert!(decode(&[0u8; 40], None).is_err());
    }

    #[test]
    fn rank_is_the_exact_top_k_of_the_union_without_duplicates() {
        let (f, t) = items(60, 8);
        let a = decode(&block_of(&(0..40).collect::<Vec<_>>(), &f, &t), None).unwrap();
        let b = decode(&block_of(&(20..60).collect::<Vec<_>>(), &f, &t), None).unwrap();
        let q = f[25].clone();
        let hits = rank(&q, &[a.clone(), b.clone()], 10).unwrap();
        let mut ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
        let distinct = {
            let mut s = ids.clone();
            s.sort();
            s.dedup();
            s.len()
        };
        assert_eq!(distinct, 10);
        // Brute force over the union with the same dequantised features.
        let whole = decode(&block_of(&(0..60).collect::<Vec<_>>(), &f, &t), None).unwrap();
        let want: Vec<u64> = rank(&q, &[whole], 10)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(ids, want);
        ids.sort();
        assert!(rank(&q, std::slice::from_ref(&a), 0).is_err());
        assert!(rank(&q[..4], &[a], 3).is_err());
        assert!(rank(&[f32::NAN; 8], &[b], 3).is_err());
    }
}
