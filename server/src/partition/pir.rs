//! PIR databases of a partition version (`shared::pir`): built from the version's blocks and
//! the gallery, held with the version (so they live and expire with it), and answered on the
//! blocking pool with rayon.
//!
//! Per version: the thumbnail database (one record per gallery item, in gallery order), the
//! whole ranking table as a public file where it is small, and one database per level whose
//! records are its blocks' ranking records, where the level's shape is affordable
//! ([`MAX_LEVEL_UPLOAD`], [`MAX_LEVEL_DB_BYTES`]). Hints and the table are immutable files
//! (content-addressed by the version, cacheable).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use shared::pir::client::u32s_to_bytes;
use shared::pir::doc::{level_shape, thumbs_shape, FileDoc, PirDbDoc, PirDoc, SchemeDoc};
use shared::pir::layout::{Database, Shape};
use shared::pir::lwe::{matrix_a, LWE_N};
use shared::pir::records::{encode_rank_record, RankItem};
use shared::protocol::blocks::{decode, hash_hex};
use shared::protocol::publish::gzip;

use crate::item::GalleryItem;
use crate::partition::{Partitions, Published};

/// Where clients send PIR queries: `{PIR_PREFIX}/{version}/{db}`.
pub const PIR_PREFIX: &str = "/api/v1/pir";
/// A level database is offered only if one search's upload stays within this.
pub const MAX_LEVEL_UPLOAD: usize = 1 << 20;
/// … and its matrix within this many bytes (bounds the build: hint work is bytes × 1,024).
pub const MAX_LEVEL_DB_BYTES: usize = 64 << 20;
/// The ranking table is published as a file up to this size.
pub const MAX_TABLE_BYTES: usize = 16 << 20;
/// Galleries above this many items get no PIR databases yet (the thumbnail hint alone would
/// take minutes to compute at 1,000,000 items; see ARCHITECTURE.md).
pub const MAX_PIR_ITEMS: usize = 200_000;
/// Rows of a hint or an answer given to one rayon task.
const ROW_CHUNK: usize = 64;

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
    pub build_secs: f64,
}

/// Work done answering queries (for `/status`).
#[derive(Debug, Default)]
pub struct PirCounters {
    pub requests: AtomicU64,
    /// Searches: every search sends exactly one thumbnail request.
    pub searches: AtomicU64,
    pub queries: AtomicU64,
    /// Summed time of the answer tasks (≈ CPU time: the work is compute-bound), µs.
    pub core_us: AtomicU64,
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
}

#[derive(Debug, thiserror::Error)]
pub enum PirBuildError {
    #[error("pir: {0}")]
    Shared(#[from] shared::Error),
    #[error("pir: {0}")]
    Invalid(String),
}

/// The public seed of a database's matrix `A`.
fn a_seed(version: &str, db: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"PrivateMail PIR A v1\0");
    h.update(version.as_bytes());
    h.update([0]);
    h.update(db.as_bytes());
    h.finalize().into()
}

/// Lays out `records`, computes the hint (rows split over rayon tasks).
fn build_db<'a>(
    shape: Shape,
    seed: [u8; 32],
    records: impl IntoIterator<Item = &'a [u8]>,
    record_hashes: Vec<String>,
) -> Result<PirDb, PirBuildError> {
    let db = Database::build(shape, records)?;
    let a = matrix_a(&seed, shape.cols);
    let starts: Vec<usize> = (0..shape.rows).step_by(ROW_CHUNK).collect();
    let parts: Vec<Vec<u32>> = starts
        .par_iter()
        .map(|&s| db.hint_rows(&a, s..(s + ROW_CHUNK).min(shape.rows)))
        .collect();
    let hint: Vec<u32> = parts.concat();
    debug_assert_eq!(hint.len(), shape.rows * LWE_N);
    let hint = Bytes::from(u32s_to_bytes(&hint));
    Ok(PirDb {
        doc: PirDbDoc {
            shape,
            a_seed: hex::encode(seed),
            hint_sha256: hash_hex(&hint),
            record_hashes,
            failure_log2: shape.failure_log2(),
        },
        db,
        hint,
    })
}

/// Builds `p`'s PIR databases and attaches them (once); failures are logged and leave the
/// version without PIR (its endpoints then answer 503).
pub fn attach(p: &Published, partitions: &Partitions, items: &[Arc<GalleryItem>]) {
    if p.pir.get().is_some() {
        return;
    }
    match build(p, partitions, items) {
        Ok(serve) => {
            let _ = p.pir.set(Arc::new(serve));
        }
        Err(e) => tracing::warn!(version = %p.doc.version, error = %e, "pir: not offered"),
    }
}

/// Builds the PIR databases of version `p` from its blocks and the gallery `items` (the
/// snapshot it was built from). Blocks not held in memory are read through `partitions`.
pub fn build(
    p: &Published,
    partitions: &Partitions,
    items: &[Arc<GalleryItem>],
) -> Result<PirServe, PirBuildError> {
    let t0 = Instant::now();
    let version = p.doc.version.clone();
    let dim = p.doc.feature_dim;
    let index: HashMap<u64, u32> = items
        .iter()
        .enumerate()
        .map(|(i, it)| (it.id, i as u32))
        .collect();
    if items.len() > MAX_PIR_ITEMS {
        return Err(PirBuildError::Invalid(format!(
            "{} items: PIR is offered up to {MAX_PIR_ITEMS}",
            items.len()
        )));
    }
    if index.len() != items.len() || items.len() != p.doc.gallery_size {
        return Err(PirBuildError::Invalid(
            "the gallery does not match the partition".into(),
        ));
    }
    let rank_item = |i: usize| RankItem {
        id: items[i].id,
        label: items[i].label as u8,
        features: &items[i].features,
        index: i as u32,
        thumbnail: &items[i].pixels,
    };

    // Thumbnails: one record per item.
    let thumb_bytes = p.doc.thumb_side * p.doc.thumb_side;
    let thumbs = build_db(
        thumbs_shape(items.len(), thumb_bytes)?,
        a_seed(&version, "thumbs"),
        items.iter().map(|it| it.pixels.as_slice()),
        Vec::new(),
    )?;

    // The whole ranking table.
    let all: Vec<RankItem> = (0..items.len()).map(rank_item).collect();
    let table_bytes = encode_rank_record(&all, dim)?;
    drop(all);
    let table = (table_bytes.len() <= MAX_TABLE_BYTES).then(|| {
        let gz = gzip(&table_bytes);
        (Bytes::from(table_bytes), Bytes::from(gz))
    });

    // Levels: records = blocks' ranking records.
    let mut levels = Vec::with_capacity(p.doc.levels.len());
    for (l, ld) in p.doc.levels.iter().enumerate() {
        let blocks = ld.blocks as usize;
        let built = build_level(p, partitions, l, blocks, &version, dim, &index, items)
            .unwrap_or_else(|e| {
                tracing::warn!(level = l, error = %e, "pir: level not offered");
                None
            });
        levels.push(built);
    }

    let doc = PirDoc {
        version: version.clone(),
        scheme: SchemeDoc::ours(),
        answer_url: format!("{PIR_PREFIX}/{version}"),
        thumbs: thumbs.doc.clone(),
        rank_table: table.as_ref().map(|(raw, gz)| FileDoc {
            bytes: raw.len() as u64,
            transfer_bytes: gz.len() as u64,
            sha256: hash_hex(raw),
        }),
        levels: levels
            .iter()
            .map(|l| l.as_ref().map(|d| d.doc.clone()))
            .collect(),
    };
    let doc_json =
        Bytes::from(serde_json::to_vec(&doc).map_err(|e| PirBuildError::Invalid(e.to_string()))?);
    let build_secs = t0.elapsed().as_secs_f64();
    tracing::info!(
        version = %version,
        secs = build_secs,
        thumbs_cols = thumbs.doc.shape.cols,
        levels = levels.iter().filter(|l| l.is_some()).count(),
        table = table.is_some(),
        "pir databases built"
    );
    Ok(PirServe {
        doc,
        doc_json,
        thumbs,
        levels,
        table,
        build_secs,
    })
}

/// One level's database, or `None` where its shape costs more than the bounds.
#[allow(clippy::too_many_arguments)]
fn build_level(
    p: &Published,
    partitions: &Partitions,
    level: usize,
    blocks: usize,
    version: &str,
    dim: usize,
    index: &HashMap<u64, u32>,
    items: &[Arc<GalleryItem>],
) -> Result<Option<PirDb>, PirBuildError> {
    if blocks < 2 {
        return Ok(None); // the whole gallery: the ranking table serves it
    }
    // The blocks' ranking records (ids from the block files, the rest from the gallery).
    // Files not held yet (a version loaded at start-up) are read through a runtime of our own:
    // this runs on a plain thread.
    let mut rt = None;
    let mut records = Vec::with_capacity(blocks);
    for b in 0..blocks {
        let raw = match p.cached(level, b) {
            Some(Some(f)) => f.raw.clone(),
            _ => {
                if rt.is_none() {
                    rt = Some(
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .map_err(|e| PirBuildError::Invalid(e.to_string()))?,
                    );
                }
                let rt = rt.as_ref().expect("just built");
                rt.block_on(partitions.block(p, level, b, false))
                    .map_err(|e| PirBuildError::Invalid(e.to_string()))?
            }
        };
        let block = decode(&raw, None).map_err(|e| PirBuildError::Invalid(e.to_string()))?;
        let its: Vec<RankItem> = block
            .ids
            .iter()
            .map(|id| {
                let i = *index.get(id).ok_or_else(|| {
                    PirBuildError::Invalid(format!("block item {id} is not in the gallery"))
                })?;
                let it = &items[i as usize];
                Ok(RankItem {
                    id: it.id,
                    label: it.label as u8,
                    features: &it.features,
                    index: i,
                    thumbnail: &it.pixels,
                })
            })
            .collect::<Result<_, PirBuildError>>()?;
        records.push(encode_rank_record(&its, dim)?);
    }
    let longest = records.iter().map(Vec::len).max().unwrap_or(1);
    let shape = level_shape(blocks, longest)?;
    let upload = shape.queries_per_record() * shape.query_bytes();
    if upload > MAX_LEVEL_UPLOAD || shape.rows * shape.cols > MAX_LEVEL_DB_BYTES {
        tracing::info!(level, blocks, upload, "pir: level not offered (too costly)");
        return Ok(None);
    }
    let hashes = records.iter().map(|r| hash_hex(r)).collect();
    build_db(
        shape,
        a_seed(version, &level.to_string()),
        records.iter().map(Vec::as_slice),
        hashes,
    )
    .map(Some)
}

impl PirServe {
    /// The database named by a path segment: `thumbs` or a level index.
    pub fn db(&self, name: &str) -> Option<&PirDb> {
        if name == "thumbs" {
            return Some(&self.thumbs);
        }
        let l: usize = name.parse().ok()?;
        self.levels.get(l)?.as_ref()
    }

    pub fn bytes(&self) -> (u64, u64) {
        let dbs = std::iter::once(&self.thumbs).chain(self.levels.iter().flatten());
        dbs.fold((0, 0), |(d, h), x| {
            (d + x.db.data.len() as u64, h + x.hint.len() as u64)
        })
    }
}

/// Why a query body was refused.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("the body must be 1..={max} query vectors of {per} bytes each; got {got} bytes")]
    Size { per: usize, max: usize, got: usize },
}

/// Answers a request body of query vectors (CPU-bound: call on the blocking pool). Rows are
/// split over rayon tasks; the answer is `c × rows` little-endian u32, query by query.
pub fn answer(
    db: &PirDb,
    thumbs: bool,
    body: &[u8],
    counters: &PirCounters,
) -> Result<Vec<u8>, QueryError> {
    let shape = db.db.shape;
    let per = shape.query_bytes();
    let max = shared::params::limits::MAX_PIR_QUERIES;
    if body.is_empty() || !body.len().is_multiple_of(per) || body.len() / per > max {
        return Err(QueryError::Size {
            per,
            max,
            got: body.len(),
        });
    }
    let c = body.len() / per;
    let queries: Vec<u32> = body
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let starts: Vec<usize> = (0..shape.rows).step_by(ROW_CHUNK * 4).collect();
    let parts: Vec<(Vec<u32>, u64)> = starts
        .par_iter()
        .map(|&s| {
            let t = Instant::now();
            let rows = db
                .db
                .answer_rows(&queries, s..(s + ROW_CHUNK * 4).min(shape.rows));
            (rows, t.elapsed().as_micros() as u64)
        })
        .collect();
    let mut out = vec![0u32; c * shape.rows];
    for (&s, (part, _)) in starts.iter().zip(&parts) {
        let len = part.len() / c;
        for q in 0..c {
            out[q * shape.rows + s..q * shape.rows + s + len]
                .copy_from_slice(&part[q * len..(q + 1) * len]);
        }
    }
    counters.requests.fetch_add(1, Ordering::Relaxed);
    counters
        .searches
        .fetch_add(u64::from(thumbs), Ordering::Relaxed);
    counters.queries.fetch_add(c as u64, Ordering::Relaxed);
    counters
        .core_us
        .fetch_add(parts.iter().map(|p| p.1).sum(), Ordering::Relaxed);
    Ok(u32s_to_bytes(&out))
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
    }
}
