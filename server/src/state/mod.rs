//! The server's state: the live catalogue (what is stored), the public anchors, and the search
//! snapshot (the catalogue as of its last embedding), which is swapped atomically after a
//! background re-embedding while searches keep being answered from the old one.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::api::{AnchorsResponse, ApiLimits, ConfigResponse, GalleryMap, StatusResponse};
use shared::protocol::frame::AnchorFrame;
use shared::protocol::privatemail::{embed_dense, embed_nystrom};
use shared::protocol::retrieve::gallery_rows;
use shared::{DMatrix, Params};

use crate::gallery::data::{load_split, DataError, Split, CLASS_NAMES};
use crate::gallery::index::Index;
use crate::gallery::store::{
    FeatureRow, SnapshotMeta, Store, StoreError, StoredItem, StoredSnapshot,
};
use crate::item::{GalleryItem, SIDE};
use crate::ops::progress::{Progress, Spinner};
use crate::partition::{PartitionSettings, Partitions};
use rayon::prelude::*;
use shared::embed::model::Model;

/// Up to this many rows (gallery + anchors) the exact dense kernel is used (≤ 0.6 GB); above
/// it, the Nyström approximation with [`NYSTROM_LANDMARKS`] landmarks (O(N·m) memory).
pub const DENSE_MAX_ROWS: usize = 12_000;
/// Measured on 3,000 images with the model's features (`tests/nystrom_vs_dense.rs`): 1,500
/// landmarks share only 24 % of the exact embedding's 8 nearest neighbours, 2,000 share 91 %
/// (aligned residual 0.0003), 2,500 97 %.
pub const NYSTROM_LANDMARKS: usize = 2_000;
/// The Nyström factor holds rows × landmarks f32 entries; above this many (800 MB, reached past
/// 100,000 rows) the landmarks shrink to fit, so a 1,000,000-image gallery embeds in bounded
/// memory (200 landmarks: a coarser non-private embedding, which only the paper's protocol
/// ranks — and that protocol returns category guesses at honest noise anyway).
pub const NYSTROM_MAX_ENTRIES: usize = 200_000_000;

/// Landmarks for a Nyström embedding of `rows` rows (see [`NYSTROM_MAX_ENTRIES`]).
pub fn nystrom_landmarks(rows: usize) -> usize {
    NYSTROM_LANDMARKS
        .min(NYSTROM_MAX_ENTRIES / rows.max(1))
        .max(100)
}

/// Anchor ids live above every gallery id the demo seeds.
pub const ANCHOR_ID_BASE: u64 = 1_000_000_000;

/// A short, stable version string for the model weights (FNV-1a of the bytes).
pub fn model_version(weights: &[u8]) -> String {
    shared::embed::model::weights_version(weights)
}

/// How the last start went: what was reused from the store and where the time went
/// (`GET /status` → `startup`; also logged as "start-up timings").
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StartupReport {
    /// Every gallery item's features came from the store (none recomputed).
    pub features_reused: bool,
    /// Items whose stored features (same weights version) were used.
    pub features_loaded: usize,
    /// Items whose features were computed (and written back).
    pub features_computed: usize,
    /// The stored embedding matched and was used.
    pub embedding_reused: bool,
    /// Fashion-MNIST files and the public anchors' features.
    pub data_secs: f64,
    /// Reading (or seeding) the store: items and stored features.
    pub store_load_secs: f64,
    /// Missing features computed and written back.
    pub features_secs: f64,
    /// The embedding (stored or computed), the frame placement and the indexes.
    pub embedding_secs: f64,
    /// The block partition: loaded from the block store (side by side with the embedding, so
    /// the two overlap), or built (and written there) after it.
    pub partition_secs: f64,
    /// The announced partition in the block store was built from this very gallery and
    /// settings, and was served without rebuilding.
    pub partition_reused: bool,
    /// A stored partition of an older gallery was served at once while a new one is built.
    pub partition_stale: bool,
    /// From the start to serving (less than the sum when stages overlap).
    pub total_secs: f64,
}

/// What searches are answered from. Immutable once built.
pub struct Snapshot {
    pub catalogue_version: u64,
    pub items: Vec<Arc<GalleryItem>>,
    /// Gallery rows of the embedding (row-major), in `items` order.
    pub gallery_rows: Vec<Vec<f64>>,
    pub index: Index,
    pub anchor_rows: DMatrix<f64>,
    /// The gallery placed in the public anchor frame (frame protocol).
    pub frame: FrameGallery,
}

/// Gallery rows in the anchor frame, in `items` order: stored once, flat and row-major (the
/// posterior ranking scans them all), with a k-d tree for nearest-row searches.
pub struct FrameGallery {
    pub flat: Vec<f64>,
    pub dim: usize,
    pub labels: Vec<u32>,
    pub index: Index,
}

impl FrameGallery {
    /// The rows of `items`, `dim` values each, one after another.
    fn new(flat: Vec<f64>, dim: usize, items: &[Arc<GalleryItem>]) -> Self {
        FrameGallery {
            index: Index::build_flat(&flat, dim),
            flat,
            dim,
            labels: items.iter().map(|it| it.label).collect(),
        }
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.flat[i * self.dim..(i + 1) * self.dim]
    }
}

/// `GET /api/v1/status`: the shared [`StatusResponse`] with the partition's state added
/// (clients that only know `StatusResponse` ignore the extra field).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerStatus {
    #[serde(flatten)]
    pub base: StatusResponse,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<crate::partition::PartitionStatus>,
    /// The current version's PIR databases and the work their answers took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pir: Option<crate::partition::pir::PirStatus>,
    /// How the last start went (what was reused, where the time went).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<StartupReport>,
}

pub struct AppState {
    pub config: ConfigResponse,
    pub anchors: AnchorsResponse,
    anchor_features: DMatrix<f64>,
    /// The public anchor frame (`shared::protocol::frame`), fixed for the server's lifetime.
    pub frame: AnchorFrame,
    pub model: Model,
    pub params: Params,
    pub seed: u64,
    pub admin_token: Option<String>,
    pub catalogue: RwLock<BTreeMap<u64, Arc<GalleryItem>>>,
    pub catalogue_version: AtomicU64,
    snapshot: RwLock<Arc<Snapshot>>,
    reembed: Mutex<Reembed>,
    pub store: Store,
    pub search_latency: crate::ops::latency::Histogram,
    /// The published partition for private block retrieval (rebuilt with the snapshot).
    pub partitions: Partitions,
    /// How the last start went.
    pub startup: StartupReport,
    /// PIR work done (for `/status`) and the cap on concurrent PIR answers.
    pub pir_counters: crate::partition::pir::PirCounters,
    pub pir_slots: Arc<tokio::sync::Semaphore>,
    /// Items whose features are in the store (by identity: a re-added id is a new item).
    features_stored: Mutex<HashMap<u64, Arc<GalleryItem>>>,
}

#[derive(Default)]
struct Reembed {
    running: bool,
    dirty: bool,
}

pub struct Options<'a> {
    pub data_dir: &'a Path,
    pub store_path: &'a Path,
    pub gallery_size: usize,
    pub anchor_count: usize,
    pub seed: u64,
    pub limits: ApiLimits,
    pub admin_token: Option<String>,
    /// The block store: a directory, `file:///dir` or `s3://bucket/prefix`; `None` = the
    /// directory beside the gallery store (`gallery.blocks` next to `gallery.redb`).
    pub blocks_store: Option<&'a str>,
    /// Where clients fetch blocks from (a bucket or CDN URL); `None` = this server.
    pub blocks_public_url: Option<&'a str>,
    /// PIR answers computed at once at most (each uses every core through rayon); more wait
    /// up to a second, then get 503 `busy`.
    pub pir_concurrency: usize,
}

impl Options<'_> {
    /// The block store spec these options give.
    pub fn blocks_spec(&self) -> String {
        match self.blocks_store {
            Some(s) => s.to_string(),
            None => self
                .store_path
                .with_extension("blocks")
                .to_string_lossy()
                .into_owned(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("embedding failed: {0}")]
    Embed(#[from] shared::Error),
    #[error("thumbnail encoding failed: {0}")]
    Png(#[from] png::EncodingError),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Item(#[from] crate::item::ItemError),
    #[error(transparent)]
    Blocks(#[from] crate::partition::blockstore::BlockStoreError),
}

/// The public anchors: the first `count` training images with at most ⌈count/10⌉ per class, in
/// index order (the evaluation uses the same ones).
pub fn balanced_anchors(train: &Split, count: usize) -> Vec<usize> {
    let per_class = count.div_ceil(10);
    let mut taken = [0usize; 10];
    (0..train.labels.len())
        .filter(|&i| {
            let c = train.labels[i] as usize;
            taken[c] += 1;
            taken[c] <= per_class
        })
        .take(count)
        .collect()
}

/// The gallery items with their features: stored ones (same weights version) reused, the
/// others computed in parallel with progress and written back. Also returns, for each
/// computed id, whether writing it back succeeded.
fn gallery_features(
    store: &Store,
    weights: &str,
    mut inputs: Vec<(StoredItem, Option<Vec<f32>>)>,
    model: &Model,
    report: &mut StartupReport,
) -> Result<(Vec<GalleryItem>, HashMap<u64, bool>), StateError> {
    let t = std::time::Instant::now();
    // A stored row of the wrong width or with non-finite values is recomputed.
    inputs.par_iter_mut().for_each(|(_, f)| {
        if f.as_ref().is_some_and(|f| {
            f.len() != shared::embed::model::EMBED || !f.iter().all(|v| v.is_finite())
        }) {
            *f = None;
        }
    });
    let missing = inputs.iter().filter(|(_, f)| f.is_none()).count();
    let progress = (missing > 0).then(|| {
        Progress::new(
            format!("gallery features ({missing} of {})", inputs.len()),
            missing as u64,
            "images",
        )
    });
    // Missing features in batches of lanes (`Model::infer_batch`: 8 images per pass, equal bit
    // for bit to `infer`, which the browser runs on a query).
    const BATCH: usize = 256;
    let mut pending: Vec<(usize, StoredItem)> = Vec::with_capacity(missing);
    let mut items: Vec<Option<(GalleryItem, bool)>> = Vec::with_capacity(inputs.len());
    for (i, (it, f)) in inputs.drain(..).enumerate() {
        match f {
            Some(f) => items.push(Some((
                GalleryItem::with_features(it.id, it.label, it.pixels, f)?,
                false,
            ))),
            None => {
                items.push(None);
                pending.push((i, it));
            }
        }
    }
    let computed_items: Vec<(usize, GalleryItem)> = pending
        .par_chunks_mut(BATCH)
        .map(|chunk| {
            let images: Vec<&[u8]> = chunk.iter().map(|(_, it)| it.pixels.as_slice()).collect();
            let inf = model.infer_batch(&images)?;
            if let Some(p) = &progress {
                p.inc(chunk.len() as u64);
            }
            chunk
                .iter_mut()
                .zip(inf)
                .map(|((i, it), r)| {
                    let pixels = std::mem::take(&mut it.pixels);
                    Ok((
                        *i,
                        GalleryItem::with_features(it.id, it.label, pixels, r.features)?,
                    ))
                })
                .collect::<Result<Vec<_>, StateError>>()
        })
        .collect::<Result<Vec<_>, StateError>>()?
        .into_iter()
        .flatten()
        .collect();
    drop(pending);
    for (i, g) in computed_items {
        items[i] = Some((g, true));
    }
    let items: Vec<(GalleryItem, bool)> = items
        .into_iter()
        .map(|x| x.expect("every item is loaded or computed"))
        .collect();
    if let Some(p) = &progress {
        p.finish();
    }
    let computed_rows: Vec<FeatureRow> = items
        .iter()
        .filter(|(_, c)| *c)
        .map(|(it, _)| FeatureRow {
            id: it.id,
            label: it.label,
            pixels: &it.pixels,
            features: &it.features,
        })
        .collect();
    let written = if computed_rows.is_empty() {
        true
    } else {
        match store.put_features(weights, &computed_rows) {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(error = %e, "storing gallery features failed");
                false
            }
        }
    };
    let computed: HashMap<u64, bool> = computed_rows.iter().map(|r| (r.id, written)).collect();
    drop(computed_rows);
    report.features_computed = computed.len();
    report.features_loaded = items.len() - computed.len();
    report.features_reused = computed.is_empty();
    report.features_secs = t.elapsed().as_secs_f64();
    tracing::info!(
        loaded = report.features_loaded,
        computed = report.features_computed,
        secs = report.features_secs,
        "gallery features ready"
    );
    Ok((items.into_iter().map(|(it, _)| it).collect(), computed))
}

impl AppState {
    /// Open the store (seeding it with the first `gallery_size` test images if empty), take
    /// the anchors from the training split, and reuse the stored embedding if it matches the
    /// catalogue, the parameters and the anchors — otherwise embed now.
    pub fn open(opts: &Options) -> Result<Arc<Self>, StateError> {
        Self::open_with(opts, PartitionSettings::default())
    }

    /// [`AppState::open`] with the operator's partition settings; the partition is built
    /// before this returns, so the server never listens without one.
    pub fn open_with(
        opts: &Options,
        partition: PartitionSettings,
    ) -> Result<Arc<Self>, StateError> {
        let t_total = std::time::Instant::now();
        let mut report = StartupReport::default();
        let t = std::time::Instant::now();
        let d = (SIDE * SIDE) as usize;
        let weights = model_version(crate::MODEL_WEIGHTS);
        // The training split (for the anchors) and the store load independently: overlapped.
        // Each stored item with its stored features, if any.
        type Loaded = (
            Store,
            Vec<(StoredItem, Option<Vec<f32>>)>,
            u64,
            u64,
            bool,
            f64,
        );
        let packed_path = crate::gallery::packed::path_for(opts.store_path);
        let (train, loaded) = rayon::join(
            || load_split(opts.data_dir, "train"),
            || -> Result<Loaded, StateError> {
                let t = std::time::Instant::now();
                let store = Store::open(opts.store_path)?;
                tracing::info!(secs = t.elapsed().as_secs_f64(), "store opened");
                let version = store.catalogue_version()?;
                let instance = store.instance()?;
                // The packed copy if it is this store's current content, else the rows (two
                // read transactions side by side: redb readers do not block each other).
                if let Some(rows) = crate::gallery::packed::read(
                    &packed_path,
                    instance,
                    store.generation()?,
                    &weights,
                ) {
                    let rows = rows.into_iter().map(|(it, f)| (it, Some(f))).collect();
                    let secs = t.elapsed().as_secs_f64();
                    return Ok((store, rows, version, instance, true, secs));
                }
                let (items, features) =
                    rayon::join(|| store.load_items(), || store.load_features(&weights));
                let (items, mut features) = (items?, features?);
                let rows = items
                    .into_iter()
                    .map(|it| {
                        let f = features.remove(&it.id);
                        (it, f)
                    })
                    .collect();
                let secs = t.elapsed().as_secs_f64();
                Ok((store, rows, version, instance, false, secs))
            },
        );
        let train = train?;
        let (store, mut stored, mut version, instance, packed_used, load_secs) = loaded?;
        let anchor_idx = balanced_anchors(&train, opts.anchor_count);
        if anchor_idx.len() < 10 {
            return Err(StateError::Invalid("need at least 10 anchors".into()));
        }
        report.data_secs += (t.elapsed().as_secs_f64() - load_secs).max(0.0);
        let t = std::time::Instant::now();
        let blocks = Arc::new(crate::partition::blockstore::BlockStore::open(
            &opts.blocks_spec(),
            opts.blocks_public_url.map(str::to_string),
        )?);
        if stored.is_empty() {
            // The test split first (ids 0..10,000), then, for bigger galleries, the training
            // split (ids 10,000 + index).
            let test = load_split(opts.data_dir, "t10k")?;
            let g = opts.gallery_size.min(test.labels.len());
            let mut seeded: Vec<StoredItem> = (0..g)
                .map(|i| StoredItem {
                    id: i as u64,
                    label: test.labels[i] as u32,
                    pixels: test.images.image(i).to_vec(),
                })
                .collect();
            let extra = opts.gallery_size.saturating_sub(g).min(train.labels.len());
            seeded.extend((0..extra).map(|i| StoredItem {
                id: (test.labels.len() + i) as u64,
                label: train.labels[i] as u32,
                pixels: train.images.image(i).to_vec(),
            }));
            // Beyond the dataset: deterministic variants of its images (`data::augment`).
            let dataset = seeded.len();
            if opts.gallery_size > dataset && dataset == crate::gallery::data::DATASET_IMAGES {
                let more: Vec<StoredItem> = (dataset..opts.gallery_size)
                    .into_par_iter()
                    .map(|id| {
                        let base = &seeded[id % dataset];
                        StoredItem {
                            id: id as u64,
                            label: base.label,
                            pixels: crate::gallery::data::augment(&base.pixels, id as u64),
                        }
                    })
                    .collect();
                seeded.extend(more);
            }
            version += 1;
            store.put_items(&seeded, version)?;
            stored = seeded.into_iter().map(|it| (it, None)).collect();
        }
        report.store_load_secs = load_secs + t.elapsed().as_secs_f64();
        tracing::info!(
            items = stored.len(),
            stored_features = stored.iter().filter(|(_, f)| f.is_some()).count(),
            packed = packed_used,
            secs = report.store_load_secs,
            "store loaded"
        );
        let model = Model::from_bytes(crate::MODEL_WEIGHTS)?;
        if let Some((bad, _)) = stored
            .iter()
            .find(|(it, _)| it.pixels.len() != d || it.label >= 10)
        {
            return Err(StateError::Invalid(format!(
                "stored item {} is malformed",
                bad.id
            )));
        }
        let (items, computed) = gallery_features(&store, &weights, stored, &model, &mut report)?;
        crate::ops::progress::release_freed_memory();
        let catalogue: BTreeMap<u64, Arc<GalleryItem>> =
            items.into_iter().map(|it| (it.id, Arc::new(it))).collect();
        if !packed_used {
            // The next start reads one file instead of the rows (written aside, renamed), if
            // nothing is written to the store before it.
            let generation = store.generation()?;
            let items: Vec<Arc<GalleryItem>> = catalogue.values().cloned().collect();
            let weights = weights.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let rows: Vec<crate::gallery::packed::Row> = items
                    .iter()
                    .map(|it| {
                        (
                            it.id,
                            it.label,
                            it.pixels.as_slice(),
                            it.features.as_slice(),
                        )
                    })
                    .collect();
                match crate::gallery::packed::write(
                    &packed_path,
                    instance,
                    generation,
                    &weights,
                    &rows,
                ) {
                    Ok(()) => tracing::info!(
                        items = rows.len(),
                        secs = t.elapsed().as_secs_f64(),
                        "packed catalogue written"
                    ),
                    Err(e) => tracing::warn!(error = %e, "writing the packed catalogue failed"),
                }
            });
        }
        let features_stored: HashMap<u64, Arc<GalleryItem>> = catalogue
            .values()
            .filter(|it| !computed.contains_key(&it.id) || computed[&it.id])
            .map(|it| (it.id, Arc::clone(it)))
            .collect();
        let t = std::time::Instant::now();
        let params = Params::default();
        let anchors = AnchorsResponse {
            ids: anchor_idx
                .iter()
                .map(|&i| ANCHOR_ID_BASE + i as u64)
                .collect(),
            labels: anchor_idx.iter().map(|&i| train.labels[i] as u32).collect(),
            features: Vec::new(),
            frame_rows: Vec::new(),
        };
        // Eight images per SIMD pass (`infer_batch`, bit-identical to `infer`), chunks in
        // parallel.
        let anchor_inf: Vec<Vec<f32>> = anchor_idx
            .par_chunks(64)
            .map(|chunk| {
                let images: Vec<&[u8]> = chunk.iter().map(|&i| train.images.image(i)).collect();
                model.infer_batch(&images)
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .map(|r| r.features)
            .collect();
        let fd = anchor_inf[0].len();
        let anchor_features =
            DMatrix::from_fn(anchor_idx.len(), fd, |r, j| anchor_inf[r][j] as f64);
        let frame = AnchorFrame::class_simplex(
            &anchor_features,
            &anchors.labels,
            params.smlq.num_classes,
            shared::protocol::frame::DEFAULT_KERNEL_SCALE,
        )?;
        report.data_secs += t.elapsed().as_secs_f64();
        let anchors = AnchorsResponse {
            features: anchor_inf,
            frame_rows: gallery_rows(frame.rows()),
            ..anchors
        };
        let config = ConfigResponse {
            smlq: params.smlq,
            privacy_defaults: params.privacy,
            class_names: CLASS_NAMES.iter().map(|s| s.to_string()).collect(),
            feature_dim: fd,
            frame_dim: frame.dim(),
            frame_kernel_scale: shared::protocol::frame::DEFAULT_KERNEL_SCALE,
            anchor_count: anchor_idx.len(),
            model_version: weights,
            limits: opts.limits,
        };
        let items: Vec<Arc<GalleryItem>> = catalogue.values().cloned().collect();
        let placeholder = Snapshot {
            catalogue_version: 0,
            items: Vec::new(),
            gallery_rows: Vec::new(),
            index: Index::build(&[]),
            anchor_rows: DMatrix::zeros(0, 0),
            frame: FrameGallery::new(Vec::new(), 0, &[]),
        };
        let mut state = AppState {
            config,
            anchors,
            anchor_features,
            frame,
            model,
            params,
            seed: opts.seed,
            admin_token: opts.admin_token.clone(),
            catalogue: RwLock::new(catalogue),
            catalogue_version: AtomicU64::new(version),
            snapshot: RwLock::new(Arc::new(placeholder)),
            reembed: Mutex::new(Reembed::default()),
            store,
            search_latency: Default::default(),
            partitions: Partitions::new(partition, Some(blocks)),
            startup: StartupReport::default(),
            features_stored: Mutex::new(features_stored),
            pir_counters: Default::default(),
            pir_slots: Arc::new(tokio::sync::Semaphore::new(opts.pir_concurrency.max(1))),
        };
        // The embedding (stored or computed) and the stored partition are independent: loaded
        // side by side. A partition that must be rebuilt is built after both.
        let (embedded, (loaded, partition_load_secs)) = rayon::join(
            || -> Result<(Snapshot, bool, f64), StateError> {
                let t = std::time::Instant::now();
                let (snap, reused) = match state.stored_snapshot(&items, version)? {
                    Some(s) => (s, true),
                    None => {
                        let spinner = Spinner::new(format!("embedding {} items", items.len()));
                        let s = state.embed(items.clone(), version)?;
                        spinner.finish();
                        state.persist(&s)?;
                        (s, false)
                    }
                };
                Ok((snap, reused, t.elapsed().as_secs_f64()))
            },
            || {
                let t = std::time::Instant::now();
                (state.load_partition(&items), t.elapsed().as_secs_f64())
            },
        );
        let (snap, reused, embedding_secs) = embedded?;
        crate::ops::progress::release_freed_memory();
        report.embedding_reused = reused;
        report.embedding_secs = embedding_secs;
        *state.snapshot.write().unwrap() = Arc::new(snap);
        let t = std::time::Instant::now();
        match loaded {
            Ok(Some(fresh)) => {
                report.partition_reused = fresh;
                report.partition_stale = !fresh;
            }
            Ok(None) => {
                let spinner = Spinner::new(format!("partition of {} items", items.len()));
                state.rebuild_partition(&items, version);
                spinner.finish();
            }
            Err(e) => {
                tracing::warn!(error = %e, "the stored partition cannot be served; rebuilding");
                let spinner = Spinner::new(format!("partition of {} items", items.len()));
                state.rebuild_partition(&items, version);
                spinner.finish();
            }
        }
        state.partitions.collect_garbage();
        crate::ops::progress::release_freed_memory();
        report.partition_secs = partition_load_secs + t.elapsed().as_secs_f64();
        report.total_secs = t_total.elapsed().as_secs_f64();
        tracing::info!(
            features_reused = report.features_reused,
            features_loaded = report.features_loaded,
            features_computed = report.features_computed,
            embedding_reused = report.embedding_reused,
            data_secs = report.data_secs,
            store_load_secs = report.store_load_secs,
            features_secs = report.features_secs,
            embedding_secs = report.embedding_secs,
            partition_reused = report.partition_reused,
            partition_secs = report.partition_secs,
            total_secs = report.total_secs,
            "start-up timings"
        );
        let stale = report.partition_stale;
        state.startup = report;
        let state = Arc::new(state);
        if let Some(p) = state.partitions.current().filter(|p| p.pir.get().is_none()) {
            // A version loaded from the store: its PIR databases are built beside serving
            // (their endpoints answer 503 until then).
            let s = Arc::clone(&state);
            std::thread::spawn(move || {
                let items: Vec<Arc<GalleryItem>> =
                    s.catalogue.read().unwrap().values().cloned().collect();
                if items.len() == p.doc.gallery_size {
                    crate::partition::pir::attach(&p, &s.partitions, &items);
                }
            });
        }
        if stale {
            // Serve the stored version now; replace it once the current gallery's is built.
            let s = Arc::clone(&state);
            std::thread::spawn(move || {
                let items: Vec<Arc<GalleryItem>> =
                    s.catalogue.read().unwrap().values().cloned().collect();
                let version = s.catalogue_version.load(Ordering::SeqCst);
                s.rebuild_partition(&items, version);
            });
        }
        Ok(state)
    }

    /// Serve the version the block store announced, if any. `Some(true)`: it was built from
    /// exactly this gallery and these settings; `Some(false)`: from an older gallery (served
    /// until the caller rebuilds); `None`: nothing announced.
    fn load_partition(&self, items: &[Arc<GalleryItem>]) -> Result<Option<bool>, StateError> {
        let Some(mut p) = self
            .partitions
            .load_announced()
            .map_err(|e| StateError::Invalid(e.to_string()))?
        else {
            return Ok(None);
        };
        let want = crate::partition::fingerprint(
            items,
            &self.anchors.features,
            self.seed,
            &self.partitions.settings,
        );
        let fresh = p.fingerprint == want;
        if !fresh {
            // Older than the catalogue, whatever its manifest says (the gallery store may have
            // been replaced): the rebuild for the current catalogue must win.
            let current = self.catalogue_version.load(Ordering::SeqCst);
            p.catalogue_version = p.catalogue_version.min(current.saturating_sub(1));
        }
        tracing::info!(
            version = %p.doc.version,
            fresh,
            store = self.partitions.store().map_or("", |s| s.describe()),
            "partition loaded from the block store"
        );
        self.partitions.publish(p);
        Ok(Some(fresh))
    }

    fn meta(&self, version: u64, gallery_len: usize) -> SnapshotMeta {
        SnapshotMeta {
            catalogue_version: version,
            smlq: self.params.smlq,
            seed: self.seed,
            anchor_ids: self.anchors.ids.clone(),
            gallery_len,
            model_version: self.config.model_version.clone(),
        }
    }

    /// The stored embedding, if it was computed from exactly this catalogue and configuration.
    fn stored_snapshot(
        &self,
        items: &[Arc<GalleryItem>],
        version: u64,
    ) -> Result<Option<Snapshot>, StateError> {
        let Some(s) = self.store.load_snapshot()? else {
            return Ok(None);
        };
        let k = self.params.smlq.embed_dim;
        let n_anchor = self.anchors.ids.len();
        let ids_match =
            s.ids.len() == items.len() && s.ids.iter().zip(items).all(|(a, b)| *a == b.id);
        if s.meta != self.meta(version, items.len())
            || !ids_match
            || s.rows.len() != (items.len() + n_anchor) * k
        {
            return Ok(None);
        }
        let (gallery, anchors) = s.rows.split_at(items.len() * k);
        // The two indexes are independent: built side by side.
        let (frame, (index, gallery_rows)) = rayon::join(
            || self.placed(items),
            || {
                let rows: Vec<Vec<f64>> = gallery.chunks_exact(k).map(<[f64]>::to_vec).collect();
                (Index::build_flat(gallery, k), rows)
            },
        );
        Ok(Some(Snapshot {
            catalogue_version: version,
            items: items.to_vec(),
            index,
            frame: frame?,
            anchor_rows: DMatrix::from_row_slice(n_anchor, k, anchors),
            gallery_rows,
        }))
    }

    /// The gallery placed in the anchor frame, with its index: rows from the store if they
    /// were placed for exactly these items (ids and features), this frame and these weights,
    /// else computed and stored (13 s at 1,000,000 items; loading is under a second).
    fn placed(&self, items: &[Arc<GalleryItem>]) -> Result<FrameGallery, StateError> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"frame-rows-1");
        h.update(self.config.model_version.as_bytes());
        h.update(self.config.frame_kernel_scale.to_le_bytes());
        for v in self.frame.rows().iter().chain(self.anchor_features.iter()) {
            h.update(v.to_le_bytes());
        }
        // One update per item (the same bytes as a value at a time, much faster).
        let mut buf = Vec::new();
        for it in items {
            buf.clear();
            buf.extend_from_slice(&it.id.to_le_bytes());
            buf.extend(it.features.iter().flat_map(|f| f.to_le_bytes()));
            h.update(&buf);
        }
        let guard = h.finalize();
        let width = self.frame.dim();
        if let Some(flat) = self.store.load_frame_rows(&guard)? {
            if flat.len() == items.len() * width && width > 0 {
                return Ok(FrameGallery::new(flat, width, items));
            }
        }
        let flat: Vec<f64> = self.place(items)?.concat();
        if let Err(e) = self.store.save_frame_rows(&guard, &flat) {
            tracing::warn!(error = %e, "storing the frame rows failed; they are placed again at the next start");
        }
        Ok(FrameGallery::new(flat, width, items))
    }

    /// The gallery placed in the anchor frame (deterministic).
    fn place(&self, items: &[Arc<GalleryItem>]) -> Result<Vec<Vec<f64>>, StateError> {
        let d = self.frame.feature_dim();
        let t = std::time::Instant::now();
        // In parallel blocks; each block's memory is bounded inside `place`.
        let rows: Vec<Vec<Vec<f64>>> = items
            .par_chunks(4_096)
            .map(|chunk| {
                let x = DMatrix::from_fn(chunk.len(), d, |i, j| chunk[i].features[j] as f64);
                self.frame.place(&x).map(|p| gallery_rows(&p))
            })
            .collect::<Result<_, _>>()?;
        tracing::info!(
            rows = items.len(),
            secs = t.elapsed().as_secs_f64(),
            "placed in the frame"
        );
        Ok(rows.into_iter().flatten().collect())
    }

    /// Embed `[items ; anchors]` (the expensive step; call off the async runtime).
    pub fn embed(
        &self,
        items: Vec<Arc<GalleryItem>>,
        version: u64,
    ) -> Result<Snapshot, StateError> {
        let g = items.len();
        if g < 2 {
            return Err(StateError::Invalid(
                "the gallery needs at least 2 images".into(),
            ));
        }
        let n_anchor = self.anchor_features.nrows();
        let d = self.anchor_features.ncols();
        let mut feats = DMatrix::<f64>::zeros(g + n_anchor, d);
        for (i, it) in items.iter().enumerate() {
            for (j, &v) in it.features.iter().enumerate() {
                feats[(i, j)] = v as f64;
            }
        }
        feats.rows_mut(g, n_anchor).copy_from(&self.anchor_features);
        let labels: Vec<u32> = items
            .iter()
            .map(|it| it.label)
            .chain(self.anchors.labels.iter().copied())
            .collect();
        let mut rng = ChaCha20Rng::seed_from_u64(self.seed);
        let t = std::time::Instant::now();
        let emb = if g + n_anchor <= DENSE_MAX_ROWS {
            embed_dense(&feats, &labels, &self.params.smlq, &mut rng)?
        } else {
            embed_nystrom(
                feats,
                &labels,
                &self.params.smlq,
                nystrom_landmarks(g + n_anchor),
                &mut rng,
            )?
        };
        let secs = t.elapsed().as_secs_f64();
        tracing::info!(rows = g + n_anchor, secs, "embedded");
        let rows: Vec<Vec<f64>> = (0..g)
            .map(|i| emb.row(i).iter().copied().collect())
            .collect();
        let (frame, index) = rayon::join(|| self.placed(&items), || Index::build(&rows));
        Ok(Snapshot {
            catalogue_version: version,
            frame: frame?,
            items,
            index,
            gallery_rows: rows,
            anchor_rows: emb.rows(g, n_anchor).into_owned(),
        })
    }

    fn persist(&self, snap: &Snapshot) -> Result<(), StateError> {
        let k = self.params.smlq.embed_dim;
        let mut rows = Vec::with_capacity((snap.items.len() + snap.anchor_rows.nrows()) * k);
        for r in &snap.gallery_rows {
            rows.extend_from_slice(r);
        }
        for r in snap.anchor_rows.row_iter() {
            rows.extend(r.iter().copied());
        }
        self.store.save_snapshot(&StoredSnapshot {
            meta: self.meta(snap.catalogue_version, snap.items.len()),
            ids: snap.items.iter().map(|it| it.id).collect(),
            rows,
        })?;
        Ok(())
    }

    /// A class-balanced sample of at most `max` gallery items placed in the frame (every
    /// `step`-th item of each class, in id order), for plotting.
    pub fn gallery_map(&self, max: usize) -> GalleryMap {
        let snap = self.snapshot();
        let per_class = max / self.config.class_names.len().max(1);
        let mut taken = vec![0usize; self.config.class_names.len()];
        let mut map = GalleryMap {
            ids: Vec::new(),
            labels: Vec::new(),
            rows: Vec::new(),
        };
        let step = (snap.items.len() / max.max(1)).max(1);
        for (i, item) in snap.items.iter().enumerate().step_by(step) {
            let c = item.label as usize;
            if c < taken.len() && taken[c] < per_class {
                taken[c] += 1;
                map.ids.push(item.id);
                map.labels.push(item.label);
                map.rows.push(snap.frame.row(i).to_vec());
            }
        }
        map
    }

    /// Build the partition of `items` and make it current; on failure the old one stays.
    /// CPU-heavy: call off the async runtime.
    pub fn rebuild_partition(&self, items: &[Arc<GalleryItem>], version: u64) {
        let built = self
            .partitions
            .build(items, &self.anchors.features, self.seed, version)
            .and_then(|p| {
                // PIR databases are built before the version is announced: a client that sees
                // the version can query them.
                crate::partition::pir::attach(&p, &self.partitions, items);
                let v = p.doc.version.clone();
                self.partitions.persist_and_publish(p).map(|ok| (v, ok))
            });
        match built {
            Ok((v, true)) => {
                tracing::info!(version = %v, catalogue_version = version, "partition swapped in");
                self.partitions.collect_garbage();
            }
            Ok((_, false)) => {}
            Err(e) => tracing::error!(error = %e, "partition build failed; keeping the old one"),
        }
        crate::ops::progress::release_freed_memory();
    }

    /// Write the features of the items not yet stored (added since the last call) to the
    /// store, so the next start reuses them; failures are logged (the features are then
    /// recomputed at the next start).
    pub fn store_features(&self, items: &[Arc<GalleryItem>]) {
        let mut stored = self.features_stored.lock().unwrap();
        let new: Vec<FeatureRow> = items
            .iter()
            .filter(|it| !stored.get(&it.id).is_some_and(|s| Arc::ptr_eq(s, it)))
            .map(|it| FeatureRow {
                id: it.id,
                label: it.label,
                pixels: &it.pixels,
                features: &it.features,
            })
            .collect();
        if !new.is_empty() {
            match self.store.put_features(&self.config.model_version, &new) {
                Ok(n) => tracing::debug!(written = n, "gallery features stored"),
                Err(e) => tracing::error!(error = %e, "storing gallery features failed"),
            }
        }
        *stored = items.iter().map(|it| (it.id, Arc::clone(it))).collect();
    }

    /// The current search snapshot (cheap: an `Arc` clone under a read lock).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap().clone()
    }

    pub fn status(&self) -> StatusResponse {
        let snap = self.snapshot();
        StatusResponse {
            snapshot_version: snap.catalogue_version,
            catalogue_version: self.catalogue_version.load(Ordering::SeqCst),
            snapshot_items: snap.items.len(),
            catalogue_items: self.catalogue.read().unwrap().len(),
            reembedding: self.reembed.lock().unwrap().running,
            search_latency: self.search_latency.summary(),
        }
    }

    /// `GET /api/v1/status`: [`AppState::status`] plus the partition.
    pub fn server_status(&self) -> ServerStatus {
        ServerStatus {
            base: self.status(),
            partition: self.partitions.status(),
            pir: self
                .partitions
                .current()
                .and_then(|p| p.pir.get().cloned())
                .map(|pir| crate::partition::pir::status(&pir, &self.pir_counters)),
            startup: Some(self.startup.clone()),
        }
    }

    /// Re-embed the catalogue in the background until the snapshot catches up with it; at
    /// most one re-embedding runs, and changes made meanwhile trigger one more round.
    pub fn schedule_reembed(self: &Arc<Self>) {
        {
            let mut r = self.reembed.lock().unwrap();
            if r.running {
                r.dirty = true;
                return;
            }
            r.running = true;
        }
        let state = Arc::clone(self);
        std::thread::spawn(move || loop {
            let version = state.catalogue_version.load(Ordering::SeqCst);
            let items: Vec<Arc<GalleryItem>> =
                state.catalogue.read().unwrap().values().cloned().collect();
            state.store_features(&items);
            match state.embed(items.clone(), version) {
                Ok(snap) => {
                    if let Err(e) = state.persist(&snap) {
                        tracing::error!(error = %e, "persisting the snapshot failed");
                    }
                    *state.snapshot.write().unwrap() = Arc::new(snap);
                    tracing::info!(version, "new snapshot swapped in");
                }
                Err(e) => {
                    tracing::error!(error = %e, "re-embedding failed; keeping the old snapshot")
                }
            }
            // Before `running` clears, so a finished re-embedding means a current partition.
            state.rebuild_partition(&items, version);
            let mut r = state.reembed.lock().unwrap();
            if r.dirty {
                r.dirty = false;
            } else {
                r.running = false;
                return;
            }
        });
    }
}
