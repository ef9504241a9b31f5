//! Building a version's PIR databases from its blocks and the gallery.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ::lattice::rlwe::Ring;
use ::lattice::N as RING_N;
use ::pir::layout::{encode_hint, Database, Shape};
use ::pir::lwe::{matrix_a, LWE_N};
use ::pir::scores::{answer_len, failure_log2, upload_len, ScoreDb, ScorePlanes, ScoreShape};
use axum::body::Bytes;
use publish::blocks::quantise;
use publish::blocks::{decode_ids, hash_hex};
use publish::partition::Overlap;
use publish::pir::doc::{
    level_shape, thumbs_plan_with, FileDoc, PirDbDoc, PirDoc, SchemeDoc, ScoresDoc,
    THUMBS_SEARCH_BYTES,
};
use publish::pir::hintless::ScoresPublic;
use publish::pir::records::{encode_rank_record, rank_record_len, unit_digests, RankItem, DIGEST};
use publish::pir::seeds::{self, Purpose};
use publish::publish::{gzip, gzip_at, FAST_GZIP_ABOVE};
use publish::thumbcode::{fit_sample, Codebook};
use publish::thumbs;
use rayon::prelude::*;

use super::serve::*;
use crate::item::GalleryItem;
use crate::ops::mapped::{self, Pages};
use crate::ops::slice::Shard;
use crate::partition::blockstore::LevelFile;
use crate::partition::published::Published;
use crate::partition::versions::Partitions;
use data::progress::Progress;

/// Items whose thumbnails are packed before the catalogue's pages read are let go
/// (`Pages::read_in_slices`; at 784 pixels an item, 50 MB).
const PACK_SLICE: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum PirBuildError {
    #[error("pir: {0}")]
    Shared(#[from] shared::Error),
    /// The lattice code's refusals (laying out a database).
    #[error("pir: {0}")]
    Lattice(#[from] ::pir::error::Error),
    #[error("pir: {0}")]
    Invalid(String),
    #[error("pir: {0}")]
    Io(#[from] std::io::Error),
}

/// Lays out `records`, computes the hint (rows split over rayon tasks; `rows × cols × 1,024`
/// word products, logged with progress: 21 s for the thumbnails of 1,000,000 items here).
///
/// A row shard (`shard`) lays out only its rows (`Database::build_rows`) and computes no hint:
/// it answers parts and serves no public file (the front sends every other request to a
/// whole replica), so its `hint` is empty and its document's `hint_sha256` too — that
/// document is never served.
fn build_db<'a>(
    name: &str,
    shape: Shape,
    seed: [u8; 32],
    records: impl IntoIterator<Item = &'a [u8]>,
    record_hashes: Vec<String>,
    shard: Option<Shard>,
) -> Result<PirDb, PirBuildError> {
    let doc = |hint_sha256: String| PirDbDoc {
        shape,
        a_seed: hex::encode(seed),
        hint_sha256,
        record_hashes,
        failure_log2: shape.failure_log2(),
    };
    if let Some(s) = shard {
        let db = Database::build_rows(shape, records, s.range(shape.rows))?;
        return Ok(PirDb {
            doc: doc(String::new()),
            db,
            hint: Bytes::new(),
        });
    }
    let db = Database::build(shape, records)?;
    let a = matrix_a(&seed, shape.cols);
    let starts: Vec<usize> = (0..shape.rows).step_by(ROW_CHUNK).collect();
    let progress = Progress::new(format!("pir hint {name}"), shape.rows as u64, "rows");
    let parts: Vec<Vec<u32>> = starts
        .par_iter()
        .map(|&s| {
            let end = (s + ROW_CHUNK).min(shape.rows);
            let part = db.hint_rows(&a, s..end);
            progress.inc((end - s) as u64);
            part
        })
        .collect();
    progress.finish();
    let hint: Vec<u32> = parts.concat();
    debug_assert_eq!(hint.len(), shape.rows * LWE_N);
    let hint = Bytes::from(encode_hint(&hint));
    Ok(PirDb {
        doc: doc(hash_hex(&hint)),
        db,
        hint,
    })
}

/// `files` as parts of one mapped file in `pir_dir` (`mapped`), or as they are without one
/// or when writing it fails.
fn map_files<const K: usize>(
    partitions: &Partitions,
    pages: &Pages,
    what: &str,
    files: [Bytes; K],
) -> [Bytes; K] {
    let Some(dir) = &partitions.settings.pir_dir else {
        return files;
    };
    let back = match mapped::files(dir, what, pages, files.to_vec()) {
        Ok(b) => b,
        Err((e, b)) => {
            tracing::warn!(what, error = %e, "pir: files stay in memory");
            b
        }
    };
    back.try_into().expect("as many files as given")
}

/// Builds `p`'s PIR databases and attaches them (once); failures are logged and leave the
/// version without PIR (its endpoints then answer 503).
///
/// `inputs`: the pages the items' pixels and features are mapped from, let go as soon as each
/// pass over them ends (`build`), so that they are not resident beside the new version's files.
pub fn attach(p: &Published, partitions: &Partitions, items: &[Arc<GalleryItem>], inputs: &Pages) {
    if p.pir.get().is_some() {
        return;
    }
    // The partition's build just freed its transients (about 1.7 GB at 1,000,000 items, in
    // its threads' arenas, where this build's threads would not reuse them): give them back
    // first, so they do not add to this build's peak.
    data::progress::release_freed_memory();
    let built = build(p, partitions, items, inputs);
    // The thumbnails packed for the build and the table's encoding (about 0.5 GB at 1,000,000
    // items) are freed: give the pages back.
    data::progress::release_freed_memory();
    match built {
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
    inputs: &Pages,
) -> Result<PirServe, PirBuildError> {
    let t0 = Instant::now();
    let version = p.doc.version.clone();
    let dim = p.doc.feature_dim;
    // The version's mapped files, to let their pages go when it is replaced.
    let pages = Pages::default();
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
    // One record per item: its thumbnail, as the blocks hold it (3 bits a pixel) where that
    // fits the thumbnails' bytes, coded with a codebook fitted on the gallery where it does
    // not (`publish::pir::doc::thumbs_plan`).
    let side = p.doc.thumb_side;
    // With verified scores each record also carries the item's i16 features (the digests,
    // computed over the record, cover them).
    let with_features = partitions.settings.verified_scores;
    let plan = thumbs_plan_with(
        items.len(),
        thumbs::packed_len(side),
        if with_features { 2 * dim } else { 0 },
        partitions.settings.thumb_code_bytes,
    )?;
    let code = match plan.coded {
        None => None,
        Some(len) => Some(fit_code(items, side, len, inputs)?),
    };
    // Every pixel is read (and the features, with verified scores): a slice at a time, the
    // catalogue's pages let go after each.
    let pack = || -> Result<Vec<Vec<u8>>, shared::Error> {
        let mut packed = Vec::with_capacity(items.len());
        inputs.read_in_slices(items, PACK_SLICE, |slice| {
            let part = slice
                .par_iter()
                .map(|it| {
                    let mut r = match &code {
                        None => thumbs::pack(&it.pixels, side)?,
                        Some(book) => book.encode(&it.pixels)?,
                    };
                    if with_features {
                        r.extend(it.features.iter().flat_map(|&v| quantise(v).to_le_bytes()));
                    }
                    Ok(r)
                })
                .collect::<Result<Vec<Vec<u8>>, shared::Error>>()?;
            packed.extend(part);
            Ok::<_, shared::Error>(())
        })?;
        Ok(packed)
    };
    let packed = pack()?;
    // One digest a thumbnail unit (the column(s) a client decodes for a record): the hintless
    // ranking's public file lists them, ranking records carry each item's.
    let thumb_shape = plan.shape;
    if plan.coded.is_none() && plan.search_bytes() > THUMBS_SEARCH_BYTES {
        tracing::warn!(
            items = items.len(),
            "pir: the thumbnails do not fit their share of a search's bytes even coded"
        );
    }
    let units = Units {
        digests: unit_digests(&thumb_shape, &packed),
        shape: thumb_shape,
    };
    // Packed again for the thumbnail database once the hintless ranking is built: not held
    // through that build's peak (0.3 GB at 1,000,000 items; packing takes about a second).
    drop(packed);
    data::progress::release_freed_memory();
    let rank_item = |i: usize| RankItem {
        id: items[i].id,
        label: items[i].label as u8,
        features: &items[i].features,
        index: i as u32,
        digest: units.of(i),
    };
    // The hintless ranking of the capped level, where there is one — first, so that its
    // transient memory (the plans' row masks) is freed before the thumbnail database and
    // the table are held: at 1,000,000 items the build's peak is what bounds the server.
    let scores = p
        .doc
        .levels
        .iter()
        .rposition(|l| matches!(l.overlap, Overlap::Capped { .. }))
        .map(|l| {
            let mapped = BuildPages {
                version: &pages,
                inputs,
            };
            build_scores(p, partitions, mapped, l, &index, items, &units)
        })
        .transpose()
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "pir: the hintless ranking is not offered");
            None
        });
    data::progress::release_freed_memory();
    inputs.release();
    // Nothing reads this version's files until it is swapped in (the one serving meanwhile has
    // its own in the resident set): its pages go as each part is built, and searches fault
    // them in from the page cache once it serves.
    pages.release();

    // A row shard serves no public file: no codebook file and no table (`build_db`).
    let shard = partitions.settings.shard_rows;
    let packed = pack()?;
    let mut thumbs = build_db(
        "thumbs",
        thumb_shape,
        seeds::derive(&p.doc, Purpose::Thumbs),
        packed.iter().map(Vec::as_slice),
        Vec::new(),
        shard,
    )?;
    if let Some(dir) = &partitions.settings.pir_dir {
        let len = thumbs.db.data_len();
        match mapped::shared(dir, "thumbs", Some(len), &pages, |out| {
            thumbs.db.write_data(out)
        }) {
            Ok(bytes) => {
                thumbs.db.share_data(&bytes, 0)?;
            }
            Err(e) => tracing::warn!(error = %e, "pir: the thumbnail database stays in memory"),
        }
    }

    // The codebook, a public file like the table.
    let code = code.filter(|_| shard.is_none()).map(|book| {
        let raw = book.to_bytes();
        let gz = gzip(&raw);
        let doc = FileDoc {
            bytes: raw.len() as u64,
            transfer_bytes: gz.len() as u64,
            sha256: hash_hex(&raw),
        };
        let files = [Bytes::from(raw), Bytes::from(gz)];
        let [raw, gz] = map_files(partitions, &pages, "thumbcode", files);
        (doc, raw, gz)
    });

    // The whole ranking table.
    let table_bytes = match shard {
        Some(_) => Vec::new(),
        None => {
            let all: Vec<RankItem> = (0..items.len()).map(rank_item).collect();
            let bytes = encode_rank_record(&all, dim)?;
            drop(all);
            inputs.release();
            bytes
        }
    };
    let table = (shard.is_none() && table_bytes.len() <= MAX_TABLE_BYTES).then(|| {
        // Level 1 for large galleries, as their blocks (`publish::FAST_GZIP_ABOVE`).
        let gz = if items.len() > FAST_GZIP_ABOVE {
            gzip_at(&table_bytes, 1)
        } else {
            gzip(&table_bytes)
        };
        let [raw, gz] = map_files(
            partitions,
            &pages,
            "table",
            [Bytes::from(table_bytes), Bytes::from(gz)],
        );
        (raw, gz)
    });

    // Levels: records = blocks' ranking records.
    let mut levels = Vec::with_capacity(p.doc.levels.len());
    for (l, ld) in p.doc.levels.iter().enumerate() {
        let blocks = ld.blocks as usize;
        let built = build_level(p, partitions, l, blocks, dim, &index, items, &units)
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
        scores: scores.as_ref().map(|(_, d)| d.clone()),
        thumb_features: with_features,
        thumbs_code: code.as_ref().map(|(d, _, _)| d.clone()),
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
    pages.release();
    Ok(PirServe {
        doc,
        doc_json,
        thumbs,
        levels,
        table,
        code: code.map(|(_, raw, gz)| (raw, gz)),
        scores: scores.map(|(s, _)| s),
        build_secs,
        pages,
        shard: shard.is_some(),
    })
}

/// The codebook of `len`-byte pictures fitted on the gallery's thumbnails (an even sample,
/// `publish::thumbcode::FIT_SAMPLE`; a few seconds, logged).
fn fit_code(
    items: &[Arc<GalleryItem>],
    side: usize,
    len: usize,
    inputs: &Pages,
) -> Result<Codebook, PirBuildError> {
    let t0 = Instant::now();
    tracing::info!(
        items = items.len(),
        bytes = len,
        "pir: fitting the thumbnails' codebook"
    );
    // Only the pictures the fit reads, copied out (20,000 at most), the catalogue's pages let
    // go every 1,024 of them rather than held through the fit.
    let picked: Vec<&Arc<GalleryItem>> = fit_sample(items).collect();
    let mut sample: Vec<Vec<u8>> = Vec::with_capacity(picked.len());
    let copied = inputs.read_in_slices(&picked, 1_024, |part| {
        sample.extend(part.iter().map(|it| it.pixels.to_vec()));
        Ok::<_, std::convert::Infallible>(())
    });
    let Ok(()) = copied;
    let pictures: Vec<&[u8]> = sample.iter().map(Vec::as_slice).collect();
    let book = Codebook::fit(&pictures, side, len)?;
    tracing::info!(
        secs = t0.elapsed().as_secs_f64(),
        components = book.components(),
        "pir: the thumbnails' codebook is fitted"
    );
    Ok(book)
}

/// The thumbnail database's unit digests (`publish::pir::records::unit_digest`).
struct Units {
    shape: Shape,
    digests: Vec<[u8; DIGEST]>,
}

impl Units {
    /// The digest of item `i`'s unit.
    fn of(&self, i: usize) -> [u8; DIGEST] {
        self.digests[self.shape.unit_of(i)]
    }
}

/// The mapped pages a build writes (the version's files) and reads (the catalogue's), each let
/// go once nothing of the build needs it in the resident set.
#[derive(Clone, Copy)]
struct BuildPages<'a> {
    version: &'a Pages,
    inputs: &'a Pages,
}

/// The hintless ranking of capped level `level`: the score database of its blocks' `i16`
/// features (rows in block-file order, as the public file lists them), its packing plans, and
/// the public file. Logged with its cost; at 1,000,000 items (8,000 rows, 492 blocks) the plans
/// take about 2 GB.
fn build_scores(
    p: &Published,
    partitions: &Partitions,
    pages: BuildPages<'_>,
    level: usize,
    index: &HashMap<u64, u32>,
    items: &[Arc<GalleryItem>],
    units: &Units,
) -> Result<(ScoresServe, ScoresDoc), PirBuildError> {
    let t = Instant::now();
    let ld = &p.doc.levels[level];
    let Overlap::Capped { rows, .. } = ld.overlap else {
        return Err(PirBuildError::Invalid(format!(
            "level {level} is not capped"
        )));
    };
    if !blocks_hold_any_k(&ld.sizes, p.doc.gallery_size) {
        return Err(PirBuildError::Invalid(format!(
            "level {level}: a block holds too few items"
        )));
    }
    let dim = p.doc.feature_dim;
    let shape = ScoreShape {
        blocks: ld.blocks as usize,
        dim,
        rows: rows as usize,
    };
    let members = level_indices(p, partitions, level, shape.blocks, index)?;
    let ring = Ring::new(RING_N);
    let (query_seed, packing_seed) = (
        seeds::derive(&p.doc, Purpose::ScoresQuery),
        seeds::derive(&p.doc, Purpose::ScoresPacking),
    );
    let masks = ::pir::scores::packing_masks(&ring, &shape, &packing_seed);
    // A block's items' i16 features, a plan's rows at a time as the planes are laid out.
    let features = |b: usize, rows: std::ops::Range<usize>| -> Result<Vec<i16>, ::pir::Error> {
        let m = &members[b];
        Ok(m[rows.start.min(m.len())..rows.end.min(m.len())]
            .iter()
            .flat_map(|&i| items[i as usize].features.iter().map(|&v| quantise(v)))
            .collect())
    };
    // A row shard keeps its slice of the rows and of every plan's switch steps, and builds
    // one plan at a time: its memory is what bounds it (`ScorePlanes::plans_at_once`).
    let shard = partitions.settings.shard_rows;
    let lay_out = || {
        let planes = ScoreDb::lay_out(&ring, shape, features, &query_seed, &masks)?;
        match shard {
            Some(s) => Ok(planes
                .part(s.range(shape.rows), s.range(shape.packing_steps(RING_N)))?
                .plans_at_once(1)),
            None => Ok(planes),
        }
    };
    let db = score_db(partitions.settings.pir_dir.as_deref(), pages, lay_out)
        .map_err(publish::pir::from_lattice)?;
    // A row shard serves no public file (`build_db`): none is made.
    let (public, gz) = if shard.is_some() {
        (Vec::new(), Vec::new())
    } else {
        let public = ScoresPublic {
            public_a: db.public_a().iter().map(|a| a.to_vec()).collect(),
            rows: members,
            ids: items.iter().map(|it| it.id).collect(),
            labels: items.iter().map(|it| it.label as u8).collect(),
            digests: units.digests.clone(),
        }
        .encode();
        let gz = if items.len() > FAST_GZIP_ABOVE {
            gzip_at(&public, 1)
        } else {
            gzip(&public)
        };
        (public, gz)
    };
    let doc = ScoresDoc {
        level,
        ring_n: RING_N,
        blocks: shape.blocks,
        dim,
        rows: shape.rows,
        query_seed: hex::encode(query_seed),
        packing_seed: hex::encode(packing_seed),
        public: FileDoc {
            bytes: public.len() as u64,
            transfer_bytes: gz.len() as u64,
            sha256: hash_hex(&public),
        },
        thumb_units: units.digests.len(),
        upload_bytes: upload_len(&shape, RING_N) as u64,
        answer_bytes: answer_len(&shape, RING_N) as u64,
        failure_log2: failure_log2(&shape, RING_N),
    };
    tracing::info!(
        level,
        blocks = shape.blocks,
        rows = shape.rows,
        plan_bytes = db.plan_bytes(),
        public_bytes = doc.public.bytes,
        public_transfer_bytes = doc.public.transfer_bytes,
        upload_bytes = doc.upload_bytes,
        answer_bytes = doc.answer_bytes,
        secs = t.elapsed().as_secs_f64(),
        "pir: hintless ranking built"
    );
    let [public, gz] = map_files(
        partitions,
        pages.version,
        "public",
        [Bytes::from(public), Bytes::from(gz)],
    );
    let serve = ScoresServe {
        ring,
        db,
        public: (public, gz),
        batch: Default::default(),
        shard: shard.is_some(),
    };
    Ok((serve, doc))
}

/// The hintless ranking's score database, its planes and plans read from a file in `dir` (if
/// given; `mapped`): the plans — six of 0.2 GB at 1,000,000 items — are written there one by
/// one as they are built ([`ScorePlanes::build_into`]), so the build never holds them all; the
/// file is then mapped and each plan's bytes checked against the SHA-256 kept of them. If any of that
/// fails (the directory, a write, the check), the database is built again and held in memory,
/// as without a directory: a failure costs the build's time once more, but never the version,
/// and nothing is read from a file that was not checked whole. `lay_out` lays out the planes
/// (its errors are the build's own and come back as they are).
fn score_db<'a>(
    dir: Option<&Path>,
    pages: BuildPages<'_>,
    lay_out: impl Fn() -> Result<ScorePlanes<'a>, ::pir::Error>,
) -> Result<ScoreDb, ::pir::Error> {
    let Some(dir) = dir else {
        return lay_out()?.build();
    };
    let t = Instant::now();
    let planes = lay_out()?;
    let mut written = None;
    let streamed = mapped::shared(dir, "scores", None, pages.version, |out| {
        written = Some(planes.build_into(out)?);
        // Every item's features are read: their pages go before the file's are checked.
        pages.inputs.release();
        Ok(())
    })
    .map_err(PirBuildError::from)
    .and_then(|bytes| {
        let written = written.expect("the file is mapped once the plans are written");
        let written_len = written.written_len();
        let db = written.share(&bytes)?;
        // Checking read every byte of the file; searches fault in what they read.
        pages.version.release();
        Ok((written_len, db))
    });
    match streamed {
        Ok((bytes, db)) => {
            tracing::info!(
                bytes,
                secs = t.elapsed().as_secs_f64(),
                "pir: the hintless ranking's planes and plans written as built, mapped from a file"
            );
            Ok(db)
        }
        Err(e) => {
            tracing::warn!(error = %e, "pir: the hintless ranking is built again, in memory");
            lay_out()?.build()
        }
    }
}

/// Whether every block holds the most results a client may ask
/// (`publish::partition::MIN_BLOCK_ITEMS`, or the whole gallery): clients refuse a ranking
/// over smaller blocks (`client::pir_search::check_blocks`). Overlapping levels are topped up
/// to it when built; a level without overlap may not be, and is then not offered for ranking.
fn blocks_hold_any_k(sizes: &[u32], gallery_size: usize) -> bool {
    let least = publish::partition::MIN_BLOCK_ITEMS.min(gallery_size);
    sizes.iter().all(|&s| s as usize >= least)
}

/// Whether a level database of `shape` is offered: a record takes at most the queries one
/// request may carry (else no client could fetch it: at 10,000 items with an earlier cnn-v2
/// model a coarse level's record needed 140 of 128), and the upload and the database stay
/// within [`MAX_LEVEL_UPLOAD`] and [`MAX_LEVEL_DB_BYTES`].
fn offered(shape: &Shape) -> bool {
    shape.record_fits_one_request()
        && shape.queries_per_record() * shape.query_bytes() <= MAX_LEVEL_UPLOAD
        && shape.rows * shape.cols <= MAX_LEVEL_DB_BYTES
}

/// One level's database, or `None` where its shape costs more than the bounds.
#[allow(clippy::too_many_arguments)]
fn build_level(
    p: &Published,
    partitions: &Partitions,
    level: usize,
    blocks: usize,
    dim: usize,
    index: &HashMap<u64, u32>,
    items: &[Arc<GalleryItem>],
    units: &Units,
) -> Result<Option<PirDb>, PirBuildError> {
    if blocks < 2 {
        return Ok(None); // the whole gallery: the ranking table serves it
    }
    // The cost is known from the document's block sizes: a level too costly to offer is
    // refused before any block is read (at 1,000,000 items, reading every level's blocks only
    // to refuse them took 90 s and mapped 15 GB of files).
    if !blocks_hold_any_k(&p.doc.levels[level].sizes, p.doc.gallery_size) {
        tracing::info!(
            level,
            "pir: level not offered (a block holds too few items)"
        );
        return Ok(None);
    }
    let longest_items = p.doc.levels[level].sizes.iter().copied().max().unwrap_or(0);
    let shape = level_shape(blocks, rank_record_len(longest_items as usize, dim))?;
    if !offered(&shape) {
        let upload = shape.queries_per_record() * shape.query_bytes();
        tracing::info!(level, blocks, upload, "pir: level not offered (too costly)");
        return Ok(None);
    }
    // The blocks' ranking records (ids from the block files, the rest from the gallery).
    let mut records = Vec::with_capacity(blocks);
    for block in level_indices(p, partitions, level, blocks, index)? {
        let its: Vec<RankItem> = block
            .iter()
            .map(|&i| {
                let it = &items[i as usize];
                RankItem {
                    id: it.id,
                    label: it.label as u8,
                    features: &it.features,
                    index: i,
                    digest: units.of(i as usize),
                }
            })
            .collect();
        records.push(encode_rank_record(&its, dim)?);
    }
    let longest = records.iter().map(Vec::len).max().unwrap_or(1);
    if shape != level_shape(blocks, longest)? {
        return Err(PirBuildError::Invalid(format!(
            "level {level}: its blocks do not hold the items the document declares"
        )));
    }
    let hashes = records.iter().map(|r| hash_hex(r)).collect();
    build_db(
        &format!("level {level}"),
        shape,
        seeds::derive(&p.doc, Purpose::Level(level)),
        records.iter().map(Vec::as_slice),
        hashes,
        partitions.settings.shard_rows,
    )
    .map(Some)
}

/// The gallery indices of every block of `level`, in block-file order (ids from the block files,
/// mapped through `index`). Files not held yet (a version loaded at start-up) are read through
/// a runtime of our own: this runs on a plain thread.
fn level_indices(
    p: &Published,
    partitions: &Partitions,
    level: usize,
    blocks: usize,
    index: &HashMap<u64, u32>,
) -> Result<Vec<Vec<u32>>, PirBuildError> {
    let mut rt = None;
    let mut out = Vec::with_capacity(blocks);
    for b in 0..blocks {
        let raw = match p.cached(level, LevelFile::Block(b)) {
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
                rt.block_on(partitions.block_once(p, level, LevelFile::Block(b), false))
                    .map_err(|e| PirBuildError::Invalid(e.to_string()))?
            }
        };
        // Only the ids are read: unpacking every level's thumbnails too took the PIR build
        // at 10,000 items from 4.8 s to 9.0 s.
        let ids = decode_ids(&raw).map_err(|e| PirBuildError::Invalid(e.to_string()))?;
        let block = ids
            .iter()
            .map(|id| {
                index.get(id).copied().ok_or_else(|| {
                    PirBuildError::Invalid(format!("block item {id} is not in the gallery"))
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        out.push(block);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::pir::scores::packing_masks;

    /// A level whose longest record takes more queries than one request may carry is not
    /// offered, however cheap its upload; one query fewer than the limit is.
    #[test]
    fn a_record_no_request_can_fetch_is_not_offered() {
        let max = shared::params::limits::MAX_PIR_QUERIES;
        let rows = 4096;
        let of = |queries: usize| level_shape(8, queries * rows).unwrap();
        assert_eq!(of(max + 12).queries_per_record(), max + 12);
        assert!(!offered(&of(max + 12)));
        assert!(!offered(&of(max + 1)));
        assert!(offered(&of(max)));
        assert!(offered(&of(1)));
    }

    /// Streamed to a file and mapped when the directory takes it; built again in memory, with
    /// the same plans, when it does not.
    #[test]
    fn the_score_database_is_mapped_or_else_held() {
        let ring = Ring::new(64);
        let shape = ScoreShape {
            blocks: 3,
            dim: 4,
            rows: 40,
        };
        let masks = packing_masks(&ring, &shape, &[3; 32]);
        let blocks: Vec<Vec<i16>> = (0..3)
            .map(|b| {
                (0..4 * (40 - b))
                    .map(|i| (i * 37 + b) as i16 - 200)
                    .collect()
            })
            .collect();
        let block = ::pir::scores::block_rows(&blocks, 4);
        let lay_out = || ScoreDb::lay_out(&ring, shape, &block, &[5; 32], &masks);
        let (version, inputs) = (Pages::default(), Pages::default());
        let test_pages = BuildPages {
            version: &version,
            inputs: &inputs,
        };
        let dir = std::env::temp_dir().join(format!("pm-scores-{}", std::process::id()));
        let mapped = score_db(Some(&dir), test_pages, lay_out).unwrap();
        assert!(!mapped.held_in_memory());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        std::fs::remove_dir_all(&dir).unwrap();
        // A file where the directory should be: nothing can be written there.
        let file = dir.with_extension("file");
        std::fs::write(&file, b"not a directory").unwrap();
        let held = score_db(Some(&file.join("pir")), test_pages, lay_out).unwrap();
        assert!(held.held_in_memory());
        std::fs::remove_file(&file).unwrap();
        assert_eq!(held.public_a(), mapped.public_a());
        assert!(score_db(None, test_pages, lay_out)
            .unwrap()
            .held_in_memory());
    }
}
