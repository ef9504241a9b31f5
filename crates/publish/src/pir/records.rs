//! What PIR databases hold: ranking records (a block's items without thumbnails) and
//! thumbnail records, and how a client checks each.
//!
//! # Ranking record (version 1, little-endian)
//! ```text
//! offset  size      field
//! 0       4         magic "PMRK"
//! 4       2         format version (1)
//! 6       2         reserved, 0
//! 8       4         b, bytes of the embedded block file
//! 12      b         a block file (`publish::blocks`, thumbnail side 0): ids, labels, features
//! ..      4·n       each item's gallery index = its thumbnail record
//! ..      16·n      each item's unit digest (see `unit_digest`)
//! ```
//! then zero padding up to the database's record length. The published hash is the SHA-256 of
//! the record without padding.
//!
//! # Thumbnail record
//! The packed `t×t` thumbnail of gallery item `i` (record `i`; 3 bits a pixel, 294 bytes at
//! `t = 28`, `publish::thumbs`), followed by its `i16` features where the server verifies
//! scores.
//!
//! # Unit digests
//! A client asking for record `i` decodes its whole *unit* (`pir::Shape::unit_of`: the column
//! the record is stacked in with its neighbours, or the columns it spans), so the publisher
//! commits to one 128-bit digest a unit, `SHA-256("PMTU" ‖ u as u32 ‖ unit bytes)[..16]`, and
//! the client checks the unit it decoded before it reads the record out of it. Binding `u`
//! stops a server from answering with another unit; the record's place in the unit is fixed
//! by the public shape, so a record cannot be swapped within its unit either. One digest a
//! unit instead of one a record: at a million thumbnails stacked 32 to a column, 0.5 MB in
//! the public file instead of 16 MB. The digest of an item's unit sits in every ranking record
//! that holds the item (and in the hintless ranking's public file), so a verified ranking
//! vouches for the thumbnails it points to.

use sha2::{Digest, Sha256};

use crate::blocks::{self, Block, BlockItem, Hit};
use ::pir::client::PirError;

const MAGIC: &[u8; 4] = b"PMRK";
/// 2: the digests are of units, not of single thumbnails.
const VERSION: u16 = 2;
const HEADER: usize = 12;
/// Bytes of a thumbnail digest.
pub const DIGEST: usize = 16;

/// One item of a ranking record.
#[derive(Debug, Clone)]
pub struct RankItem<'a> {
    pub id: u64,
    pub label: u8,
    pub features: &'a [f32],
    /// Gallery index (its thumbnail record).
    pub index: u32,
    /// The digest of the item's thumbnail unit ([`unit_digest`]).
    pub digest: [u8; DIGEST],
}

/// A verified, decoded ranking record.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRecord {
    /// Ids, labels and dequantised features (no thumbnails).
    pub block: Block,
    pub indices: Vec<u32>,
    pub digests: Vec<[u8; DIGEST]>,
}

/// The ranked top k with what fetching their thumbnails needs (from a ranking record, the
/// table, or the hintless scores; also `client::pir_search::Ranked`).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub hits: Vec<Hit>,
    /// Each hit's gallery index (its thumbnail record) and the digest of its record's unit.
    pub indices: Vec<u32>,
    pub digests: Vec<[u8; DIGEST]>,
    /// The hintless ranking's decrypted score `T = 2⟨q, f⟩ − ‖f‖²` of each hit (empty for the
    /// table and levels, whose records are verified by hash): checked against the features
    /// the thumbnail records carry where the server publishes them
    /// ([`client::pir_search::verify_scores`]).
    pub scores: Vec<i64>,
}

/// The digest of thumbnail unit `unit` (its decoded bytes, `pir::Shape::unit_bytes`).
pub fn unit_digest(unit: u32, bytes: &[u8]) -> [u8; DIGEST] {
    let mut h = Sha256::new();
    h.update(b"PMTU");
    h.update(unit.to_le_bytes());
    h.update(bytes);
    h.finalize()[..DIGEST].try_into().expect("16 bytes")
}

/// Every unit's digest of a thumbnail database of `shape` over `records` (the records
/// `pir::layout::Database::build` is given), in unit order.
pub fn unit_digests(shape: &::pir::layout::Shape, records: &[Vec<u8>]) -> Vec<[u8; DIGEST]> {
    (0..shape.units())
        .map(|u| unit_digest(u as u32, &shape.unit_bytes(u, |i| &records[i])))
        .collect()
}

/// Bytes of the (unpadded) ranking record of `n` items of dimension `dim`: what a level's
/// database costs is known from the partition document's block sizes before any is encoded.
pub fn rank_record_len(n: usize, dim: usize) -> usize {
    let block = blocks::file_len(n as u64, dim as u64, 0).expect("bounded sizes") as usize;
    HEADER + block + n * (4 + DIGEST)
}

/// Encodes a ranking record (unpadded).
pub fn encode_rank_record(items: &[RankItem<'_>], dim: usize) -> shared::error::Result<Vec<u8>> {
    let block_items: Vec<BlockItem<'_>> = items
        .iter()
        .map(|it| BlockItem {
            id: it.id,
            label: it.label,
            features: it.features,
            thumbnail: &[],
        })
        .collect();
    let block = blocks::encode(&block_items, dim, 0)?;
    let mut out = Vec::with_capacity(HEADER + block.len() + items.len() * (4 + DIGEST));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(block.len() as u32).to_le_bytes());
    out.extend_from_slice(&block);
    for it in items {
        out.extend_from_slice(&it.index.to_le_bytes());
    }
    for it in items {
        out.extend_from_slice(&it.digest);
    }
    Ok(out)
}

/// The length of the record a padded ranking record's header declares (what
/// [`decode_rank_record`] hashes), or `None` where the header does not fit.
pub fn declared_len(padded: &[u8]) -> Option<usize> {
    if padded.len() < HEADER || &padded[..4] != MAGIC {
        return None;
    }
    let block_len = u32::from_le_bytes(padded[8..12].try_into().expect("4 bytes")) as usize;
    let n_at = HEADER + 12;
    if block_len < 16 || padded.len() < n_at + 4 || HEADER + block_len > padded.len() {
        return None;
    }
    let n = u32::from_le_bytes(padded[n_at..n_at + 4].try_into().expect("4 bytes")) as usize;
    n.checked_mul(4 + DIGEST)
        .and_then(|t| t.checked_add(HEADER + block_len))
        .filter(|&l| l <= padded.len())
}

/// Decodes a ranking record that may carry zero padding, after checking the unpadded bytes
/// against `expected_hash` (SHA-256, hex). Never trusts a length it has not bounded.
pub fn decode_rank_record(padded: &[u8], expected_hash: &str) -> Result<RankRecord, PirError> {
    let bad = |m: String| PirError::Malformed(m);
    if padded.len() < HEADER || &padded[..4] != MAGIC {
        return Err(bad("missing the PMRK header".into()));
    }
    if u16::from_le_bytes([padded[4], padded[5]]) != VERSION {
        return Err(bad("unknown ranking record version".into()));
    }
    let block_len = u32::from_le_bytes(padded[8..12].try_into().expect("4 bytes")) as usize;
    // The item count is in the embedded block's header (offset 12 of the block).
    let n_at = HEADER + 12;
    if block_len < 16 || padded.len() < n_at + 4 || HEADER + block_len > padded.len() {
        return Err(bad("embedded block does not fit the record".into()));
    }
    let n = u32::from_le_bytes(padded[n_at..n_at + 4].try_into().expect("4 bytes")) as usize;
    let len = n
        .checked_mul(4 + DIGEST)
        .and_then(|t| t.checked_add(HEADER + block_len))
        .filter(|&l| l <= padded.len())
        .ok_or_else(|| bad(format!("{n} items do not fit {} bytes", padded.len())))?;
    let (record, padding) = padded.split_at(len);
    let got = blocks::hash_hex(record);
    if !got.eq_ignore_ascii_case(expected_hash) {
        return Err(PirError::HashMismatch {
            what: "ranking record",
            expected: expected_hash.to_string(),
            got,
        });
    }
    // Every padding byte is read (no early exit): the client equalises the rest of this work.
    if padding.iter().fold(0u8, |a, &b| a | b) != 0 {
        return Err(bad("non-zero padding".into()));
    }
    let block = blocks::decode(&record[HEADER..HEADER + block_len], None)
        .map_err(|e| bad(e.to_string()))?;
    if block.len() != n || block.thumb_side != 0 {
        return Err(bad("embedded block disagrees with the record".into()));
    }
    let mut at = HEADER + block_len;
    let indices = record[at..at + 4 * n]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    at += 4 * n;
    let digests = record[at..]
        .chunks_exact(DIGEST)
        .map(|c| c.try_into().expect("16 bytes"))
        .collect();
    Ok(RankRecord {
        block,
        indices,
        digests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_records_round_trip_with_padding_and_refuse_tampering() {
        let f = [[0.6f32, 0.8], [1.0, 0.0]];
        let px = [vec![1u8; 4], vec![2u8; 4]];
        let items: Vec<RankItem> = (0..2)
            .map(|i| RankItem {
                id: 100 + i as u64,
                label: i as u8,
                features: &f[i],
                index: 7 + i as u32,
                digest: unit_digest(i as u32, &px[i]),
            })
            .collect();
        let rec = encode_rank_record(&items, 2).unwrap();
        assert_eq!(rec.len(), rank_record_len(2, 2));
        assert_eq!(
            encode_rank_record(&items[..1], 2).unwrap().len(),
            rank_record_len(1, 2)
        );
        let h = blocks::hash_hex(&rec);
        let mut padded = rec.clone();
        padded.resize(rec.len() + 13, 0);
        let d = decode_rank_record(&padded, &h).unwrap();
        assert_eq!(d.block.ids, vec![100, 101]);
        assert_eq!(d.indices, vec![7, 8]);
        assert_eq!(d.digests[1], unit_digest(1, &px[1]));
        let mut bad = padded.clone();
        bad[20] ^= 1;
        assert!(matches!(
            decode_rank_record(&bad, &h),
            Err(PirError::HashMismatch { .. })
        ));
        let mut bad = padded.clone();
        *bad.last_mut().unwrap() = 1;
        assert!(decode_rank_record(&bad, &h).is_err());
        assert!(decode_rank_record(&padded[..rec.len() - 1], &h).is_err());
        assert!(decode_rank_record(&[0u8; 40], &h).is_err());
        // A huge declared count is refused before any allocation.
        let mut huge = padded.clone();
        huge[HEADER + 12..HEADER + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_rank_record(&huge, &h).is_err());
    }

    #[test]
    fn unit_digests_bind_every_record_its_place_and_the_unit() {
        use ::pir::layout::Shape;
        // Three records a column (the last column one record and padding), and records that
        // span two columns.
        for (len, rows) in [(4usize, 12usize), (8, 4)] {
            let shape = Shape::new(len, 7, rows).unwrap();
            let recs: Vec<Vec<u8>> = (0..7).map(|r| vec![r as u8 + 1; len]).collect();
            let d = unit_digests(&shape, &recs);
            assert_eq!(d.len(), shape.units());
            // Distinct units, distinct digests (even with equal bytes: the index is bound).
            assert_ne!(unit_digest(0, &[0; 4]), unit_digest(1, &[0; 4]));
            for r in 0..7 {
                let u = shape.unit_of(r);
                let mut other = recs.clone();
                other[r][0] ^= 1;
                assert_ne!(unit_digests(&shape, &other)[u], d[u], "record {r}");
                if len < rows {
                    // Two records of a unit swapped: the same bytes in another order.
                    let mate = if r % 3 == 0 { r + 1 } else { r - 1 };
                    if mate < 7 {
                        other = recs.clone();
                        other.swap(r, mate);
                        assert_ne!(unit_digests(&shape, &other)[u], d[u], "swap {r}");
                    }
                }
            }
        }
    }
}
