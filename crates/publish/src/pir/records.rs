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

/// Bytes of a ranking record's item (id, label, features, gallery index, unit digest) at
/// dimension `dim`, and of its two headers (the record's and the embedded block's).
fn slot_len(dim: usize) -> usize {
    8 + 1 + 2 * dim + 4 + DIGEST
}
const HEADERS: usize = HEADER + 16;

/// A ranking record read as every slot the padded record could hold — the record's items,
/// then whatever bytes the later slots' places hold — with what failed, if anything.
#[derive(Debug, Clone)]
pub struct RankSlots {
    /// The slots the padded record could hold: `(len − 28) / (29 + 2·dim)` for a padded record
    /// of `len` bytes, public (the database's record length and the query's dimension).
    pub capacity: usize,
    /// The items the record declares (at most `capacity`; the rest of the slots are not items).
    pub n: usize,
    pub dim: usize,
    /// `capacity` of each: ids, labels, dequantised features (`capacity · dim`), gallery
    /// indices, unit digests.
    pub ids: Vec<u64>,
    pub labels: Vec<u8>,
    pub features: Vec<f32>,
    pub indices: Vec<u32>,
    pub digests: Vec<[u8; DIGEST]>,
    /// Why the record is refused (`None`: it passed every check [`decode_rank_record`] makes).
    pub refused: Option<PirError>,
}

/// A padded ranking record, checked and read with the same work whatever it holds: for
/// [`decode_rank_record`]'s checks and values, where how much work is done must not say how
/// many items the record holds or whether a check passed (a level's record, the block of the
/// photo — `client::pir_search::rank_padded`).
///
/// # Guarantee
/// For a given `padded.len()` and `dim` (both public: the database's record length and the
/// query's dimension) the sequence of operations is fixed — which loops run and how often,
/// what is allocated, how many SHA-256 blocks are compressed — whatever the bytes, in
/// particular whatever item count the record declares and whether its hash, padding or
/// structure check passes. Only a `padded.len()` shorter than the two headers, or a zero
/// `dim`, returns early (public sizes). The bytes do change which addresses of `padded` are
/// read for a slot (its fields' offsets follow the item count), not how many are read.
///
/// # Proof sketch
/// * Header: fixed-offset reads; every check is folded into booleans, none returns.
/// * Count: `n` = min(declared, capacity), a select; `fits` records whether it was clamped.
/// * Hash: [`sha256_prefix`] compresses `⌊(len + 8)/64⌋ + 1` blocks for every prefix length
///   and keeps the state after the prefix's last block by a mask; the padding check ORs every
///   byte, masked by its position against the prefix length, in the same pass.
/// * Items: one loop over all `capacity` slots, each reading one id, label, `dim` features,
///   index and digest at offsets computed from `n` (in bounds for every slot when `n ≤
///   capacity`: a record of `capacity` items fits `len`); no loop bound is `n`.
/// * The failure, if any, is chosen after all of this (a small error value).
pub fn read_rank_slots(
    padded: &[u8],
    expected_hash: &str,
    dim: usize,
) -> Result<RankSlots, PirError> {
    let bad = |m: &str| PirError::Malformed(m.to_string());
    if padded.len() < HEADERS || dim == 0 {
        return Err(bad("ranking record shorter than its header"));
    }
    let len = padded.len();
    let per = slot_len(dim);
    let capacity = (len - HEADERS) / per;
    let u16_at = |at: usize| u16::from_le_bytes([padded[at], padded[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(padded[at..at + 4].try_into().expect("4 bytes"));
    // The record's header, then the embedded block's (`publish::blocks`, at offset 12).
    let declared = u32_at(24) as usize;
    let n = declared.min(capacity);
    let block_len = 16 + n * (9 + 2 * dim);
    let fits = (u32_at(0) == u32::from_le_bytes(*MAGIC))
        & (u16_at(4) == VERSION)
        & (declared <= capacity)
        & (u32_at(8) as usize == block_len);
    let block = (u32_at(12) == u32::from_le_bytes(*blocks::MAGIC))
        & (u16_at(16) == blocks::VERSION)
        & (u16_at(18) as usize == dim)
        & (u16_at(20) == 0);
    let record_len = HEADERS + n * per;
    let (digest, padding) = sha256_prefix(padded, record_len);
    let got = hex::encode(digest);
    let hash = got.eq_ignore_ascii_case(expected_hash);
    // Every slot, from the places a record of `n` items keeps each field.
    let labels_at = HEADERS + 8 * n;
    let features_at = labels_at + n;
    let indices_at = features_at + 2 * dim * n;
    let digests_at = indices_at + 4 * n;
    let mut ids = Vec::with_capacity(capacity);
    let mut labels = Vec::with_capacity(capacity);
    let mut features = Vec::with_capacity(capacity * dim);
    let mut indices = Vec::with_capacity(capacity);
    let mut digests = Vec::with_capacity(capacity);
    for i in 0..capacity {
        let id = HEADERS + 8 * i;
        ids.push(u64::from_le_bytes(
            padded[id..id + 8].try_into().expect("8 bytes"),
        ));
        labels.push(padded[labels_at + i]);
        let f = features_at + 2 * dim * i;
        features.extend(
            padded[f..f + 2 * dim]
                .chunks_exact(2)
                .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])) / blocks::FEATURE_SCALE),
        );
        indices.push(u32_at(indices_at + 4 * i));
        let g = digests_at + DIGEST * i;
        digests.push(padded[g..g + DIGEST].try_into().expect("16 bytes"));
    }
    let refused = if !fits {
        Some(bad("the ranking record's header does not fit its items"))
    } else if !hash {
        Some(PirError::HashMismatch {
            what: "ranking record",
            expected: expected_hash.to_string(),
            got,
        })
    } else if padding != 0 {
        Some(bad("non-zero padding"))
    } else if !block {
        Some(bad("embedded block disagrees with the record"))
    } else {
        None
    };
    Ok(RankSlots {
        capacity,
        n,
        dim,
        ids,
        labels,
        features,
        indices,
        digests,
        refused,
    })
}

/// SHA-256 of `bytes[..len]`, and the OR of `bytes[len..]` (zero when the rest is zero
/// padding), with the same work for every `len ≤ bytes.len()`.
///
/// # Guarantee and proof sketch
/// The message of `len` bytes, padded as SHA-256 pads it, ends in block `f = ⌊(len + 8)/64⌋`;
/// every `len ≤ bytes.len()` has `f ≤ last = ⌊(bytes.len() + 8)/64⌋`. Blocks `0..=last` are
/// all built and compressed, word by word (8 bytes): a word keeps its bytes before `len` by a
/// mask made with shifts from `len` (no branch), gets `0x80` at `len` where `len` falls in it
/// (a masked shift), and block `f`'s last word ORs the bit length by a mask on `j = f` (the
/// bytes there are past `len`: `len ≤ 64f + 55`). The state after block `f` is kept by a
/// mask. So the work is `last + 1` compressions of `8 (last + 1)` masked words whatever `len`
/// (the compression runs the same rounds on any block); only the public `bytes.len()` says
/// which blocks are copied from a short tail.
fn sha256_prefix(bytes: &[u8], len: usize) -> ([u8; 32], u64) {
    use sha2::digest::generic_array::GenericArray;
    const IV: [u32; 8] = [
        0x6a09_e667,
        0xbb67_ae85,
        0x3c6e_f372,
        0xa54f_f53a,
        0x510e_527f,
        0x9b05_688c,
        0x1f83_d9ab,
        0x5be0_cd19,
    ];
    let mask = |b: bool| u64::from(b).wrapping_neg();
    let last = (bytes.len() + 8) / 64;
    let f = (len + 8) / 64;
    // The bit length, big-endian, as the block's last word reads it (little-endian).
    let bit_len = u64::from_le_bytes((len as u64 * 8).to_be_bytes());
    // The bytes after the last whole block, and zeros for up to two blocks after them.
    let whole = bytes.len() / 64;
    let mut tail = [0u8; 128];
    tail[..bytes.len() - 64 * whole].copy_from_slice(&bytes[64 * whole..]);
    let (mut state, mut kept) = (IV, [0u32; 8]);
    let mut padding = 0u64;
    let mut block = [0u8; 64];
    for j in 0..=last {
        let at = 64 * j;
        let src = match j.checked_sub(whole) {
            None => &bytes[at..at + 64],
            Some(t) => &tail[64 * t..64 * t + 64],
        };
        let end = mask(j == f);
        for (w, (out, x)) in block
            .chunks_exact_mut(8)
            .zip(src.chunks_exact(8))
            .enumerate()
        {
            let p = at + 8 * w;
            let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
            // This word's bytes before `len`: 0 to 8, the low ones.
            let c = len.saturating_sub(p).min(8);
            let inside = (u64::MAX >> ((64 - 8 * c) & 63)) & mask(c != 0);
            padding |= x & !inside;
            let e = len.wrapping_sub(p);
            let marker = (0x80u64 << (8 * (e & 7))) & mask(e < 8);
            let length = bit_len & end & mask(w == 7);
            out.copy_from_slice(&((x & inside) | marker | length).to_le_bytes());
        }
        sha2::compress256(
            &mut state,
            std::slice::from_ref(GenericArray::from_slice(&block)),
        );
        let keep = u32::from(j == f).wrapping_neg();
        for (k, &s) in kept.iter_mut().zip(&state) {
            *k |= s & keep;
        }
    }
    let mut digest = [0u8; 32];
    for (d, w) in digest.chunks_exact_mut(4).zip(kept) {
        d.copy_from_slice(&w.to_be_bytes());
    }
    (digest, padding)
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

    #[test]
    fn the_prefix_hash_is_sha256_of_the_prefix_and_reads_the_rest_as_padding() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8 | 1).collect();
        for len in 0..=bytes.len() {
            let (digest, padding) = sha256_prefix(&bytes, len);
            assert_eq!(
                hex::encode(digest),
                blocks::hash_hex(&bytes[..len]),
                "len {len}"
            );
            assert_eq!(padding == 0, len == bytes.len(), "len {len}");
            let mut zeroed = bytes.clone();
            zeroed[len..].fill(0);
            assert_eq!(sha256_prefix(&zeroed, len), (digest, 0), "len {len}");
        }
    }

    #[test]
    fn rank_slots_hold_what_decoding_gives_and_refuse_alike() {
        let dim = 3;
        let f: Vec<[f32; 3]> = (0..5).map(|i| [0.1 * i as f32, -0.5, 0.25]).collect();
        let items: Vec<RankItem> = (0..5)
            .map(|i| RankItem {
                id: 40 + i as u64,
                label: i as u8,
                features: &f[i],
                index: 9 - i as u32,
                digest: [i as u8 + 1; DIGEST],
            })
            .collect();
        let padded_len = rank_record_len(7, dim) + 5;
        for n in [0usize, 1, 5] {
            let rec = encode_rank_record(&items[..n], dim).unwrap();
            let h = blocks::hash_hex(&rec);
            let mut padded = rec.clone();
            padded.resize(padded_len, 0);
            let s = read_rank_slots(&padded, &h, dim).unwrap();
            assert!(s.refused.is_none(), "{n}: {:?}", s.refused);
            assert_eq!((s.capacity, s.n), (7, n));
            assert_eq!(
                (s.ids.len(), s.features.len(), s.digests.len()),
                (7, 7 * dim, 7)
            );
            let d = decode_rank_record(&padded, &h).unwrap();
            assert_eq!(s.ids[..n], d.block.ids[..]);
            assert_eq!(s.labels[..n], d.block.labels[..]);
            assert_eq!(s.features[..n * dim], d.block.features[..]);
            assert_eq!(s.indices[..n], d.indices[..]);
            assert_eq!(s.digests[..n], d.digests[..]);
            // Each check refuses, and the slots are read all the same.
            let refused = |p: &[u8], h: &str, dim: usize| {
                let s = read_rank_slots(p, h, dim).unwrap();
                assert_eq!(s.ids.len(), s.capacity);
                s.refused.map(|e| e.to_string()).unwrap_or_default()
            };
            if n > 0 {
                let mut bad = padded.clone();
                bad[rec.len() - 1] ^= 1;
                assert!(refused(&bad, &h, dim).contains("SHA-256"));
            }
            let mut bad = padded.clone();
            *bad.last_mut().unwrap() = 1;
            assert!(refused(&bad, &h, dim).contains("padding"));
            let mut bad = padded.clone();
            bad[24..28].copy_from_slice(&8u32.to_le_bytes());
            assert!(refused(&bad, &h, dim).contains("does not fit"));
            let mut bad = padded.clone();
            bad[10] ^= 1;
            assert!(refused(&bad, &h, dim).contains("does not fit"));
            assert!(refused(&padded, &h, dim + 1).contains("malformed"));
        }
        assert!(read_rank_slots(&[0; 27], "", dim).is_err());
    }
}
