//! The PIR databases of one version, ready to answer; the work counters `/status` shows.

use std::sync::atomic::Ordering;

use ::pir::cpu::timed;
use ::pir::layout::Database;
use ::pir::scores::upload_len;
use axum::body::Bytes;
use publish::pir::doc::{PirDbDoc, PirDoc};

pub use super::batch::{decode_scores, QueryError, ScoresQuery, ScoresServe};
pub use super::counters::PirCounters;
use rayon::prelude::*;

/// Where clients send PIR queries: `{PIR_PREFIX}/{version}/{db}` (`thumbs`, a level, or
/// `scores`).
pub const PIR_PREFIX: &str = "/api/v1/pir";
/// A level database is offered only if one search's upload stays within this.
pub const MAX_LEVEL_UPLOAD: usize = 1 << 20;
/// … and its matrix within this many bytes (bounds the build: hint work is bytes × 1,024).
pub const MAX_LEVEL_DB_BYTES: usize = 64 << 20;
/// The ranking table is published as a file up to this size (1,000,000 items: 157 MB). The
/// client's bound is `limits::MAX_PIR_TABLE_BYTES`, which must not be smaller.
pub const MAX_TABLE_BYTES: usize = shared::params::limits::MAX_PIR_TABLE_BYTES;
/// Galleries above this many items get no PIR databases: the thumbnail hint costs
/// `items × 294 × 1,024` word products to build (3·10¹¹ at 1,000,000 items: 21 s on two
/// cores, logged with progress), and the thumbnail database and the table take about
/// 0.6 GB of memory per version at that size.
pub const MAX_PIR_ITEMS: usize = 1 << 20;
/// The hintless ranking's path segment (its public file is its `hint`).
pub const SCORES: &str = "scores";
/// Rows of a hint or an answer given to one rayon task.
pub(super) const ROW_CHUNK: usize = 64;

/// One database, ready to answer.
#[derive(Debug)]
pub struct PirDb {
    pub doc: PirDbDoc,
    pub db: Database,
    pub hint: Bytes,
}

/// The PIR side of one partition version.
#[derive(Debug)]
pub struct PirServe {
    pub doc: PirDoc,
    pub doc_json: Bytes,
    pub thumbs: PirDb,
    pub levels: Vec<Option<PirDb>>,
    /// The ranking table, plain and gzip.
    pub table: Option<(Bytes, Bytes)>,
    /// The thumbnails' codebook, plain and gzip, where the records are coded.
    pub code: Option<(Bytes, Bytes)>,
    pub scores: Option<ScoresServe>,
    pub build_secs: f64,
    /// The mapped files above (`ops::mapped`), whose pages leave the resident set when the
    /// version is replaced ([`Pages::release`](crate::ops::mapped::Pages::release)).
    pub pages: crate::ops::mapped::Pages,
    /// A row shard's (`server serve --shard-rows`): each database holds its slice of the
    /// rows, and answers are parts (`pir::shard`) for a front to combine.
    pub shard: bool,
}

/// The PIR part of `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PirStatus {
    pub version: String,
    pub build_secs: f64,
    /// Requests answered since start, and query vectors in them.
    pub requests: u64,
    pub queries: u64,
    /// Mean core-milliseconds per request, and per search (all its requests: one thumbnail
    /// request per search, plus a level query for level plans).
    pub core_ms_per_request: f64,
    pub searches: u64,
    pub core_ms_per_search: f64,
    /// Bytes of the databases and hints held.
    pub database_bytes: u64,
    pub hint_bytes: u64,
    /// Hintless scores queries answered, and the batches they were answered in (concurrent
    /// searches share a pass: `score_queries / score_batches` is the mean batch).
    #[serde(default)]
    pub score_queries: u64,
    #[serde(default)]
    pub score_batches: u64,
}

impl PirServe {
    /// The database named by a path segment: `thumbs` or a level index.
    pub fn db(&self, name: &str) -> Option<&PirDb> {
        if name == SCORES {
            return None;
        }
        if name == "thumbs" {
            return Some(&self.thumbs);
        }
        let l: usize = name.parse().ok()?;
        self.levels.get(l)?.as_ref()
    }

    /// Whether a body of `len` bytes can be a query to database `db` (checked on the declared
    /// length, before the body is read): the scores' exact upload size, or 1 to
    /// `MAX_PIR_QUERIES` query vectors of a database's width.
    pub fn check_length(&self, db: &str, len: usize) -> Result<(), QueryError> {
        if db == SCORES {
            if let Some(sc) = &self.scores {
                let want = upload_len(&sc.db.shape(), sc.ring.n());
                if len != want {
                    return Err(QueryError::Scores(format!(
                        "a scores query has {want} bytes; {len} declared"
                    )));
                }
            }
            return Ok(());
        }
        match self.db(db) {
            Some(d) => check_query_size(d.db.shape.query_bytes(), len),
            None => Ok(()),
        }
    }

    /// Bytes of the databases (with the scores' plans) and of the public per-database files
    /// (hints, the scores' public file).
    pub fn bytes(&self) -> (u64, u64) {
        let dbs = std::iter::once(&self.thumbs).chain(self.levels.iter().flatten());
        let (d, h) = dbs.fold((0, 0), |(d, h), x| {
            (d + x.db.data().len() as u64, h + x.hint.len() as u64)
        });
        let (sd, sh) = self
            .scores
            .as_ref()
            .map_or((0, 0), |s| (s.db.bytes() as u64, s.public.0.len() as u64));
        (d + sd, h + sh)
    }
}

fn check_query_size(per: usize, len: usize) -> Result<(), QueryError> {
    let max = shared::params::limits::MAX_PIR_QUERIES;
    if len == 0 || !len.is_multiple_of(per) || len / per > max {
        return Err(QueryError::Size { per, max, got: len });
    }
    Ok(())
}

/// Answers a request body of query vectors (CPU-bound: call on the blocking pool). Rows are
/// split over rayon tasks; the answer is `c × rows` entries in `Shape::encode_answer`'s form
/// (rounded to the shape's answer bits), query by query — or, with `shard`, the entries of
/// the rows held, unrounded, as a `pir::shard::RowsPart`.
pub fn answer(
    db: &PirDb,
    thumbs: bool,
    shard: bool,
    body: &[u8],
    counters: &PirCounters,
) -> Result<Vec<u8>, QueryError> {
    let shape = db.db.shape;
    let per = shape.query_bytes();
    check_query_size(per, body.len())?;
    let c = body.len() / per;
    let queries: Vec<u32> = shape
        .decode_queries(body)
        .map_err(|e| QueryError::Malformed(e.to_string()))?;
    let held = db.db.held_rows();
    let starts: Vec<usize> = held.clone().step_by(ROW_CHUNK * 4).collect();
    let parts: Vec<Vec<u32>> = starts
        .par_iter()
        .map(|&s| {
            timed(&counters.core_us, || {
                db.db
                    .answer_rows(&queries, s..(s + ROW_CHUNK * 4).min(held.end))
            })
        })
        .collect();
    let rows = held.len();
    let mut out = vec![0u32; c * rows];
    for (&s, part) in starts.iter().zip(&parts) {
        let (len, at) = (part.len() / c, s - held.start);
        for q in 0..c {
            out[q * rows + at..q * rows + at + len].copy_from_slice(&part[q * len..(q + 1) * len]);
        }
    }
    counters.requests.fetch_add(1, Ordering::Relaxed);
    counters
        .searches
        .fetch_add(u64::from(thumbs), Ordering::Relaxed);
    counters.queries.fetch_add(c as u64, Ordering::Relaxed);
    if shard {
        return Ok(::pir::shard::RowsPart {
            shape,
            rows: held,
            queries: c,
            values: out,
        }
        .encode());
    }
    Ok(shape.encode_answer(&out))
}

/// What `/status` shows for the current version.
pub fn status(pir: &PirServe, counters: &PirCounters) -> PirStatus {
    let requests = counters.requests.load(Ordering::Relaxed);
    let searches = counters.searches.load(Ordering::Relaxed);
    let core_ms = counters.core_us.load(Ordering::Relaxed) as f64 / 1000.0;
    let (database_bytes, hint_bytes) = pir.bytes();
    PirStatus {
        version: pir.doc.version.clone(),
        build_secs: pir.build_secs,
        requests,
        queries: counters.queries.load(Ordering::Relaxed),
        core_ms_per_request: core_ms / requests.max(1) as f64,
        searches,
        core_ms_per_search: core_ms / searches.max(1) as f64,
        database_bytes,
        hint_bytes,
        score_queries: counters.score_queries.load(Ordering::Relaxed),
        score_batches: counters.score_batches.load(Ordering::Relaxed),
    }
}
