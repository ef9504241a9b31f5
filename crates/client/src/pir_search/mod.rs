//! The client's side of a PIR search, for every client (browser and command line): plan,
//! queries, verification and ranking. The server learns nothing about the photo (computational,
//! under LWE — see [`::pir::client`]) and the results are the exact top k of what was
//! retrieved. No ε is spent.
//!
//! # What leaves the client, and why it reveals nothing
//! A search makes, for every photo, the same requests of the same sizes in the same order:
//! 1. the ranking payload: with the plan's `Table`, the public ranking table (`GET`, fetched
//!    once per version and cached — identical for every client); with `Level`, one `POST` of
//!    `queries_per_record` query vectors to the level's database, for the record of the photo's
//!    nearest block (the only photo-dependent choice, hidden by the queries); with `Scores`,
//!    one `POST` of an encrypted query to the hintless ranking ([`publish::pir::hintless`]: the
//!    block and the photo's features are inside the RLWE ciphertexts);
//! 2. one `POST` of exactly `k` query vectors to the thumbnail database, for the top k items.
//!
//! Hints are `GET`s of public files, the same for everyone. If step 1 fails its checks (a
//! hostile server can do that on purpose for chosen records), step 2 is still sent — for
//! uniformly random records — before the error is shown, so the server cannot tell a failed
//! search from a good one by what follows ([`thumbs_query`] with `None`). The counts (`k`,
//! `queries_per_record`) are public: from the user's `k` and the published shapes.

use rand::RngCore;

pub mod driver;

use ::pir::client::{prepare, query, Hint, Pending, PirError, Prepared};
use dp::exact::uniform_below;
use publish::blocks::Hit;
use publish::centroids::Centroids;
use publish::partition::nearest_centroid_fixed;
use publish::pir::doc::{validate, PirDoc, MAX_THUMB_QUERIES};
pub use publish::pir::records::Ranked;
use publish::pir::records::{
    decode_rank_record, rank_record_len, read_rank_slots, unit_digest, RankRecord, RankSlots,
    DIGEST,
};
use publish::pir::seeds::{self, Purpose};
use publish::plan::validate_doc;
use publish::thumbcode::{self, Codebook};
use publish::thumbs;
use publish::topk::{key_distance, nearest_fixed, nearness_key};
use shared::api::PartitionDoc;
use shared::error::{Error, Result};
use shared::params::limits;

/// How a thumbnail record draws its picture: the 3-bit form ([`thumbs`]) or, where the
/// document publishes one, a codebook ([`publish::thumbcode`]; fetched once a version
/// and checked against its SHA-256 like every public file).
#[derive(Debug, Clone, Copy)]
pub enum ThumbCode<'a> {
    Raw { side: usize },
    Coded(&'a Codebook),
}

impl ThumbCode<'_> {
    /// Bytes of the picture at the start of a record.
    pub fn picture_len(&self) -> usize {
        match self {
            ThumbCode::Raw { side } => thumbs::packed_len(*side),
            ThumbCode::Coded(book) => book.record_len(),
        }
    }

    /// The picture (`side²` grey bytes) of a record's first [`Self::picture_len`] bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        match self {
            ThumbCode::Raw { side } => thumbs::unpack(bytes, *side),
            ThumbCode::Coded(book) => book.decode(bytes),
        }
    }
}

/// Features each thumbnail record carries after its picture (`dim` of them where the document
/// says `thumb_features`, 0 otherwise).
pub fn record_features(part: &PartitionDoc, pir: &PirDoc) -> usize {
    if pir.thumb_features {
        part.feature_dim
    } else {
        0
    }
}

/// Where a PIR search's ranking payload comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PirRanking {
    /// The whole ranking table, a public file: exact over the whole gallery.
    Table,
    /// The photo's nearest block at a partition level, by PIR.
    Level { level: usize },
    /// Encrypted exact scores of every item of the photo's nearest block at the capped level,
    /// no hint ([`publish::pir::hintless`]).
    Scores { level: usize },
}

/// A kind of [`PirRanking`], for a person who chooses it (`None`: the plan's own choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankingKind {
    Table,
    Level,
    Scores,
}

impl PirRanking {
    pub fn kind(&self) -> RankingKind {
        match self {
            PirRanking::Table => RankingKind::Table,
            PirRanking::Level { .. } => RankingKind::Level,
            PirRanking::Scores { .. } => RankingKind::Scores,
        }
    }
}

impl std::str::FromStr for RankingKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "table" => Ok(RankingKind::Table),
            "level" => Ok(RankingKind::Level),
            "scores" => Ok(RankingKind::Scores),
            _ => Err(Error::InvalidParameter {
                name: "ranking",
                reason: "must be table, level or scores".into(),
            }),
        }
    }
}

/// A PIR search's plan and costs (public: from the documents, `k` and the budget only).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PirPlan {
    pub ranking: PirRanking,
    pub k: usize,
    /// Predicted fidelity@k: 1 with the table (up to quantisation), the level's published
    /// own-block coverage otherwise.
    pub predicted_fidelity: f64,
    /// Bytes sent and received per search (query and answer bodies).
    pub up_bytes: u64,
    pub down_bytes: u64,
    /// Bytes fetched once per version and cached (hints, the table on the wire).
    pub one_time_bytes: u64,
    /// Whether the page makes this search its default: its one-time bytes are at most
    /// [`PAGE_DEFAULT_MAX_ONE_TIME_BYTES`]. (At 1,000,000 items the table plan fetches about
    /// 150 MB once; a person should choose that, not get it by default.)
    pub page_default: bool,
    /// Bytes of each coded picture where the gallery's thumbnail records are coded
    /// ([`publish::thumbcode`]: coarser than the 3-bit thumbnails), `None` otherwise.
    #[serde(default)]
    pub coded_picture_bytes: Option<usize>,
}

/// The most one-time bytes of a PIR plan the page chooses by default: at LWE `N` = 1,408 the
/// table plans take about 9.1 MiB at 10,000 images and 24.2 MiB at 70,000, and 1,000,000 with
/// the hintless scores about 16 MiB (6 MiB of public file, 9.4 MiB of thumbnail hint) — where
/// the table plan's 129 MiB stays a choice.
pub const PAGE_DEFAULT_MAX_ONE_TIME_BYTES: u64 = 48 << 20;

impl PirPlan {
    fn with_default(mut self) -> Self {
        self.page_default = self.one_time_bytes <= PAGE_DEFAULT_MAX_ONE_TIME_BYTES;
        self
    }
}

/// The plan for a PIR search of `k` results whose per-search bytes stay within `max_bytes`:
/// among the plans that fit, those whose one-time download is bounded
/// ([`PirPlan::page_default`]) first, then the highest predicted fidelity (the table's exact
/// ranking where offered), then fewer bytes. At 1,000,000 items the hintless scores (a bounded
/// one-time download) come before the 150 MB table.
pub fn plan(part: &PartitionDoc, pir: &PirDoc, k: usize, max_bytes: f64) -> Result<PirPlan> {
    plan_of(part, pir, k, max_bytes, None)
}

/// [`plan`] among the plans of one kind only, where a person chose it (`None`: any kind).
pub fn plan_of(
    part: &PartitionDoc,
    pir: &PirDoc,
    k: usize,
    max_bytes: f64,
    kind: Option<RankingKind>,
) -> Result<PirPlan> {
    check_docs(part, pir)?;
    if k == 0 || k > MAX_THUMB_QUERIES || k > part.gallery_size {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("must be in 1..={MAX_THUMB_QUERIES} and at most the gallery size"),
        });
    }
    check_blocks(part, pir, k)?;
    let t = pir.thumbs.shape;
    let (thumb_up, thumb_down) = ((k * t.query_bytes()) as u64, (k * t.answer_bytes()) as u64);
    // Every plan fetches the thumbnail hint and, where the records are coded, the codebook;
    // the level and scores plans also the level's centroids.
    let thumb_once =
        t.hint_bytes() as u64 + pir.thumbs_code.as_ref().map_or(0, |c| c.transfer_bytes);
    let cents = |level: usize| part.levels[level].centroids_bytes;
    let coded_picture_bytes = pir
        .thumbs_code
        .as_ref()
        .map(|_| t.record_len - 2 * record_features(part, pir));
    let table = pir.rank_table.as_ref().map(|table| {
        PirPlan {
            ranking: PirRanking::Table,
            k,
            predicted_fidelity: 1.0,
            up_bytes: thumb_up,
            down_bytes: thumb_down,
            one_time_bytes: table.transfer_bytes + thumb_once,
            page_default: false,
            coded_picture_bytes,
        }
        .with_default()
    });
    // A level whose record takes more queries than one request may carry cannot be fetched:
    // not a plan, whatever the document offers.
    let levels = pir.levels.iter().enumerate().filter_map(|(level, db)| {
        let s = db.as_ref()?.shape;
        if !s.record_fits_one_request() {
            return None;
        }
        let q = s.queries_per_record() as u64;
        Some(
            PirPlan {
                ranking: PirRanking::Level { level },
                k,
                predicted_fidelity: part.levels[level].coverage.own,
                up_bytes: q * s.query_bytes() as u64 + thumb_up,
                down_bytes: q * s.answer_bytes() as u64 + thumb_down,
                one_time_bytes: s.hint_bytes() as u64 + thumb_once + cents(level),
                page_default: false,
                coded_picture_bytes,
            }
            .with_default(),
        )
    });
    let scores = match &pir.scores {
        Some(doc) => {
            publish::pir::hintless::check(part, doc)?;
            Some(
                PirPlan {
                    ranking: PirRanking::Scores { level: doc.level },
                    k,
                    predicted_fidelity: part.levels[doc.level].coverage.own,
                    up_bytes: doc.upload_bytes + thumb_up,
                    down_bytes: doc.answer_bytes + thumb_down,
                    one_time_bytes: doc.public.transfer_bytes + thumb_once + cents(doc.level),
                    page_default: false,
                    coded_picture_bytes,
                }
                .with_default(),
            )
        }
        None => None,
    };
    let mut best: Option<PirPlan> = None;
    let mut cheapest = u64::MAX;
    let plans = table.into_iter().chain(levels).chain(scores);
    for p in plans.filter(|p| kind.is_none_or(|k| p.ranking.kind() == k)) {
        cheapest = cheapest.min(p.up_bytes + p.down_bytes);
        if (p.up_bytes + p.down_bytes) as f64 > max_bytes {
            continue;
        }
        let better = best.as_ref().is_none_or(|b| {
            (p.page_default && !b.page_default)
                || (p.page_default == b.page_default
                    && (p.predicted_fidelity > b.predicted_fidelity
                        || (p.predicted_fidelity == b.predicted_fidelity
                            && p.up_bytes + p.down_bytes < b.up_bytes + b.down_bytes)))
        });
        if better {
            best = Some(p);
        }
    }
    // Name what would fit: at 1,000,000 items the page's default budget is too small.
    best.ok_or_else(|| Error::InvalidParameter {
        name: "budget",
        reason: match cheapest {
            u64::MAX if kind.is_some() => "this server offers no PIR ranking of that kind".into(),
            u64::MAX => "this server offers no PIR ranking".into(),
            c => format!(
                "no PIR plan fits this many bytes per search; the cheapest sends and receives {} KiB",
                c.div_ceil(1024)
            ),
        },
    })
}

/// Every check a client makes of the two documents before it plans: the PIR document's shape
/// against the partition's, the same version, and every seed the one the client derives
/// ([`seeds::check`]: a server-chosen seed never touches a secret).
pub fn check_docs(part: &PartitionDoc, pir: &PirDoc) -> Result<()> {
    validate_doc(part)?;
    validate(pir, part.gallery_size, part.levels.len())?;
    if pir.version != part.version {
        return Err(Error::InvalidParameter {
            name: "pir document",
            reason: "its version is not the partition's".into(),
        });
    }
    let features = 2 * record_features(part, pir);
    let raw = thumbs::packed_len(part.thumb_side);
    // A coded picture is shorter than the 3-bit form (otherwise the code buys nothing), and
    // its length is checked again against the codebook when that is fetched.
    let fits = match &pir.thumbs_code {
        None => pir.thumbs.shape.record_len == raw + features,
        Some(code) => {
            publish::pir::doc::check_file(code, "thumbnail codebook")?;
            (thumbcode::MIN_RECORD + features..raw + features)
                .contains(&pir.thumbs.shape.record_len)
                && code.bytes <= thumbcode::max_file_len(part.thumb_side) as u64
        }
    };
    if !fits {
        return Err(Error::InvalidParameter {
            name: "pir thumbnails",
            reason: "the record length is not the thumbnail's (and features') size".into(),
        });
    }
    // A level database must hold one record per block, each long enough for its block's
    // ranking record: otherwise a query for some blocks could not be made, or every answer
    // for them would fail its check, and whether a search fails would depend on the photo.
    for (ld, db) in part.levels.iter().zip(&pir.levels) {
        let Some(db) = db else { continue };
        let longest = ld.sizes.iter().copied().max().unwrap_or(0) as usize;
        if db.shape.records != ld.blocks as usize
            || db.shape.record_len < rank_record_len(longest, part.feature_dim)
        {
            return Err(Error::InvalidParameter {
                name: "pir level",
                reason: "its records do not fit the level's blocks".into(),
            });
        }
    }
    seeds::check(part, pir)
}

/// Every block a ranking may fetch holds at least `k` items: each level the PIR document
/// offers a database for, and the hintless ranking's level. Checked with the documents, before
/// anything secret exists, so a document that fails is refused alike for every photo.
///
/// # Why
/// After a ranking answer the client ranks its block's items and sends the thumbnail queries.
/// If a block held fewer than `k` items, the ranking would pad its results (or rank fewer), and
/// the work before the next request — so the moment it leaves — would depend on the size of
/// the photo's block, which the server chose. With every block at least `k`, the ranking is
/// `k` results over the database's rows (the largest block), whatever the block
/// ([`publish::pir::hintless::rank`], [`rank_level`]). A publisher never makes smaller blocks
/// ([`publish::partition::MIN_BLOCK_ITEMS`] ≥ the largest `k` a client may ask).
pub fn check_blocks(part: &PartitionDoc, pir: &PirDoc, k: usize) -> Result<()> {
    let offered = pir
        .levels
        .iter()
        .enumerate()
        .filter(|(_, db)| db.is_some())
        .map(|(l, _)| l)
        .chain(pir.scores.as_ref().map(|s| s.level));
    for level in offered {
        let ld = part.levels.get(level).ok_or(Error::InvalidParameter {
            name: "pir level",
            reason: format!("level {level} does not exist"),
        })?;
        let least = ld.sizes.iter().copied().min().unwrap_or(0) as usize;
        if least < k {
            return Err(Error::InvalidParameter {
                name: "pir level",
                reason: format!(
                    "a block of level {level} holds {least} items, fewer than the {k} results \
                     asked for"
                ),
            });
        }
    }
    Ok(())
}

/// The ranking query of a `Level` plan: the record of the photo's nearest block among the
/// level's `centroids` (verified with [`publish::centroids::verify`]; the level is
/// public, so fetching them reveals nothing). Returns the body to `POST` to
/// `{answer_url}/{level}` and its pending state.
pub fn rank_query(
    part: &PartitionDoc,
    pir: &PirDoc,
    level: usize,
    centroids: &Centroids,
    features: &[f32],
    rng: &mut impl RngCore,
) -> Result<(Vec<u8>, Pending)> {
    shared::error::ensure_query_f32(features, part.feature_dim)?;
    let (ld, db) = part
        .levels
        .get(level)
        .zip(pir.levels.get(level).and_then(Option::as_ref))
        .ok_or(Error::InvalidParameter {
            name: "level",
            reason: format!("{level} has no PIR database"),
        })?;
    centroids.check_for(part, ld)?;
    // By the same work wherever the photo lies: the query leaves after it.
    let x = nearest_centroid_fixed(&centroids.values, part.feature_dim, features) as usize;
    query(
        &db.shape,
        &seeds::derive(part, Purpose::Level(level)),
        &[x],
        rng,
    )
    .map_err(publish::pir::from_lattice)
}

/// The exact top k of a verified ranking record (the table), nearest first, ties to the lower
/// id.
///
/// # Guarantee
/// The same work whatever the record's values and the photo ([`publish::topk::nearest_fixed`]):
/// the thumbnail queries that follow leave after work that depends on the record's length,
/// its dimension and `k` only — public. A ranking that stops early (a bounded list that skips
/// a farther item) would take longer for a photo near the rows a server put first, and tell
/// it so. Only public sizes fail: a bad `k`, a query of another dimension, a record of fewer
/// than `k` items.
pub fn ranked(record: &RankRecord, features: &[f32], k: usize) -> Result<Ranked> {
    let b = &record.block;
    if k == 0 || k > limits::MAX_RANK_K {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("must be in 1..={}", limits::MAX_RANK_K),
        });
    }
    shared::error::ensure_query_f32(features, b.dim)?;
    if b.len() < k {
        return Err(Error::InvalidParameter {
            name: "pir ranking record",
            reason: format!("it holds {} items, fewer than k = {k}", b.len()),
        });
    }
    let hits: Vec<Hit> = nearest_fixed(&b.features, b.dim, features, k, |i| b.ids[i])
        .into_iter()
        .map(|(distance, i)| Hit {
            id: b.ids[i],
            label: b.labels[i],
            distance,
            block: 0,
            index: i,
        })
        .collect();
    Ok(Ranked {
        indices: hits.iter().map(|h| record.indices[h.index]).collect(),
        digests: hits.iter().map(|h| record.digests[h.index]).collect(),
        hits,
        scores: Vec::new(),
    })
}

/// The ranking table, checked against its published hash and decoded (a client may keep it
/// for every search of the version).
pub fn load_table(pir: &PirDoc, table: &[u8]) -> Result<RankRecord> {
    let doc = pir.rank_table.as_ref().ok_or(Error::InvalidParameter {
        name: "pir",
        reason: "no ranking table is offered".into(),
    })?;
    let record = decode_rank_record(table, &doc.sha256).map_err(publish::pir::refused)?;
    check_indices(&record, pir.thumbs.shape.records)?;
    Ok(record)
}

/// Exact top k from the ranking table (checked against its published hash).
pub fn rank_table(pir: &PirDoc, table: &[u8], features: &[f32], k: usize) -> Result<Ranked> {
    ranked(&load_table(pir, table)?, features, k)
}

/// Exact top k from a `Level` plan's answer (decoded, checked against the record's hash).
///
/// # Failures and block sizes say nothing
/// A hostile server can damage the record of one chosen block, so whether this check fails
/// depends on the photo; and block sizes are the server's, so the size of the photo's block
/// depends on the photo too. The work does neither: decoding the answer is the database
/// shape's (one unit, whatever it holds), and the record is then checked and ranked with the
/// same work whatever its item count and whether its checks pass ([`rank_padded`]: every
/// slot the padded record could hold, its hash by a fixed number of compressions, `k` chosen
/// by a fixed network), so the request that follows (the thumbnails, for random records
/// after a failure) goes out after the same work. A block of fewer than `k` items is
/// refused with the documents ([`check_blocks`]) and, should one reach here, after the same
/// work. Only sizes, which are public, fail early.
pub fn rank_level(
    pir: &PirDoc,
    level: usize,
    pending: &Pending,
    hint: &Hint,
    answer: &[u8],
    features: &[f32],
    k: usize,
) -> Result<Ranked> {
    let db = pir
        .levels
        .get(level)
        .and_then(Option::as_ref)
        .ok_or(Error::InvalidParameter {
            name: "level",
            reason: format!("{level} has no PIR database"),
        })?;
    let padded = pending
        .decode(hint, answer)
        .map_err(publish::pir::from_lattice)?
        .pop()
        .ok_or(Error::InvalidParameter {
            name: "pir",
            reason: "empty answer".into(),
        })?;
    // The record asked for is the photo's block; its hash is in the document (the pending
    // state knows which one it asked; the index is the client's own).
    let expected = pending
        .records()
        .first()
        .and_then(|&r| db.record_hashes.get(r))
        .ok_or(Error::InvalidParameter {
            name: "pir",
            reason: "record out of range".into(),
        })?;
    rank_padded(pir, &padded, expected, features, k)
}

/// [`rank_level`] after the answer is decoded: the padded record checked against `expected`
/// (its SHA-256) and ranked, with the same work whatever the record holds and whether the
/// check passes.
///
/// # Guarantee
/// For a given padded length, query dimension, `k` and thumbnail database (all public: the
/// database's shapes and the search's `k`), the work is the same whatever the record
/// declares — in particular its item count, the size of the photo's block, which the server
/// chose — and whether any of its checks passes: no loop bound, allocation or branch before
/// the result depends on them.
///
/// # Proof sketch
/// [`read_rank_slots`] reads every slot the padded record could hold and hashes the record's
/// prefix with a fixed number of compressions (see there). Here each slot gets a key — its
/// distance to the photo and its id — computed alike for every slot and masked to the
/// lowest key past the record's items; the gallery-index check runs over every slot, masked
/// the same way; [`publish::topk::top_k_fixed`] chooses `k` by a fixed sequence of
/// compare-exchanges over the slots. Only then is the outcome chosen: the ranking, or the
/// first failed check (a small error value) — a block of fewer than `k` items among them
/// (refused with the documents, [`check_blocks`], should one reach here). The hits'
/// fields are read at `k` slot positions (which the photo chooses, not the server; they are
/// in memory the client just wrote). Only a padded record shorter than its headers, or a bad
/// `k` or query, fails early: public sizes.
pub fn rank_padded(
    pir: &PirDoc,
    padded: &[u8],
    expected: &str,
    features: &[f32],
    k: usize,
) -> Result<Ranked> {
    if k == 0 || k > MAX_THUMB_QUERIES {
        return Err(Error::InvalidParameter {
            name: "k",
            reason: format!("must be in 1..={MAX_THUMB_QUERIES}"),
        });
    }
    shared::error::ensure_query_f32(features, features.len())?;
    let slots = read_rank_slots(padded, expected, features.len()).map_err(publish::pir::refused)?;
    let (ranked, outside) = ranked_slots(&slots, features, k, pir.thumbs.shape.records);
    if let Some(e) = slots.refused {
        return Err(publish::pir::refused(e));
    }
    if outside {
        return Err(Error::InvalidParameter {
            name: "pir ranking record",
            reason: "an item index is outside the gallery".into(),
        });
    }
    if slots.n < k {
        return Err(Error::InvalidParameter {
            name: "pir ranking record",
            reason: format!("the block holds fewer than k = {k} items"),
        });
    }
    Ok(ranked)
}

/// The exact top `k` of a record's slots (as [`ranked`] ranks its items: nearest first, ties
/// to the lower id), each slot past the record's items masked to the lowest key, and whether
/// any item's gallery index is outside a gallery of `items`: the same work for every slot
/// (see [`rank_padded`]).
fn ranked_slots(s: &RankSlots, features: &[f32], k: usize, items: usize) -> (Ranked, bool) {
    let keys: Vec<i128> = s
        .features
        .chunks_exact(s.dim)
        .zip(&s.ids)
        .enumerate()
        .map(|(i, (f, &id))| {
            let d: f32 = f.iter().zip(features).map(|(x, y)| (x - y) * (x - y)).sum();
            let key = nearness_key(d, id);
            let m = -i128::from(i < s.n);
            (key & m) | (i128::MIN & !m)
        })
        .collect();
    let outside = s
        .indices
        .iter()
        .enumerate()
        .fold(false, |o, (i, &g)| o | ((i < s.n) & (g as usize >= items)));
    let best = publish::topk::top_k_fixed(&keys, k);
    // A slot past the record (only for a record refused anyway) reads zeros, never panics.
    let hits: Vec<Hit> = best
        .iter()
        .map(|&(key, i)| Hit {
            id: s.ids.get(i).copied().unwrap_or(0),
            label: s.labels.get(i).copied().unwrap_or(0),
            distance: key_distance(key),
            block: 0,
            index: i,
        })
        .collect();
    let ranked = Ranked {
        indices: best
            .iter()
            .map(|&(_, i)| s.indices.get(i).copied().unwrap_or(0))
            .collect(),
        digests: best
            .iter()
            .map(|&(_, i)| s.digests.get(i).copied().unwrap_or([0; DIGEST]))
            .collect(),
        hits,
        scores: Vec::new(),
    };
    (ranked, outside)
}

fn check_indices(record: &RankRecord, items: usize) -> Result<()> {
    if record.indices.iter().any(|&i| i as usize >= items) {
        return Err(Error::InvalidParameter {
            name: "pir ranking record",
            reason: "an item index is outside the gallery".into(),
        });
    }
    Ok(())
}

/// Exactly `k` thumbnail queries: for the ranked hits (padded with uniformly random records
/// if fewer), or — after a failed ranking, `None` — for `k` uniformly random records, so the
/// request looks the same either way. [`thumbs_prepare`] then [`thumbs_query_prepared`].
pub fn thumbs_query(
    part: &PartitionDoc,
    pir: &PirDoc,
    ranked: Option<&Ranked>,
    k: usize,
    rng: &mut impl RngCore,
) -> Result<(Vec<u8>, Pending)> {
    let prepared = thumbs_prepare(part, pir, k, rng)?;
    thumbs_query_prepared(pir, prepared, ranked, k, rng)
}

/// The photo-independent part of `k` thumbnail queries (fresh secrets and masks under the
/// matrix of the seed this client derives), computed before the photo is known.
pub fn thumbs_prepare(
    part: &PartitionDoc,
    pir: &PirDoc,
    k: usize,
    rng: &mut impl RngCore,
) -> Result<Prepared> {
    let t = &pir.thumbs;
    prepare(
        &t.shape,
        &seeds::derive(part, Purpose::Thumbs),
        k * t.shape.queries_per_record(),
        rng,
    )
    .map_err(publish::pir::from_lattice)
}

/// [`thumbs_query`] from a preparation ([`thumbs_prepare`] for the same documents and `k`);
/// `rng` draws the padding records.
pub fn thumbs_query_prepared(
    pir: &PirDoc,
    prepared: Prepared,
    ranked: Option<&Ranked>,
    k: usize,
    rng: &mut impl RngCore,
) -> Result<(Vec<u8>, Pending)> {
    let t = &pir.thumbs;
    let mut records: Vec<usize> = ranked
        .map(|r| r.indices.iter().take(k).map(|&i| i as usize).collect())
        .unwrap_or_default();
    while records.len() < k {
        records.push(uniform_below(rng, t.shape.records as u128) as usize);
    }
    prepared.query(&records).map_err(publish::pir::from_lattice)
}

/// The thumbnail records of the ranked hits, each checked against its unit's digest: the pixels
/// (`thumb_side²` grey bytes each) and, where the records carry them
/// ([`PirDoc::thumb_features`]), each item's `i16` features.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Thumbs {
    pub pixels: Vec<Vec<u8>>,
    pub features: Vec<Vec<i16>>,
}

/// The thumbnails of the ranked hits (`thumb_side²` grey bytes each), each record's unit
/// checked against its digest before the record is read out of it and shown.
pub fn thumbs_decode(
    pending: &Pending,
    hint: &Hint,
    answer: &[u8],
    ranked: &Ranked,
    code: &ThumbCode<'_>,
) -> Result<Vec<Vec<u8>>> {
    thumbs_decode_records(pending, hint, answer, ranked, code, 0).map(|t| t.pixels)
}

/// [`thumbs_decode`] for records that also carry `dim` features (0: none): the unit digest
/// covers the whole unit (every record stacked in the record's column, padding included).
///
/// # Failures say nothing
/// A hostile server can damage one chosen record, so a failure depends on whether that record
/// is among the top k. Every record is hashed and unpacked whether an earlier one failed or
/// not (no early return; digests compared without a data-dependent exit), and the error names
/// no record.
pub fn thumbs_decode_records(
    pending: &Pending,
    hint: &Hint,
    answer: &[u8],
    ranked: &Ranked,
    code: &ThumbCode<'_>,
    dim: usize,
) -> Result<Thumbs> {
    // Each asked record's whole unit, wiped when done (its other records reveal the unit).
    let units = zeroize::Zeroizing::new(
        pending
            .decode_units(hint, answer)
            .map_err(publish::pir::from_lattice)?,
    );
    let shape = pending.shape();
    let len = code.picture_len();
    let mut ok = units.len() >= ranked.indices.len();
    let mut out = Thumbs::default();
    for (unit, (&i, d)) in units.iter().zip(ranked.indices.iter().zip(&ranked.digests)) {
        let i = i as usize;
        let got = unit_digest(shape.unit_of(i) as u32, unit);
        ok &= got.iter().zip(d).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        // The record at its public place in the unit, padded to the database's record length;
        // its first bytes are the packed thumbnail and the features, if any.
        let record = shape
            .extract(i, unit)
            .ok()
            .and_then(|r| r.get(..len + 2 * dim))
            .unwrap_or(&[]);
        ok &= !record.is_empty();
        let pixels = code.decode(record.get(..len).unwrap_or(&[]));
        ok &= pixels.is_ok();
        out.pixels.push(pixels.unwrap_or_default());
        out.features.push(
            record
                .get(len..)
                .unwrap_or(&[])
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect(),
        );
    }
    if ok {
        Ok(out)
    } else {
        Err(publish::pir::refused(PirError::HashMismatch {
            what: "thumbnail",
            expected: "the digests of the ranking".into(),
            got: "a record that does not match".into(),
        }))
    }
}

/// Checks the hintless ranking's decrypted scores of the returned items against the features
/// their thumbnail records carry (verified by digest): `T = 2⟨q, f⟩ − ‖f‖²` with the photo's
/// quantised features `q`. A server that computed other scores on purpose — to choose which
/// items a search returns — fails here whenever a returned item's score is not its own. Every
/// item is checked (no early return).
pub fn verify_scores(ranked: &Ranked, thumbs: &Thumbs, features: &[f32]) -> Result<()> {
    let q: Vec<i64> = features
        .iter()
        .map(|&v| i64::from(publish::blocks::quantise(v)))
        .collect();
    let mut ok =
        ranked.scores.len() == ranked.hits.len() && thumbs.features.len() >= ranked.hits.len();
    for (t, f) in ranked.scores.iter().zip(&thumbs.features) {
        ok &= f.len() == q.len();
        let (dot, norm) = f.iter().zip(&q).fold((0i64, 0i64), |(d, n), (&f, &q)| {
            (d + q * i64::from(f), n + i64::from(f) * i64::from(f))
        });
        ok &= 2 * dot - norm == *t;
    }
    if ok {
        Ok(())
    } else {
        Err(publish::pir::refused(PirError::Malformed(
            "a returned item's encrypted score is not the score of its published features".into(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_defaults_only_to_plans_with_a_bounded_one_time_download() {
        let plan = |one_time_bytes| {
            PirPlan {
                ranking: PirRanking::Table,
                k: 8,
                predicted_fidelity: 1.0,
                up_bytes: 0,
                down_bytes: 0,
                one_time_bytes,
                page_default: false,
                coded_picture_bytes: None,
            }
            .with_default()
            .page_default
        };
        assert!(plan(3 << 20));
        assert!(plan(PAGE_DEFAULT_MAX_ONE_TIME_BYTES));
        // The table and hint of 1,000,000 items (about 150 MB) are a choice, not a default.
        assert!(!plan(PAGE_DEFAULT_MAX_ONE_TIME_BYTES + 1));
        assert!(!plan(150_000_000));
    }

    /// Three thumbnails a column (a unit): a server that changes a record's column-mate or
    /// swaps two records of a column, database and hint consistently, fails the check of every
    /// record of that column and of no other; the error names no record.
    #[test]
    fn a_unit_digest_refuses_any_change_to_the_column_and_only_to_it() {
        use ::pir::layout::{encode_hint, Database, Shape};
        use ::pir::lwe::matrix_a;
        use publish::pir::records::unit_digests;
        use rand::SeedableRng;
        let side = 4;
        let len = thumbs::packed_len(side);
        let shape = Shape::new(len, 9, 3 * len).unwrap();
        let pixels: Vec<Vec<u8>> = (0..9u8)
            .map(|r| {
                (0..16u8)
                    .map(|i| r.wrapping_mul(29).wrapping_add(i * 17))
                    .collect()
            })
            .collect();
        let packed: Vec<Vec<u8>> = pixels
            .iter()
            .map(|p| thumbs::pack(p, side).unwrap())
            .collect();
        let digests = unit_digests(&shape, &packed);
        let seed = [7u8; 32];
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        // Fetch `want` from a server whose database holds `served`.
        let fetch = |served: &[Vec<u8>], want: &[usize], rng: &mut rand_chacha::ChaCha20Rng| {
            let db = Database::build(shape, served.iter().map(Vec::as_slice)).unwrap();
            let hint = encode_hint(&db.hint_rows(&matrix_a(&seed, shape.cols), 0..shape.rows));
            let hint = Hint::from_bytes(&shape, &hint, &publish::blocks::hash_hex(&hint)).unwrap();
            let (body, pending) = query(&shape, &seed, want, rng).unwrap();
            let q: Vec<u32> = shape.decode_queries(&body).unwrap();
            let answer = shape.encode_answer(&db.answer_rows(&q, 0..shape.rows));
            let ranked = Ranked {
                hits: Vec::new(),
                indices: want.iter().map(|&i| i as u32).collect(),
                digests: want.iter().map(|&i| digests[shape.unit_of(i)]).collect(),
                scores: Vec::new(),
            };
            thumbs_decode(&pending, &hint, &answer, &ranked, &ThumbCode::Raw { side })
        };
        let honest = fetch(&packed, &[1, 7], &mut rng).unwrap();
        assert_eq!(honest[0], thumbs::unpack(&packed[1], side).unwrap());
        assert_eq!(honest[1], thumbs::unpack(&packed[7], side).unwrap());
        // Record 2 shares record 1's column; record 4 is in the next one.
        let mut mate = packed.clone();
        mate[2][0] ^= 1;
        let mut swapped = packed.clone();
        swapped.swap(0, 1);
        for served in [&mate, &swapped] {
            let e = fetch(served, &[1, 7], &mut rng).unwrap_err().to_string();
            assert!(e.contains("thumbnail") && !e.contains('1'), "{e}");
            assert!(fetch(served, &[4, 7], &mut rng).is_ok());
        }
    }
}
