//! The published partition (private block retrieval, `shared/spec/blocks.md`): the gallery cut
//! into blocks at several levels, built from a gallery snapshot with
//! [`shared::protocol::publish`], written to the [`BlockStore`] before it is announced, served
//! from memory, and swapped atomically when the gallery changes.
//!
//! Serving is the hot path, so everything a response needs is computed once: the block files
//! (uncompressed and gzip) as [`Bytes`] (a response clones a reference count, never the
//! bytes), their strong ETags, and the document's JSON. A version loaded from the store at
//! start-up reads each block on its first request (checked against the document's SHA-256)
//! and keeps it; a version over the memory budget maps the one file a request needs (plain or
//! gzip) from a local store, checks it against the version's stored CRC-32 ([`Checksums`])
//! and keeps the mapping (the page cache's bytes, sent without a copy). Looking a version up takes a read lock for an `Arc` clone; nothing is locked
//! while a response is written.
//!
//! Versions: the current one is served, and each version it replaced stays served for a grace
//! period (clients that fetched the document just before a rebuild can finish their
//! downloads). After that a request for it is answered 410 Gone naming the current version;
//! a small bounded list of retired version strings tells "expired" from "never existed" (404).
//! The store's copy of a version is deleted by [`Partitions::collect_garbage`] once it is
//! neither current nor retired and its files are older than the grace period.

pub mod blockstore;
pub mod pir;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderValue;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use shared::api::PartitionDoc;
use shared::protocol::partition::LevelSpec;
use shared::protocol::partition::{
    build_level, gallery_neighbours, held_out_probes, nearest_k, InvertedFile, Overlap,
    KMEANS_SAMPLE_ABOVE,
};
use shared::protocol::publish::{
    default_specs, document, gzip, gzip_at, publish_level, publish_level_to, publish_whole,
    GalleryView, PublishedLevel, Thumbnails, COVERAGE_K, FAST_GZIP_ABOVE,
};

use crate::item::{GalleryItem, SIDE};
use crate::partition::blockstore::{BlockStore, BlockStoreError, Checksums, Manifest};

/// Where clients fetch blocks: `{BLOCKS_PREFIX}/{version}/{level}/{block}`.
pub const BLOCKS_PREFIX: &str = "/api/v1/blocks";
/// Replaced versions kept in memory at most, whatever the grace: each holds every block file
/// (about 210 MB at 10,000 items), so this bounds memory when the gallery changes often.
pub const MAX_RETIRED: usize = 2;
/// Expired version strings remembered (to answer 410 rather than 404).
pub const MAX_GONE: usize = 256;
/// Numbers staging prefixes of this process's builds.
static STAGING_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Mapped block files kept at most, over all versions: each is one memory map, and the kernel
/// allows a process 65,530 (`vm.max_map_count`). Both files of every block of a 1,000,000-item
/// version are 15,872. Beyond this, a file is mapped per request.
pub const MAX_KEPT_MAPS: usize = 16_384;
/// Mapped block files kept now.
static KEPT_MAPS: AtomicUsize = AtomicUsize::new(0);
/// Rows of the neighbour search handed to one rayon task.
const NEIGHBOUR_CHUNK: usize = 256;

/// What the operator sets (flags of the `server` binary).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionSettings {
    /// The largest expected share of the gallery one search may download, in (0, 1].
    pub max_share: f64,
    /// Whether the whole gallery is published as one block (level 0).
    pub allow_full_download: bool,
    /// How long a replaced version stays served.
    pub grace: Duration,
    /// A version whose block files (plain + gzip) exceed this many bytes is not held in
    /// memory: a request's block file is read from the block store (and checked).
    pub cache_bytes: u64,
}

impl Default for PartitionSettings {
    fn default() -> Self {
        PartitionSettings {
            max_share: 0.25,
            allow_full_download: true,
            grace: Duration::from_secs(600),
            cache_bytes: 1 << 30,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("partition: {0}")]
    Shared(#[from] shared::Error),
    #[error("partition: {0}")]
    Invalid(String),
    #[error("partition: {0}")]
    Store(#[from] BlockStoreError),
}

/// Why a version cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("partition version {asked} is no longer served; the current version is {current}")]
    Gone { asked: String, current: String },
    #[error("unknown partition version {asked}; the current version is {current}")]
    Unknown { asked: String, current: String },
    #[error("no partition is published (the gallery is too small to cut into blocks)")]
    Unavailable,
}

/// One block file, ready to send.
#[derive(Debug, Clone)]
pub struct BlockFile {
    pub raw: Bytes,
    pub gzip: Bytes,
}

/// A partition version: the document as served and every block file (held, or read from the
/// store on first request).
#[derive(Debug)]
pub struct Published {
    /// The document as served (`blocks_url` says where this server's clients fetch blocks).
    pub doc: PartitionDoc,
    pub doc_json: Bytes,
    pub doc_gzip: Bytes,
    /// `"<version>"`.
    pub doc_etag: HeaderValue,
    /// The document as stored: `blocks_url` empty, gzip transfer sizes (see [`served_doc`]).
    pub canonical_json: Bytes,
    /// `files[level][block]`, levels as in `doc.levels`; empty slots are read from the store.
    files: Vec<Vec<OnceLock<BlockFile>>>,
    /// Whether a block read from the store is kept (the version fits the memory budget).
    keep: bool,
    /// CRC-32 of every stored file (computed when built, or read with the version); `None`
    /// for a stored version written without them (its blocks are SHA-256-checked per read).
    checksums: Option<Checksums>,
    /// `[level][block][plain, gzip]`: a stored file of a local store, mapped and checked
    /// against its CRC-32 the first time it was sent (a response clones a reference count).
    mapped: Vec<Vec<[OnceLock<Bytes>; 2]>>,
    /// The block files are already in the store under the version (streamed while built):
    /// persisting writes only the document.
    written: bool,
    /// The version's PIR databases, once built (they live and expire with the version).
    pub pir: OnceLock<Arc<crate::partition::pir::PirServe>>,
    /// The catalogue version the gallery snapshot had.
    pub catalogue_version: u64,
    /// [`fingerprint`] of what it was built from.
    pub fingerprint: String,
    pub build_secs: f64,
}

impl Drop for Published {
    fn drop(&mut self) {
        let kept = self.mapped.iter().flatten().flatten();
        KEPT_MAPS.fetch_sub(
            kept.filter(|m| m.get().is_some()).count(),
            Ordering::Relaxed,
        );
    }
}

impl Published {
    pub fn version(&self) -> &str {
        &self.doc.version
    }

    pub fn levels(&self) -> usize {
        self.files.len()
    }

    /// Whether the block exists, and its file if already held.
    pub fn cached(&self, level: usize, block: usize) -> Option<Option<&BlockFile>> {
        Some(self.files.get(level)?.get(block)?.get())
    }

    /// A block's strong ETag (`"<sha256 of its plain file>"`), if the block exists.
    pub fn etag(&self, level: usize, block: usize) -> Option<HeaderValue> {
        Some(quoted(self.doc.levels.get(level)?.hashes.get(block)?))
    }

    /// Uncompressed and gzip bytes of all block files (from the document: the same whether
    /// the files are held or still in the store).
    pub fn total_bytes(&self) -> (u64, u64) {
        // The canonical sizes: `doc.levels[..].transfer_bytes` may count a bucket's raw bytes.
        let canonical: PartitionDoc =
            serde_json::from_slice(&self.canonical_json).unwrap_or_else(|_| self.doc.clone());
        canonical.levels.iter().fold((0, 0), |(r, g), l| {
            (
                r + l.bytes.iter().sum::<u64>(),
                g + l.transfer_bytes.iter().sum::<u64>(),
            )
        })
    }

    /// The version as the store holds it: the canonical document, every file's bytes.
    fn files_for_store(&self) -> Option<Vec<Vec<(Bytes, Bytes)>>> {
        self.files
            .iter()
            .map(|l| {
                l.iter()
                    .map(|f| f.get().map(|f| (f.raw.clone(), f.gzip.clone())))
                    .collect()
            })
            .collect()
    }
}

/// The document as clients of this server see it: blocks fetched from `store`'s public URL
/// (or this server), and, when that is a bucket that sends files uncompressed, transfer sizes
/// equal to the file sizes (so a plan counts the bytes that really cross the wire).
pub fn served_doc(canonical: &PartitionDoc, store: Option<&BlockStore>) -> PartitionDoc {
    let mut doc = canonical.clone();
    doc.blocks_url = match store {
        Some(s) => s.blocks_url(&doc.version, BLOCKS_PREFIX),
        None => format!("{BLOCKS_PREFIX}/{}", doc.version),
    };
    if store.is_some_and(BlockStore::is_external) {
        for l in &mut doc.levels {
            l.transfer_bytes = l.bytes.clone();
        }
    }
    doc
}

/// Assemble a [`Published`] from the canonical document and (optionally) the files.
fn assemble(
    canonical: PartitionDoc,
    files: Option<Vec<Vec<BlockFile>>>,
    checksums: Option<Checksums>,
    store: Option<&BlockStore>,
    catalogue_version: u64,
    fingerprint: String,
    build_secs: f64,
) -> Result<Published, PartitionError> {
    shared::protocol::plan::validate_doc(&canonical)?;
    let json = |d: &PartitionDoc| {
        serde_json::to_vec(d)
            .map(Bytes::from)
            .map_err(|e| PartitionError::Invalid(e.to_string()))
    };
    let doc = served_doc(&canonical, store);
    let doc_json = json(&doc)?;
    let checksums = match &files {
        Some(files) => Some(Checksums::of(
            &files
                .iter()
                .map(|l| l.iter().map(|f| (&f.raw[..], &f.gzip[..])).collect())
                .collect::<Vec<Vec<_>>>(),
        )),
        None => checksums,
    };
    let slots: Vec<Vec<OnceLock<BlockFile>>> = match files {
        Some(files) => files
            .into_iter()
            .map(|l| l.into_iter().map(OnceLock::from).collect())
            .collect(),
        None => canonical
            .levels
            .iter()
            .map(|l| (0..l.blocks).map(|_| OnceLock::new()).collect())
            .collect(),
    };
    Ok(Published {
        doc_etag: quoted(&doc.version),
        // Level 1 for large galleries, as their blocks (the 6.8 MB document of 1,000,000
        // items: 0.1 s instead of 0.9 s at every start).
        doc_gzip: Bytes::from(if doc.gallery_size > FAST_GZIP_ABOVE {
            gzip_at(&doc_json, 1)
        } else {
            gzip(&doc_json)
        }),
        doc_json,
        canonical_json: json(&canonical)?,
        doc,
        files: slots,
        keep: true,
        mapped: canonical
            .levels
            .iter()
            .map(|l| (0..l.blocks).map(|_| Default::default()).collect())
            .collect(),
        checksums,
        written: false,
        pir: OnceLock::new(),
        catalogue_version,
        fingerprint,
        build_secs,
    })
}

/// Bumped whenever the partition code changes what it builds from the same gallery, so a
/// stored version built by older code is not served as current.
const PARTITION_FORMAT: &str = "privatemail-partition-2";

/// What a partition is a function of: the gallery (ids, labels, features, thumbnails, in id
/// order), the anchors its coverage is measured on, the seed, the operator's settings and the
/// code's format. Equal fingerprints build byte-identical versions, so a restart whose
/// fingerprint matches the announced version serves it without rebuilding.
pub fn fingerprint(
    items: &[Arc<GalleryItem>],
    anchor_features: &[Vec<f32>],
    seed: u64,
    settings: &PartitionSettings,
) -> String {
    let mut h = Sha256::new();
    h.update(PARTITION_FORMAT.as_bytes());
    h.update(seed.to_le_bytes());
    h.update(settings.max_share.to_bits().to_le_bytes());
    h.update([u8::from(settings.allow_full_download)]);
    h.update(format!("{:?}", default_specs(items.len())).as_bytes());
    h.update((items.len() as u64).to_le_bytes());
    // Chunks hashed in parallel (1 GB of pixels and features at 1,000,000 items), then their
    // digests in order.
    let chunks: Vec<[u8; 32]> = items
        .par_chunks(4_096)
        .map(|chunk| {
            // One update per item (the same bytes as a field at a time, 30 times faster).
            let mut c = Sha256::new();
            let mut buf = Vec::new();
            for it in chunk {
                buf.clear();
                buf.extend_from_slice(&it.id.to_le_bytes());
                buf.extend_from_slice(&it.label.to_le_bytes());
                buf.extend(it.features.iter().flat_map(|x| x.to_le_bytes()));
                buf.extend_from_slice(&it.pixels);
                c.update(&buf);
            }
            c.finalize().into()
        })
        .collect();
    for c in &chunks {
        h.update(c);
    }
    h.update((anchor_features.len() as u64).to_le_bytes());
    for a in anchor_features {
        for x in a {
            h.update(x.to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

fn quoted(s: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{s}\"")).expect("hex digits are a valid header value")
}

/// Above this many items the whole gallery is not published as one block (at 100,000 items
/// it is already about 100 MB; at 1,000,000 a 1 GB file nobody should download per search).
pub const WHOLE_MAX_ITEMS: usize = 100_000;

/// A pessimistic size of a version's files (plain + gzip): every item in each level about
/// 2.5 times (closure overlap), gzip about 60 % of plain.
fn estimated_bytes(n: usize, levels: usize, dim: usize, side: usize) -> u64 {
    let item = (8 + 1 + 4 * dim + side * side) as f64;
    (n as f64 * levels as f64 * item * 2.5 * 1.6) as u64
}

/// Fewest anchors outside the gallery that coverage is measured on.
const MIN_HELD_OUT_PROBES: usize = 100;

/// Build the partition of `items` (a gallery snapshot): the whole gallery as level 0 (only if
/// allowed), then [`default_specs`]; coverage measured on the public anchors' features.
/// CPU-heavy (seconds at 10k items): call off the async runtime. Levels build in parallel.
pub fn build(
    items: &[Arc<GalleryItem>],
    anchor_features: &[Vec<f32>],
    seed: u64,
    catalogue_version: u64,
    settings: &PartitionSettings,
    store: Option<&BlockStore>,
    staging: Option<&str>,
) -> Result<Published, PartitionError> {
    let t0 = Instant::now();
    let fingerprint = fingerprint(items, anchor_features, seed, settings);
    let n = items.len();
    let dim = items.first().map_or(0, |it| it.features.len());
    let side = SIDE as usize;
    if n == 0 || dim == 0 {
        return Err(PartitionError::Invalid("the gallery is empty".into()));
    }
    let ids: Vec<u64> = items.iter().map(|it| it.id).collect();
    let labels: Vec<u8> = items
        .iter()
        .map(|it| u8::try_from(it.label).ok().filter(|&l| l < 10))
        .collect::<Option<_>>()
        .ok_or_else(|| PartitionError::Invalid("a label is outside 0..10".into()))?;
    let mut features = Vec::with_capacity(n * dim);
    let mut thumbnails: Vec<&[u8]> = Vec::with_capacity(n);
    for it in items {
        if it.features.len() != dim || it.pixels.len() != side * side {
            return Err(PartitionError::Invalid(format!(
                "item {} has the wrong shape",
                it.id
            )));
        }
        features.extend_from_slice(&it.features);
        thumbnails.push(&it.pixels);
    }
    let g = GalleryView {
        ids: &ids,
        labels: &labels,
        features: &features,
        dim,
        thumbnails: Thumbnails::Rows(&thumbnails),
        thumb_side: side,
    };
    let anchors: Vec<f32> = anchor_features
        .iter()
        .filter(|a| a.len() == dim)
        .flatten()
        .copied()
        .collect();
    // Coverage predicts a held-out photo's fidelity, so measure it on anchors outside the
    // gallery; only if too few are left fall back to all of them (and say so in the document).
    let held_out = held_out_probes(&features, dim, &anchors);
    let (probes, coverage_probes) = if held_out.len() >= MIN_HELD_OUT_PROBES {
        let p: Vec<f32> = held_out
            .iter()
            .flat_map(|&i| anchors[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        (p, held_out.len())
    } else {
        tracing::warn!(
            held_out = held_out.len(),
            "partition: too few anchors outside the gallery; coverage measured on gallery members overstates the predicted fidelity"
        );
        (anchors, 0)
    };
    let truth: Vec<Vec<u32>> = probes
        .par_chunks(dim)
        .map(|p| nearest_k(&features, dim, p, COVERAGE_K))
        .collect();
    let specs = default_specs(n);
    let whole = settings.allow_full_download && n <= WHOLE_MAX_ITEMS;
    if settings.allow_full_download && !whole {
        tracing::warn!(
            items = n,
            max = WHOLE_MAX_ITEMS,
            "partition: the gallery is too large to offer as one download; the whole-gallery level is not published"
        );
    }
    // Stream the files to the store as they are encoded when the version would not fit the
    // memory budget (a staging prefix, renamed to the version once its hash is known).
    let stream = match (store, staging) {
        (Some(st), Some(prefix))
            if estimated_bytes(n, specs.len() + usize::from(whole), dim, side)
                > settings.cache_bytes =>
        {
            Some((st, prefix))
        }
        _ => None,
    };
    if specs.is_empty() && !whole {
        return Err(PartitionError::Invalid(format!(
            "{n} items are too few for a partition and full download is off"
        )));
    }
    // Closure neighbours once, for the largest m any level needs, rows split across threads.
    let m = specs
        .iter()
        .filter_map(|s| match s.overlap {
            Overlap::Closure(m) => Some(m as usize),
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .min(n - 1);
    let neighbours: Option<Vec<Vec<u32>>> = if m > 0 {
        let t = Instant::now();
        let ivf = InvertedFile::for_gallery(&features, dim, seed)?;
        let chunks: Vec<Vec<Vec<u32>>> = match &ivf {
            // Large galleries: list against probed lists by matrix products.
            Some(ivf) if n > KMEANS_SAMPLE_ABOVE => {
                vec![ivf.neighbours_by_list(&features, dim, m)]
            }
            _ => (0..n.div_ceil(NEIGHBOUR_CHUNK))
                .into_par_iter()
                .map(|c| {
                    let rows = c * NEIGHBOUR_CHUNK..((c + 1) * NEIGHBOUR_CHUNK).min(n);
                    gallery_neighbours(&features, dim, m, rows, ivf.as_ref())
                })
                .collect::<Result<_, _>>()?,
        };
        tracing::info!(
            items = n,
            m,
            exact = ivf.is_none(),
            secs = t.elapsed().as_secs_f64(),
            "partition: gallery neighbours"
        );
        Some(chunks.into_iter().flatten().collect())
    } else {
        None
    };
    let offset = usize::from(whole);
    // Checksums of streamed files, `(level, block, [plain, gzip])`, as they are written.
    let streamed_sums: Mutex<Vec<(usize, usize, [u32; 2])>> = Mutex::new(Vec::new());
    let write_streamed = |st: &BlockStore,
                          prefix: &str,
                          li: usize,
                          files: Vec<(usize, Vec<u8>, Vec<u8>)>|
     -> Result<(), BlockStoreError> {
        let sums: Vec<_> = files
            .par_iter()
            .map(|(b, raw, gz)| (li, *b, [crc32fast::hash(raw), crc32fast::hash(gz)]))
            .collect();
        let files = files
            .into_iter()
            .map(|(b, raw, gz)| (b, Bytes::from(raw), Bytes::from(gz)))
            .collect();
        st.write_blocks(prefix, li, files)?;
        streamed_sums
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sums);
        Ok(())
    };
    let build_one = |(li, spec): (usize, LevelSpec)| -> Result<PublishedLevel, PartitionError> {
        let t = Instant::now();
        let level = build_level(&features, dim, spec, seed, neighbours.as_deref())?;
        let p = match stream {
            Some((st, prefix)) => {
                let mut sink = |files: Vec<(usize, Vec<u8>, Vec<u8>)>| {
                    write_streamed(st, prefix, li, files).map_err(|e| {
                        shared::Error::InvalidParameter {
                            name: "block store",
                            reason: e.to_string(),
                        }
                    })
                };
                publish_level_to(&g, &level, &probes, &truth, Some(&mut sink))?
            }
            None => publish_level(&g, &level, &probes, &truth)?,
        };
        drop(level);
        tracing::info!(
            blocks = spec.blocks,
            overlap = %spec.overlap.name(),
            coverage_own = p.doc.coverage.own,
            bytes = p.doc.bytes.iter().sum::<u64>(),
            transfer_bytes = p.doc.transfer_bytes.iter().sum::<u64>(),
            secs = t.elapsed().as_secs_f64(),
            "partition: level built"
        );
        Ok(p)
    };
    let (whole_level, levels) = rayon::join(
        || {
            whole.then(|| {
                let t = Instant::now();
                let mut p = publish_whole(&g)?;
                if let Some((st, prefix)) = stream {
                    let files = std::mem::take(&mut p.files)
                        .into_iter()
                        .zip(std::mem::take(&mut p.gzipped))
                        .enumerate()
                        .map(|(b, (raw, gz))| (b, raw, gz))
                        .collect();
                    write_streamed(st, prefix, 0, files)?;
                }
                tracing::info!(
                    bytes = p.doc.bytes[0],
                    transfer_bytes = p.doc.transfer_bytes[0],
                    secs = t.elapsed().as_secs_f64(),
                    "partition: whole-gallery level built"
                );
                Ok::<_, PartitionError>(p)
            })
        },
        || {
            specs
                .par_iter()
                .enumerate()
                .map(|(i, &s)| build_one((offset + i, s)))
                .collect::<Result<Vec<_>, _>>()
        },
    );
    let levels: Vec<PublishedLevel> = whole_level
        .transpose()?
        .into_iter()
        .chain(levels?)
        .collect();
    // Streamed levels hold no files (they are in the store); held ones become `BlockFile`s.
    let mut files = Vec::with_capacity(levels.len());
    let mut docs = Vec::with_capacity(levels.len());
    for l in levels {
        files.push(
            l.files
                .into_iter()
                .zip(l.gzipped)
                .map(|(raw, gz)| BlockFile {
                    raw: Bytes::from(raw),
                    gzip: Bytes::from(gz),
                })
                .collect(),
        );
        docs.push(l.doc);
    }
    let doc = document(
        docs,
        &g,
        String::new(),
        settings.max_share,
        whole,
        coverage_probes,
    );
    if let Some((st, prefix)) = stream {
        let t = Instant::now();
        let files = st.rename_prefix(prefix, &doc.version)?;
        tracing::info!(version = %doc.version, files, secs = t.elapsed().as_secs_f64(), "partition: streamed files moved to the version");
    }
    let checksums = stream.is_some().then(|| {
        let mut crc32: Vec<Vec<[u32; 2]>> = doc
            .levels
            .iter()
            .map(|l| vec![[0; 2]; l.blocks as usize])
            .collect();
        for (li, b, sum) in streamed_sums
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
        {
            crc32[li][b] = sum;
        }
        Checksums { crc32 }
    });
    let mut published = assemble(
        doc,
        stream.is_none().then_some(files),
        checksums,
        store,
        catalogue_version,
        fingerprint,
        t0.elapsed().as_secs_f64(),
    )?;
    if stream.is_some() {
        published.keep = false;
        published.written = true;
    }
    let (raw, gz) = published.total_bytes();
    tracing::info!(
        version = %published.doc.version,
        items = n,
        levels = published.doc.levels.len(),
        blocks = published.doc.levels.iter().map(|l| l.blocks as usize).sum::<usize>(),
        bytes = raw,
        transfer_bytes = gz,
        doc_bytes = published.doc_json.len(),
        secs = published.build_secs,
        streamed = stream.is_some(),
        "partition built"
    );
    Ok(published)
}

/// The partition part of `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartitionStatus {
    pub version: String,
    /// The catalogue version the partition was built from.
    pub catalogue_version: u64,
    pub gallery_size: usize,
    /// B of each served level, in order (1 = the whole gallery).
    pub levels: Vec<u32>,
    pub build_secs: f64,
    /// All block files, uncompressed and gzip.
    pub bytes: u64,
    pub transfer_bytes: u64,
    /// Replaced versions still served (grace period).
    pub retired: usize,
}

/// The served partitions: the current one and, for their grace period, the ones it replaced;
/// and the store they are written to.
#[derive(Debug)]
pub struct Partitions {
    pub settings: PartitionSettings,
    store: Option<Arc<BlockStore>>,
    current: RwLock<Option<Arc<Published>>>,
    history: Mutex<History>,
    /// Versions being written to the store (not yet announced): garbage collection must not
    /// delete them.
    in_flight: Mutex<Vec<String>>,
}

/// Why a block could not be served.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error("partition {version} has no block {level}/{block} ({levels} levels)")]
    Missing {
        version: String,
        level: usize,
        block: usize,
        levels: usize,
    },
    #[error("reading block {level}/{block} of {version}: {err}")]
    Store {
        version: String,
        level: usize,
        block: usize,
        err: String,
    },
}

#[derive(Debug, Default)]
struct History {
    /// Replaced versions still served, oldest first, with when they expire.
    retired: VecDeque<(Arc<Published>, Instant)>,
    /// Versions no longer served, newest last.
    gone: VecDeque<String>,
}

impl History {
    fn forget(&mut self, version: String) {
        if !self.gone.contains(&version) {
            self.gone.push_back(version);
            while self.gone.len() > MAX_GONE {
                self.gone.pop_front();
            }
        }
    }

    fn prune(&mut self, now: Instant) {
        while self.retired.len() > MAX_RETIRED
            || self.retired.front().is_some_and(|(_, exp)| *exp <= now)
        {
            if let Some((p, _)) = self.retired.pop_front() {
                self.forget(p.doc.version.clone());
            }
        }
    }
}

/// Version strings echoed in messages are cut to this many characters.
const ECHO_MAX: usize = shared::params::limits::MAX_ECHO_CHARS;

impl Partitions {
    pub fn new(settings: PartitionSettings, store: Option<Arc<BlockStore>>) -> Self {
        Partitions {
            settings,
            store,
            current: RwLock::new(None),
            history: Mutex::new(History::default()),
            in_flight: Mutex::new(Vec::new()),
        }
    }

    pub fn store(&self) -> Option<&BlockStore> {
        self.store.as_deref()
    }

    /// Build the partition of a gallery snapshot (with this store's URLs).
    pub fn build(
        &self,
        items: &[Arc<GalleryItem>],
        anchor_features: &[Vec<f32>],
        seed: u64,
        catalogue_version: u64,
    ) -> Result<Published, PartitionError> {
        // A staging prefix for files streamed before the version is known; kept from garbage
        // collection while the build runs, and its result (the version) until published.
        let staging = format!(
            "staging-{catalogue_version}-{}-{}",
            std::process::id(),
            STAGING_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.hold(&staging);
        let built = build(
            items,
            anchor_features,
            seed,
            catalogue_version,
            &self.settings,
            self.store(),
            Some(&staging),
        );
        if let Ok(p) = &built {
            if p.written {
                self.hold(&p.doc.version);
            }
        }
        self.release(&staging);
        built
    }

    /// Keep `prefix` from garbage collection (a version or staging prefix being written).
    fn hold(&self, prefix: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(prefix.to_string());
    }

    /// Undo every [`Partitions::hold`] of `prefix`.
    fn release(&self, prefix: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|v| v != prefix);
    }

    /// Write a built version to the store, then announce it there, then make it current here
    /// (in that order: what a restart or a bucket's client sees is always a whole version).
    /// Returns false, keeping the old version, if the store failed, or if `new` was built from
    /// an older catalogue than the current one (a slower rebuild must not undo a newer one).
    pub fn persist_and_publish(&self, new: Published) -> Result<bool, PartitionError> {
        let version = new.doc.version.clone();
        let done = self.persist_and_publish_inner(new);
        self.release(&version);
        done
    }

    fn persist_and_publish_inner(&self, mut new: Published) -> Result<bool, PartitionError> {
        if let Some(cur) = self.current() {
            if new.catalogue_version < cur.catalogue_version {
                tracing::info!(
                    built = new.catalogue_version,
                    current = cur.catalogue_version,
                    "partition: a newer catalogue is already published; dropping this build"
                );
                return Ok(false);
            }
        }
        if let Some(store) = &self.store {
            let files =
                if new.written {
                    None
                } else {
                    Some(new.files_for_store().ok_or_else(|| {
                        PartitionError::Invalid("a built version lacks files".into())
                    })?)
                };
            let canonical: PartitionDoc = serde_json::from_slice(&new.canonical_json)
                .map_err(|e| PartitionError::Invalid(e.to_string()))?;
            self.hold(&new.doc.version);
            let t = Instant::now();
            let sums = new
                .checksums
                .as_ref()
                .ok_or_else(|| PartitionError::Invalid("a built version lacks checksums".into()))?;
            let written = match &files {
                Some(files) => store.write_version(&canonical, files, sums, &new.canonical_json),
                None => store.write_document(&canonical.version, sums, &new.canonical_json),
            }
            .and_then(|()| {
                // A damaged announcement is replaced (it names nothing servable).
                let previous = store.manifest().unwrap_or(None);
                let m = Manifest {
                    version: new.doc.version.clone(),
                    fingerprint: new.fingerprint.clone(),
                    catalogue_version: new.catalogue_version,
                    build_secs: new.build_secs,
                    replaced: Vec::new(),
                };
                store.announce(&m.after(previous.as_ref()))
            });
            written?;
            tracing::info!(
                version = %new.doc.version,
                store = store.describe(),
                secs = t.elapsed().as_secs_f64(),
                "partition written and announced"
            );
            self.fit_memory(&mut new);
        }
        self.publish(new);
        Ok(true)
    }

    /// The version the store announced, ready to serve (block files are read on first
    /// request), if there is one.
    pub fn load_announced(&self) -> Result<Option<Published>, PartitionError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let Some((m, doc, _)) = store.load_current()? else {
            return Ok(None);
        };
        // Without usable checksums every block read is SHA-256-checked instead.
        let checksums = match store.load_checksums(&m.version) {
            Ok(Some(c)) if c.fits(&doc) => Some(c),
            Ok(Some(_)) => {
                tracing::warn!(version = %m.version, "partition: stored checksums do not fit the document; ignored");
                None
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(version = %m.version, error = %e, "partition: stored checksums unreadable; ignored");
                None
            }
        };
        let mut p = assemble(
            doc,
            None,
            checksums,
            Some(store),
            m.catalogue_version,
            m.fingerprint,
            m.build_secs,
        )?;
        self.fit_memory(&mut p);
        Ok(Some(p))
    }

    /// Drop a version's held files (and hold none later) if it exceeds the memory budget; its
    /// blocks are then read from the store on each request.
    fn fit_memory(&self, p: &mut Published) {
        let (raw, gz) = p.total_bytes();
        if raw + gz > self.settings.cache_bytes {
            for slot in p.files.iter_mut().flatten() {
                slot.take();
            }
            p.keep = false;
            tracing::info!(
                version = %p.doc.version,
                mib = (raw + gz) >> 20,
                budget_mib = self.settings.cache_bytes >> 20,
                "partition: blocks are read from the store per request (over the memory budget)"
            );
        }
    }

    /// One block file, plain or gzip (`gz`): held in memory; else, for a version held once
    /// read, both files read from the store, checked against the document's SHA-256 and
    /// kept; else the one file read from the store (SHA-256-checked on every read when the
    /// version has no checksums).
    ///
    /// With checksums, the file is checked against its CRC-32 when first read; a local
    /// store's file is read by mapping it, and the checked mapping is kept and sent from
    /// then on (the bytes are the page cache's: no copy, no per-request system call). Stored
    /// files are immutable (the block store's invariant), so a kept mapping always holds the
    /// bytes checked. A damaged stored file is an error, never served; and whatever is sent,
    /// every client checks each block against the document's SHA-256 (held in this server's
    /// memory) before using it.
    pub async fn block(
        &self,
        p: &Published,
        level: usize,
        block: usize,
        gz: bool,
    ) -> Result<Bytes, BlockError> {
        let missing = || BlockError::Missing {
            version: p.doc.version.clone(),
            level,
            block,
            levels: p.levels(),
        };
        let pick = |f: &BlockFile| if gz { f.gzip.clone() } else { f.raw.clone() };
        match p.cached(level, block) {
            None => return Err(missing()),
            Some(Some(f)) => return Ok(pick(f)),
            Some(None) => {}
        }
        let fail = |err: String| BlockError::Store {
            version: p.doc.version.clone(),
            level,
            block,
            err,
        };
        let store = self.store.as_ref().ok_or_else(|| fail("no store".into()))?;
        let version = &p.doc.version;
        if let (false, Some(sums)) = (p.keep, &p.checksums) {
            if let Some(kept) = p.mapped[level][block][usize::from(gz)].get() {
                return Ok(kept.clone());
            }
            let want = sums.get(level, block, gz).ok_or_else(missing)?;
            let bytes = store
                .read_file(version, level, block, gz)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if crc32fast::hash(&bytes) != want {
                return Err(fail(format!("stored bytes do not match CRC-32 {want:08x}")));
            }
            // A bucket's bytes are a copy in this process's memory: not kept. Nor is a mapping
            // past the bound (sent, then unmapped).
            if !store.is_mapped() || KEPT_MAPS.fetch_add(1, Ordering::Relaxed) >= MAX_KEPT_MAPS {
                if store.is_mapped() {
                    KEPT_MAPS.fetch_sub(1, Ordering::Relaxed);
                }
                return Ok(bytes);
            }
            let mut kept = false;
            let sent = p.mapped[level][block][usize::from(gz)]
                .get_or_init(|| {
                    kept = true;
                    bytes
                })
                .clone();
            if !kept {
                KEPT_MAPS.fetch_sub(1, Ordering::Relaxed);
            }
            return Ok(sent);
        }
        let (raw, gzip) = store
            .read_block(version, level, block)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let want = &p.doc.levels[level].hashes[block];
        if &shared::protocol::blocks::hash_hex(&raw) != want {
            return Err(fail(format!("stored bytes do not match SHA-256 {want}")));
        }
        // The gzip file too, where the version has checksums (else the client's SHA-256 check
        // of the inflated bytes is its only check).
        if let Some(sum) = p.checksums.as_ref().and_then(|c| c.get(level, block, true)) {
            if crc32fast::hash(&gzip) != sum {
                return Err(fail(format!(
                    "stored gzip bytes do not match CRC-32 {sum:08x}"
                )));
            }
        }
        let f = BlockFile { raw, gzip };
        if p.keep {
            Ok(pick(p.files[level][block].get_or_init(|| f)))
        } else {
            Ok(pick(&f))
        }
    }

    /// Delete the store's copies of versions that are neither current, retired nor being
    /// written, and whose newest file is older than the grace period (so a client that
    /// fetched the document of a version just replaced can still finish). Returns the
    /// versions deleted. Safe to run at any time; errors are logged.
    pub fn collect_garbage(&self) -> Vec<String> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let live: Vec<String> = {
            let cur = self.current();
            let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
            cur.iter()
                .map(|p| p.doc.version.clone())
                .chain(h.retired.iter().map(|(p, _)| p.doc.version.clone()))
                .chain(
                    self.in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .cloned(),
                )
                .collect()
        };
        let versions = match store.versions() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "partition: listing the block store failed");
                return Vec::new();
            }
        };
        let cutoff =
            crate::partition::blockstore::now_secs() - self.settings.grace.as_secs() as i64;
        // When each version was replaced (also before a restart, which forgets the retired
        // list); a version never announced counts from its newest file.
        let replaced = match store.manifest() {
            Ok(m) => m.map(|m| m.replaced).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "partition: reading the announcement failed");
                return Vec::new();
            }
        };
        let mut deleted = Vec::new();
        for v in versions {
            let since = replaced
                .iter()
                .rev()
                .find(|(r, _)| *r == v.version)
                .map_or(v.newest_secs, |&(_, t)| t.max(v.newest_secs));
            if live.contains(&v.version) || since > cutoff {
                continue;
            }
            match store.delete_version(&v.version) {
                Ok(files) => {
                    tracing::info!(version = %v.version, files, complete = v.complete, "partition: expired version deleted from the store");
                    deleted.push(v.version);
                }
                Err(e) => {
                    tracing::warn!(version = %v.version, error = %e, "partition: deleting an expired version failed")
                }
            }
        }
        deleted
    }

    /// The current partition, if one was built.
    pub fn current(&self) -> Option<Arc<Published>> {
        let cur = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .prune(Instant::now());
        cur
    }

    /// What `/status` shows.
    pub fn status(&self) -> Option<PartitionStatus> {
        let p = self.current()?;
        let (bytes, transfer_bytes) = p.total_bytes();
        Some(PartitionStatus {
            version: p.doc.version.clone(),
            catalogue_version: p.catalogue_version,
            gallery_size: p.doc.gallery_size,
            levels: p.doc.levels.iter().map(|l| l.blocks).collect(),
            build_secs: p.build_secs,
            bytes,
            transfer_bytes,
            retired: self.retired_count(),
        })
    }

    /// Versions still served besides the current one.
    pub fn retired_count(&self) -> usize {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retired
            .len()
    }

    /// Make `new` current; the replaced version (if different) is served for the grace period.
    pub fn publish(&self, new: Published) {
        let new = Arc::new(new);
        // History first, then current (the only place both are held): a concurrent `get` that
        // no longer finds the old version current finds it retired.
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let old = self
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(Arc::clone(&new));
        h.retired.retain(|(p, _)| p.doc.version != new.doc.version);
        h.gone.retain(|v| *v != new.doc.version);
        if let Some(old) = old.filter(|o| o.doc.version != new.doc.version) {
            let now = Instant::now();
            h.retired.push_back((old, now + self.settings.grace));
            h.prune(now);
        }
    }

    /// The partition with this version, if it is still served.
    pub fn get(&self, version: &str) -> Result<Arc<Published>, VersionError> {
        let cur = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(VersionError::Unavailable)?;
        if cur.doc.version == version {
            return Ok(cur);
        }
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.prune(Instant::now());
        if let Some((p, _)) = h.retired.iter().find(|(p, _)| p.doc.version == version) {
            return Ok(Arc::clone(p));
        }
        let asked: String = version.chars().take(ECHO_MAX).collect();
        let current = cur.doc.version.clone();
        if h.gone.iter().any(|v| v == version) {
            Err(VersionError::Gone { asked, current })
        } else {
            Err(VersionError::Unknown { asked, current })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(version: &str) -> Published {
        Published {
            doc: crate::partition::blockstore::tests::doc(version),
            doc_json: Bytes::new(),
            doc_gzip: Bytes::new(),
            doc_etag: quoted(version),
            canonical_json: Bytes::new(),
            files: Vec::new(),
            keep: true,
            checksums: None,
            mapped: Vec::new(),
            written: false,
            pir: OnceLock::new(),
            catalogue_version: 0,
            fingerprint: String::new(),
            build_secs: 0.0,
        }
    }

    #[test]
    fn versions_are_served_then_gone_and_unknown_ones_are_told_apart() {
        let p = Partitions::new(
            PartitionSettings {
                grace: Duration::from_millis(200),
                ..Default::default()
            },
            None,
        );
        assert_eq!(p.get("a").unwrap_err(), VersionError::Unavailable);
        p.publish(fake("a"));
        assert!(p.get("a").is_ok());
        p.publish(fake("b"));
        // In the grace period both are served.
        assert!(p.get("a").is_ok() && p.get("b").is_ok());
        assert!(
            matches!(p.get("zz"), Err(VersionError::Unknown { ref current, .. }) if current == "b")
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            matches!(p.get("a"), Err(VersionError::Gone { ref current, .. }) if current == "b")
        );
        // Republishing the same version retires nothing.
        p.publish(fake("b"));
        assert_eq!(p.retired_count(), 0);
        // A version that comes back (same gallery again) is current, not gone.
        p.publish(fake("a"));
        assert!(p.get("a").is_ok());
    }

    #[test]
    fn retired_versions_are_bounded() {
        let p = Partitions::new(PartitionSettings::default(), None);
        for i in 0..10 {
            p.publish(fake(&format!("v{i}")));
        }
        assert_eq!(p.retired_count(), MAX_RETIRED);
        assert!(matches!(p.get("v0"), Err(VersionError::Gone { .. })));
        assert!(p.get("v8").is_ok());
        let long = "x".repeat(10_000);
        match p.get(&long) {
            Err(VersionError::Unknown { asked, .. }) => assert_eq!(asked.len(), ECHO_MAX),
            other => panic!("{other:?}"),
        }
    }
}
