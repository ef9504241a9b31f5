//! The hintless ranking as published and as every client runs it (browser and command line):
//! the document entry's checks, the public file, the query for the photo's block and the exact
//! top k from the answer. The scheme is [`::pir::scores`]; the level is a capped one
//! (`publish::partition::Overlap::Capped`), so the database has as many rows as its cap.
//!
//! # What leaves the client, and why it reveals nothing
//! One `POST` of exactly [`ScoresDoc::upload_bytes`]: RLWE samples under a fresh secret and the
//! packing-key bodies for it ([`::pir::scores`], "Guarantee"). The block (the photo's
//! nearest centroid among the level's public centroids) and the photo's quantised features are
//! inside the encrypted query vector, nowhere else; the size is the public shape's. The public
//! file is the same for everyone and fetched whole.
//!
//! # What the client checks
//! The public file against its published SHA-256, then its structure (every value reduced,
//! every block's count equal to the partition document's, indices ascending and inside the
//! gallery, the exact length); the answer's size and that every coefficient decodes within the
//! error bound ([`::pir::scores::decode`]: the key-error share proven, the rounding share heuristic). A hostile server can still return
//! wrong scores on purpose (encrypted scores carry no checksum); it cannot learn the photo, and
//! the thumbnails fetched next are checked against the public file's digests.

use rand::RngCore;

use crate::blocks::{hash_hex, quantise, Hit, FEATURE_SCALE};
use crate::centroids::Centroids;
use crate::partition::{nearest_centroid, Overlap};
use crate::pir::doc::{check_file, seed_hex, PirDoc, ScoresDoc};
use crate::pir::records::{Ranked, DIGEST};
use crate::pir::seeds::{self, Purpose};
use ::lattice::modq::Q;
use ::lattice::rlwe::{Ring, SecretKey};
use ::lattice::N;
use ::pir::client::PirError;
use ::pir::inspiring::InspiringMasks;
use ::pir::scores::{self, answer_len, decode_answer, encode_upload, upload_len, ScoreShape};
use shared::api::PartitionDoc;
use shared::error::{Error, Result};

/// The public file's first bytes (2: one digest a thumbnail unit, not a record).
const MAGIC: &[u8; 8] = b"PMSCORE2";
/// Bytes per gallery item in the public file: id, label.
const ITEM_BYTES: usize = 8 + 1;

impl ScoresDoc {
    pub fn shape(&self) -> ScoreShape {
        ScoreShape {
            blocks: self.blocks,
            dim: self.dim,
            rows: self.rows,
        }
    }
}

/// Checks the document's scores entry against the partition before anything is allocated from
/// it: the ring this code speaks, a capped level of the same block count whose blocks fit the
/// rows, the feature dimension, a servable shape, the sizes the shape implies, seeds, and a
/// bounded public file.
pub fn check(part: &PartitionDoc, doc: &ScoresDoc) -> Result<()> {
    let invalid = |reason: String| Error::InvalidParameter {
        name: "pir scores",
        reason,
    };
    let ld = part
        .levels
        .get(doc.level)
        .ok_or_else(|| invalid(format!("level {} does not exist", doc.level)))?;
    if doc.ring_n != N {
        return Err(invalid(format!("ring degree {} is not {N}", doc.ring_n)));
    }
    if !matches!(ld.overlap, Overlap::Capped { .. })
        || ld.blocks as usize != doc.blocks
        || doc.dim != part.feature_dim
        || ld.sizes.iter().any(|&s| s as usize > doc.rows)
    {
        return Err(invalid(format!(
            "the shape {:?} does not fit level {}",
            doc.shape(),
            doc.level
        )));
    }
    let shape = doc.shape();
    shape.check(N).map_err(crate::pir::from_lattice)?;
    if doc.upload_bytes != upload_len(&shape, N) as u64
        || doc.answer_bytes != answer_len(&shape, N) as u64
    {
        return Err(invalid("the declared sizes are not the shape's".into()));
    }
    seed_hex("pir scores query_seed", &doc.query_seed)?;
    seed_hex("pir scores packing_seed", &doc.packing_seed)?;
    check_file(&doc.public, "PIR scores public file")?;
    if doc.thumb_units == 0 || doc.thumb_units > part.gallery_size {
        return Err(invalid(format!(
            "{} thumbnail units for {} items",
            doc.thumb_units, part.gallery_size
        )));
    }
    let (least, most) = public_len(
        doc,
        part.gallery_size,
        ld.sizes.iter().map(|&s| s as u64).sum(),
    );
    if !(least..=most).contains(&doc.public.bytes) {
        return Err(invalid(
            "the public file's length does not fit its contents".into(),
        ));
    }
    Ok(())
}

/// The public file's least and largest length for `rows` rows in all: the row map's varints
/// take 1 to 5 bytes each.
fn public_len(doc: &ScoresDoc, items: usize, rows: u64) -> (u64, u64) {
    let parts = doc.shape().ciphertexts(N) * N * 8;
    let fixed =
        (MAGIC.len() + parts + doc.blocks * 4 + items * ITEM_BYTES + doc.thumb_units * DIGEST)
            as u64;
    (fixed + rows, fixed + 5 * rows)
}

/// The public file, decoded and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoresPublic {
    /// The packed answers' `a` parts, per plane and row chunk.
    pub public_a: Vec<Vec<u64>>,
    /// Each block's rows: gallery indices, ascending.
    pub rows: Vec<Vec<u32>>,
    pub ids: Vec<u64>,
    pub labels: Vec<u8>,
    /// Each thumbnail unit's digest (`records::unit_digest`), in unit order.
    pub digests: Vec<[u8; DIGEST]>,
}

impl ScoresPublic {
    /// The file's bytes (the server writes it; [`ScoresPublic::decode`] reads it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for a in &self.public_a {
            a.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        for block in &self.rows {
            out.extend_from_slice(&(block.len() as u32).to_le_bytes());
            let mut prev = 0u32;
            for (k, &i) in block.iter().enumerate() {
                // Ascending: the first index, then gaps of at least 1, as LEB128 varints.
                put_varint(&mut out, if k == 0 { i } else { i - prev });
                prev = i;
            }
        }
        // Column by column: the ids and labels compress, the digests do not.
        self.ids
            .iter()
            .for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
        out.extend_from_slice(&self.labels);
        self.digests.iter().for_each(|d| out.extend_from_slice(d));
        out
    }

    /// Reads the file fetched for `doc`: its SHA-256 first, then every structural rule (module
    /// docs), the block sizes from the partition document.
    pub fn decode(doc: &ScoresDoc, part: &PartitionDoc, bytes: &[u8]) -> Result<ScoresPublic> {
        check(part, doc)?;
        let got = hash_hex(bytes);
        if got != doc.public.sha256 {
            return Err(crate::pir::refused(PirError::HashMismatch {
                what: "scores public file",
                expected: doc.public.sha256.clone(),
                got,
            }));
        }
        let bad = |what: &str| -> Error {
            crate::pir::refused(PirError::Malformed(format!("scores file: {what}")))
        };
        let mut r = Reader { bytes, at: 0 };
        if r.take(MAGIC.len()).ok_or_else(|| bad("short"))? != MAGIC {
            return Err(bad("not a scores file"));
        }
        let polys = doc.shape().ciphertexts(N);
        let mut public_a = Vec::with_capacity(polys);
        for _ in 0..polys {
            let raw = r.take(N * 8).ok_or_else(|| bad("short"))?;
            let a: Vec<u64> = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            if a.iter().any(|&v| v >= Q.value) {
                return Err(bad("a value is not reduced modulo Q"));
            }
            public_a.push(a);
        }
        let sizes = &part.levels[doc.level].sizes;
        let items = part.gallery_size;
        let mut rows = Vec::with_capacity(doc.blocks);
        for &size in sizes {
            let count = r.u32().ok_or_else(|| bad("short"))?;
            if count != size {
                return Err(bad("a block's row count is not the partition's"));
            }
            let mut block = Vec::with_capacity(count as usize);
            let mut prev: Option<u32> = None;
            for _ in 0..count {
                let v = r.varint().ok_or_else(|| bad("a malformed index"))?;
                let i = match prev {
                    None => Some(v),
                    Some(p) if v > 0 => p.checked_add(v),
                    Some(_) => None,
                }
                .filter(|&i| (i as usize) < items)
                .ok_or_else(|| bad("indices must ascend within the gallery"))?;
                block.push(i);
                prev = Some(i);
            }
            rows.push(block);
        }
        let ids = r.take(items * 8).ok_or_else(|| bad("short"))?;
        let labels = r.take(items).ok_or_else(|| bad("short"))?;
        let digests = r
            .take(doc.thumb_units * DIGEST)
            .ok_or_else(|| bad("short"))?;
        if r.at != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(ScoresPublic {
            public_a,
            rows,
            ids: ids
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
            labels: labels.to_vec(),
            digests: digests
                .chunks_exact(DIGEST)
                .map(|c| c.try_into().expect("the digest's length"))
                .collect(),
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// A LEB128 `u32` of at most 5 bytes, canonical (no trailing zero groups).
    fn varint(&mut self) -> Option<u32> {
        let mut v = 0u64;
        for k in 0..5 {
            let b = *self.take(1)?.first()?;
            v |= u64::from(b & 0x7f) << (7 * k);
            if b & 0x80 == 0 {
                let canonical = k == 0 || b != 0;
                return u32::try_from(v).ok().filter(|_| canonical);
            }
        }
        None
    }
}

/// What decoding an answer needs: the secret of this query only, the block asked for and the
/// quantised photo.
pub struct ScoresPending {
    sk: SecretKey,
    block: usize,
    q: Vec<i16>,
}

/// The photo's block and quantised features are zeroised with the pending state (the secret
/// key zeroises itself).
impl Drop for ScoresPending {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.q.zeroize();
        self.block.zeroize();
    }
}

/// The ring and the public masks of a document (built once per version by a client that keeps
/// them; a few milliseconds).
pub struct ScoresKeys {
    ring: Ring,
    masks: InspiringMasks,
    query_seed: [u8; 32],
}

impl ScoresKeys {
    /// The ring and masks for `doc`, from the seeds the client derives for the partition's
    /// version and content ([`crate::pir::seeds`]), never from the document's: a server that
    /// publishes related seeds (the packing seed equal to the query seed) would otherwise make
    /// a key body and a query chunk share a mask and expose the secret. A document whose
    /// seeds are not the derived ones is refused.
    pub fn new(part: &PartitionDoc, doc: &ScoresDoc) -> Result<ScoresKeys> {
        if doc.ring_n != N {
            return Err(Error::InvalidParameter {
                name: "pir scores",
                reason: format!("ring degree {} is not {N}", doc.ring_n),
            });
        }
        check(part, doc)?;
        let digest = seeds::partition_digest(part);
        let query_seed = seeds::check_one(
            "pir scores query_seed",
            &doc.query_seed,
            seeds::derive_from(&digest, Purpose::ScoresQuery),
        )?;
        let packing = seeds::check_one(
            "pir scores packing_seed",
            &doc.packing_seed,
            seeds::derive_from(&digest, Purpose::ScoresPacking),
        )?;
        let ring = Ring::new(N);
        let masks = ::pir::scores::packing_masks(&ring, &doc.shape(), &packing);
        Ok(ScoresKeys {
            masks,
            query_seed,
            ring,
        })
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    pub fn masks(&self) -> &InspiringMasks {
        &self.masks
    }
}

/// The query for the photo's block (its nearest centroid among the level's verified
/// `centroids`): the body to `POST` to `{answer_url}/scores` (exactly
/// [`ScoresDoc::upload_bytes`]) and what decoding its answer needs. A fresh secret from `rng`
/// (the CSPRNG) every time: reusing one would expose the difference of two photos.
/// [`prepare`] then [`query_prepared`].
pub fn query(
    part: &PartitionDoc,
    doc: &ScoresDoc,
    keys: &ScoresKeys,
    centroids: &Centroids,
    features: &[f32],
    rng: &mut impl RngCore,
) -> Result<(Vec<u8>, ScoresPending)> {
    let prepared = prepare(part, doc, keys, rng)?;
    query_prepared(part, doc, prepared, centroids, features)
}

/// The photo-independent part of one query (its fresh secret, key bodies and masks), computed
/// before the photo is known. Used once ([`query_prepared`] consumes it).
pub struct ScoresPrepared {
    /// The partition version whose derived seeds made it: a query under another version's
    /// masks would decode to garbage, which the client would take for a hostile answer.
    version: String,
    inner: scores::Prepared,
}

/// Prepares one query for `doc` under `keys` (the ring and masks of the derived seeds).
pub fn prepare(
    part: &PartitionDoc,
    doc: &ScoresDoc,
    keys: &ScoresKeys,
    rng: &mut impl RngCore,
) -> Result<ScoresPrepared> {
    check(part, doc)?;
    Ok(ScoresPrepared {
        version: part.version.clone(),
        inner: scores::prepare(&keys.ring, &doc.shape(), &keys.query_seed, &keys.masks, rng)
            .map_err(crate::pir::from_lattice)?,
    })
}

/// [`query`] from a preparation ([`prepare`] for the same documents).
pub fn query_prepared(
    part: &PartitionDoc,
    doc: &ScoresDoc,
    prepared: ScoresPrepared,
    centroids: &Centroids,
    features: &[f32],
) -> Result<(Vec<u8>, ScoresPending)> {
    shared::error::ensure_query_f32(features, part.feature_dim)?;
    check(part, doc)?;
    centroids.check_for(part, &part.levels[doc.level])?;
    if prepared.version != part.version || prepared.inner.shape() != doc.shape() {
        return Err(Error::InvalidParameter {
            name: "pir scores",
            reason: "the query was prepared for another version of the gallery".into(),
        });
    }
    let block = nearest_centroid(&centroids.values, part.feature_dim, features) as usize;
    let q: Vec<i16> = features.iter().map(|&v| quantise(v)).collect();
    let (upload, bodies, sk) = prepared
        .inner
        .query(block, &q)
        .map_err(crate::pir::from_lattice)?;
    let body = encode_upload(&upload, &bodies);
    debug_assert_eq!(body.len() as u64, doc.upload_bytes);
    Ok((body, ScoresPending { sk, block, q }))
}

/// The exact top `k` of the photo's block from the answer: the scores decoded (refused beyond
/// the error bound; decoded and ranked in full whether or not it passes), the block's rows ranked by `T = 2⟨q, f⟩ − ‖f‖²` (highest first, ties
/// to the lower id) — exactly the order of the squared distance from the quantised photo to
/// the items' `i16` features. Each hit's gallery index and its thumbnail unit's digest
/// come from the public file (`thumbs`: the thumbnail database's shape, whose units
/// [`entry`] checked against the document).
pub fn rank(
    doc: &ScoresDoc,
    thumbs: &::pir::layout::Shape,
    keys: &ScoresKeys,
    public: &ScoresPublic,
    pending: &ScoresPending,
    answer: &[u8],
    k: usize,
) -> Result<Ranked> {
    if k == 0 || k > shared::params::limits::MAX_RANK_K {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("must be in 1..={}", shared::params::limits::MAX_RANK_K),
        });
    }
    let shape = doc.shape();
    let answer = decode_answer(&shape, N, answer).map_err(crate::pir::from_lattice)?;
    let a: Vec<&[u64]> = public.public_a.iter().map(Vec::as_slice).collect();
    // Every coefficient is decoded and the block ranked whether or not the answer checks out
    // (a failure depends on the photo's block when the server damages one block's answer on
    // purpose; the work, and so the moment the next request leaves, does not).
    let (t, ok) = scores::decode_all(&keys.ring, &shape, &pending.sk, &a, &answer)
        .map_err(crate::pir::from_lattice)?;
    let rows = public
        .rows
        .get(pending.block)
        .ok_or(Error::InvalidParameter {
            name: "pir scores",
            reason: "block out of range".into(),
        })?;
    // A block of fewer than k items (refused with the document before anything secret exists,
    // `client::pir_search::check_blocks`, and never published): still ranked in full, then
    // refused below, so even then the work is the same.
    let short = rows.len() < k;
    let q2: i64 = pending.q.iter().map(|&v| i64::from(v) * i64::from(v)).sum();
    // One key a database row (the block's rows first, the rest never chosen): higher score
    // first, ties to the lower id. The same number of rows whatever the block (the database's,
    // at least the largest published block), and the same k whatever its size; and each row
    // reads one id from the gallery's public ids alike — a row past the block's the id of the
    // largest block's item at that row (a gallery index as scattered as a block's), its key
    // masked to the lowest — so the work between this answer and the next request, its memory
    // reads included, depends on no size the server chose.
    let widest = public
        .rows
        .iter()
        .max_by_key(|b| b.len())
        .map_or(&[][..], Vec::as_slice);
    let at = |rows: &[u32], r: usize| {
        rows.get(r.min(rows.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let keys: Vec<i128> = (0..shape.rows)
        .map(|r| {
            let real = r < rows.len();
            let m = u32::from(real).wrapping_neg();
            let g = (at(rows, r) & m) | (at(widest, r) & !m);
            let id = public.ids.get(g as usize).copied().unwrap_or(u64::MAX);
            let key = (i128::from(t[r]) << 64) | i128::from(u64::MAX - id);
            let m = -i128::from(real);
            (key & m) | (i128::MIN & !m)
        })
        .collect();
    // A slot past the block's rows (only when `short`) reads row 0's item, never panics.
    let item = |r: usize| rows.get(r).or(rows.first()).copied().unwrap_or(0) as usize;
    let order: Vec<(i64, u64, usize)> = crate::topk::top_k_fixed(&keys, k)
        .into_iter()
        .map(|(_, r)| (t[r], public.ids[item(r)], r))
        .collect();
    let scale = f64::from(FEATURE_SCALE) * f64::from(FEATURE_SCALE);
    let hits: Vec<Hit> = order
        .iter()
        .map(|&(t, id, r)| Hit {
            id,
            label: public.labels[item(r)],
            distance: ((q2 - t) as f64 / scale) as f32,
            block: 0,
            index: r,
        })
        .collect();
    let ranked = Ranked {
        scores: order.iter().map(|&(t, _, _)| t).collect(),
        indices: order.iter().map(|&(_, _, r)| item(r) as u32).collect(),
        // A unit the file lacks (only if `thumbs` is not the document's) gets a digest no
        // unit has, so the thumbnails' check fails rather than anything panicking.
        digests: order
            .iter()
            .map(|&(_, _, r)| {
                let u = thumbs.unit_of(item(r));
                public.digests.get(u).copied().unwrap_or([0; DIGEST])
            })
            .collect(),
        hits,
    };
    if short {
        return Err(Error::InvalidParameter {
            name: "pir scores",
            reason: format!("the photo's block holds fewer than k = {k} items"),
        });
    }
    if !ok {
        return Err(crate::pir::refused(PirError::Malformed(
            "the scores' answer does not decode within its error bound (a wrong key, a damaged \
             answer or wrong public parts)"
                .into(),
        )));
    }
    Ok(ranked)
}

/// The document's scores entry, checked against the partition (see [`check`]).
pub fn entry<'a>(part: &PartitionDoc, pir: &'a PirDoc) -> Result<&'a ScoresDoc> {
    let doc = pir.scores.as_ref().ok_or(Error::InvalidParameter {
        name: "pir",
        reason: "no hintless ranking is offered".into(),
    })?;
    check(part, doc)?;
    if doc.thumb_units != pir.thumbs.shape.units() || pir.thumbs.shape.records != part.gallery_size
    {
        return Err(Error::InvalidParameter {
            name: "pir scores",
            reason: "the thumbnail units are not the thumbnail database's".into(),
        });
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::pir::doc::FileDoc;
    use ::pir::scores::failure_log2;

    /// Median of `times`, µs.
    /// Issue #60, point 3: between the scores' answer and the thumbnail request, the client's
    /// work depends on no size the server chose. A database of 4,096 rows (two packed
    /// ciphertexts) whose blocks hold 1, 3, 8 and 4,096 items, real answers, `k` = 8: every
    /// block is ranked over the database's rows and k results, the blocks of fewer than k are
    /// refused after the same work, and the four take the same time within 5 %
    /// ([`::pir::selftest::paired_timing`]: each time against its round's, so load on the
    /// machine is left out). Before, the ranking took
    /// `k.min(block)` results: 1 and 3 slots against 8, a visible part of decode plus ranking.
    #[test]
    fn ranking_takes_the_same_time_whatever_the_size_of_the_photos_block() {
        use ::pir::scores::{encode_answer, plaintext_scores, ScoreDb};
        use ::pir::selftest::random_blocks;
        use rand::SeedableRng;
        let sizes = [1usize, 3, 8, 4096];
        let (dim, k) = (64, 8);
        let shape = ScoreShape {
            blocks: sizes.len(),
            dim,
            rows: 4096,
        };
        let ring = Ring::new(N);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(60);
        let blocks: Vec<Vec<i16>> = random_blocks(&shape, &mut rng)
            .into_iter()
            .zip(sizes)
            .map(|(mut b, n)| {
                b.truncate(n * dim);
                b
            })
            .collect();
        let (qseed, pseed) = ([3u8; 32], [4u8; 32]);
        let masks = ::pir::scores::packing_masks(&ring, &shape, &pseed);
        let db = ScoreDb::build(&ring, shape, &blocks, &qseed, &masks).unwrap();
        // Gallery items 0 … 4,107, block by block; ids descend so ties would go the other way.
        let mut next = 0u32;
        let rows: Vec<Vec<u32>> = sizes
            .iter()
            .map(|&n| {
                let r: Vec<u32> = (next..next + n as u32).collect();
                next += n as u32;
                r
            })
            .collect();
        let items = next as usize;
        let public = ScoresPublic {
            public_a: db.public_a().iter().map(|a| a.to_vec()).collect(),
            rows: rows.clone(),
            ids: (0..items as u64).map(|i| 10_000 - i).collect(),
            labels: vec![1; items],
            digests: vec![[5; DIGEST]; items],
        };
        let thumbs = ::pir::layout::Shape::new(294, items, 294).unwrap();
        let doc = ScoresDoc {
            level: 0,
            ring_n: N,
            blocks: shape.blocks,
            dim,
            rows: shape.rows,
            query_seed: String::new(),
            packing_seed: String::new(),
            public: FileDoc {
                bytes: 0,
                transfer_bytes: 0,
                sha256: String::new(),
            },
            thumb_units: items,
            upload_bytes: upload_len(&shape, N) as u64,
            answer_bytes: answer_len(&shape, N) as u64,
            failure_log2: failure_log2(&shape, N),
        };
        let keys = ScoresKeys {
            ring: Ring::new(N),
            masks,
            query_seed: qseed,
        };
        let q: Vec<i16> = random_blocks(
            &ScoreShape {
                blocks: 1,
                dim,
                rows: 1,
            },
            &mut rng,
        )
        .remove(0);
        // One query and honest answer for each block.
        let cases: Vec<(ScoresPending, Vec<u8>)> = (0..sizes.len())
            .map(|b| {
                let (up, bodies, sk) =
                    ::pir::scores::query(&ring, &shape, &qseed, &keys.masks, b, &q, &mut rng)
                        .unwrap();
                let answer = encode_answer(&db.answer(&ring, &up, &bodies, None).unwrap());
                let pending = ScoresPending {
                    sk,
                    block: b,
                    q: q.clone(),
                };
                (pending, answer)
            })
            .collect();
        let run = |b: usize| {
            let (p, a) = &cases[b];
            rank(&doc, &thumbs, &keys, &public, p, a, k)
        };
        // What each block gives: its exact top k, or a refusal for a block of fewer.
        for (b, &n) in sizes.iter().enumerate() {
            match run(b) {
                Ok(r) => {
                    let mut want: Vec<(i64, u32)> = plaintext_scores(&q, &blocks[b], dim)[..n]
                        .iter()
                        .zip(&rows[b])
                        .map(|(&t, &g)| (t, g))
                        .collect();
                    // Higher score first, ties to the lower id (the higher gallery index).
                    want.sort_by_key(|&(t, g)| (std::cmp::Reverse(t), std::cmp::Reverse(g)));
                    assert!(n >= k);
                    assert_eq!(r.indices, want[..k].iter().map(|w| w.1).collect::<Vec<_>>());
                    assert_eq!(r.scores, want[..k].iter().map(|w| w.0).collect::<Vec<_>>());
                }
                Err(e) => {
                    assert!(n < k, "block of {n}: {e}");
                    assert!(e.to_string().contains("fewer than k"), "{e}");
                }
            }
        }
        let clock = std::time::Instant::now();
        let timing = ::pir::selftest::paired_timing(
            sizes.len(),
            300,
            1,
            |b| {
                let _ = std::hint::black_box(run(b));
            },
            || clock.elapsed().as_secs_f64() * 1e6,
        );
        eprintln!("rank for blocks of {sizes:?} items: {timing:.3?}");
        assert!(
            timing.spread() <= 0.05,
            "{timing:.3?}: the cases' times differ by more than 5 %"
        );
    }

    const SIZES: [u32; 4] = [250, 260, 240, 250];

    /// The planner tests' partition with a capped fourth level of 4 blocks of at most 300 rows,
    /// its scores entry and a public file (block `b` holds items `100·b …`).
    fn fixture() -> (PartitionDoc, ScoresDoc, ScoresPublic) {
        let mut part = crate::plan::tests::doc();
        let mut l = part.levels[1].clone();
        l.blocks = 4;
        l.overlap = Overlap::Capped { m: 8, rows: 300 };
        l.sizes = SIZES.to_vec();
        l.bytes.truncate(4);
        l.transfer_bytes.truncate(4);
        l.hashes.truncate(4);
        part.levels.push(l);
        let shape = ScoreShape {
            blocks: 4,
            dim: 2,
            rows: 300,
        };
        let public = ScoresPublic {
            public_a: vec![vec![1u64; N]; shape.ciphertexts(N)],
            rows: SIZES
                .iter()
                .enumerate()
                .map(|(b, &s)| (0..s).map(|i| 100 * b as u32 + i).collect())
                .collect(),
            ids: (0..1000).map(|i| i + 7).collect(),
            labels: (0..1000).map(|i| (i % 10) as u8).collect(),
            // 250 thumbnail units (four records a column).
            digests: (0..250u32).map(|i| [i as u8; DIGEST]).collect(),
        };
        let doc = ScoresDoc {
            level: 3,
            ring_n: N,
            blocks: 4,
            dim: 2,
            rows: 300,
            query_seed: "11".repeat(32),
            packing_seed: "22".repeat(32),
            public: FileDoc {
                bytes: 0,
                transfer_bytes: 0,
                sha256: String::new(),
            },
            thumb_units: 250,
            upload_bytes: upload_len(&shape, N) as u64,
            answer_bytes: answer_len(&shape, N) as u64,
            failure_log2: failure_log2(&shape, N),
        };
        let doc = published(doc, &public.encode());
        (part, doc, public)
    }

    /// `doc` naming `bytes` as its public file.
    fn published(mut doc: ScoresDoc, bytes: &[u8]) -> ScoresDoc {
        doc.public = FileDoc {
            bytes: bytes.len() as u64,
            transfer_bytes: bytes.len() as u64,
            sha256: hash_hex(bytes),
        };
        doc
    }

    #[test]
    fn the_public_file_round_trips_and_is_bound_to_its_hash() {
        let (part, doc, public) = fixture();
        check(&part, &doc).unwrap();
        let bytes = public.encode();
        assert_eq!(ScoresPublic::decode(&doc, &part, &bytes).unwrap(), public);
        let mut other = bytes.clone();
        other[20] ^= 1;
        let e = ScoresPublic::decode(&doc, &part, &other).unwrap_err();
        assert!(e.to_string().contains("SHA-256"), "{e}");
    }

    #[test]
    fn malformed_public_files_are_refused_even_with_a_matching_hash() {
        let (part, doc, public) = fixture();
        let refused = |bytes: &[u8], want: &str| {
            let doc = published(doc.clone(), bytes);
            let e = ScoresPublic::decode(&doc, &part, bytes).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        };
        let good = public.encode();
        let map = MAGIC.len() + public.public_a.len() * N * 8;
        let mut b = good.clone();
        b[0] = b'X';
        refused(&b, "not a scores file");
        let mut b = good.clone();
        b[MAGIC.len()..MAGIC.len() + 8].copy_from_slice(&Q.value.to_le_bytes());
        refused(&b, "not reduced");
        let mut b = good.clone();
        b.push(0);
        refused(&b, "trailing");
        refused(&good[..good.len() - 1], "short");
        // A block's count that is not the partition's.
        let mut b = good.clone();
        b[map..map + 4].copy_from_slice(&251u32.to_le_bytes());
        refused(&b, "row count");
        // A repeated index (a zero gap), an index outside the gallery.
        let mut p = public.clone();
        p.rows[0][1] = p.rows[0][0];
        refused(&p.encode(), "ascend");
        let mut p = public.clone();
        *p.rows[3].last_mut().unwrap() = 1000;
        refused(&p.encode(), "ascend");
        // A varint with a needless zero group (0 written as 0x80 0x00).
        let mut b = good.clone();
        assert_eq!(b[map + 4], 0, "block 0 starts at item 0");
        b.insert(map + 4, 0x80);
        refused(&b, "malformed index");
    }

    #[test]
    fn entries_that_do_not_fit_the_partition_are_refused() {
        let (part, doc, _) = fixture();
        let refused = |d: ScoresDoc| assert!(check(&part, &d).is_err(), "{d:?}");
        refused(ScoresDoc {
            ring_n: 2048,
            ..doc.clone()
        });
        // A level that is not capped, one that does not exist, rows below a block's size.
        refused(ScoresDoc {
            level: 1,
            ..doc.clone()
        });
        refused(ScoresDoc {
            level: 9,
            ..doc.clone()
        });
        refused(ScoresDoc {
            rows: 259,
            ..doc.clone()
        });
        refused(ScoresDoc {
            dim: 3,
            ..doc.clone()
        });
        refused(ScoresDoc {
            upload_bytes: doc.upload_bytes - 8,
            ..doc.clone()
        });
        refused(ScoresDoc {
            answer_bytes: doc.answer_bytes + 8,
            ..doc.clone()
        });
        refused(ScoresDoc {
            query_seed: "zz".repeat(32),
            ..doc.clone()
        });
        let mut d = doc.clone();
        d.public.bytes = 1 << 40;
        refused(d);
        let mut d = doc.clone();
        d.public.bytes -= 2_000;
        refused(d);
    }
}
