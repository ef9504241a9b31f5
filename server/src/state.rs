//! The server's state: the live catalogue (what is stored), the public anchors, and the search
//! snapshot (the catalogue as of its last embedding), which is swapped atomically after a
//! background re-embedding while searches keep being answered from the old one.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::api::{AnchorsResponse, ApiLimits, ConfigResponse, GalleryMap, StatusResponse};
use shared::frame::AnchorFrame;
use shared::privatemail::{embed_dense, embed_nystrom};
use shared::retrieve::gallery_rows;
use shared::{DMatrix, Params};

use crate::data::{load_split, DataError, Split, CLASS_NAMES};
use crate::index::Index;
use crate::store::{SnapshotMeta, Store, StoreError, StoredItem, StoredSnapshot};
use crate::thumbnail::{base64, png_grey};
use rayon::prelude::*;
use shared::model::Model;

/// Image side (Fashion-MNIST).
pub const SIDE: u32 = 28;
/// Up to this many rows (gallery + anchors) the exact dense kernel is used (≤ 0.6 GB); above
/// it, the Nyström approximation with [`NYSTROM_LANDMARKS`] landmarks (O(N·m) memory).
pub const DENSE_MAX_ROWS: usize = 12_000;
/// Measured on 3,000 images with the model's features (`tests/nystrom_vs_dense.rs`): 1,500
/// landmarks share only 24 % of the exact embedding's 8 nearest neighbours, 2,000 share 91 %
/// (aligned residual 0.0003), 2,500 97 %.
pub const NYSTROM_LANDMARKS: usize = 2_000;

/// Anchor ids live above every gallery id the demo seeds.
pub const ANCHOR_ID_BASE: u64 = 1_000_000_000;

/// One gallery image with its pre-encoded thumbnail.
pub struct GalleryItem {
    pub id: u64,
    pub label: u32,
    pub pixels: Vec<u8>,
    /// The on-device model's unit-norm features of the image (what the embedding uses).
    pub features: Vec<f32>,
    pub png: Vec<u8>,
    pub thumbnail_b64: String,
}

impl GalleryItem {
    pub fn new(id: u64, label: u32, pixels: Vec<u8>, model: &Model) -> Result<Self, StateError> {
        let png = png_grey(&pixels, SIDE, SIDE)?;
        let features = model.infer(&pixels)?.features;
        Ok(GalleryItem {
            id,
            label,
            thumbnail_b64: base64(&png),
            png,
            pixels,
            features,
        })
    }
}

/// A short, stable version string for the model weights (FNV-1a of the bytes).
pub fn model_version(weights: &[u8]) -> String {
    let h = weights.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    format!("cnn-v1-{h:016x}")
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
    fn new(rows: &[Vec<f64>], items: &[Arc<GalleryItem>]) -> Self {
        FrameGallery {
            flat: rows.concat(),
            dim: rows.first().map_or(0, Vec::len),
            labels: items.iter().map(|it| it.label).collect(),
            index: Index::build(rows),
        }
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.flat[i * self.dim..(i + 1) * self.dim]
    }
}

pub struct AppState {
    pub config: ConfigResponse,
    pub anchors: AnchorsResponse,
    anchor_features: DMatrix<f64>,
    /// The public anchor frame (`shared::frame`), fixed for the server's lifetime.
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
    pub search_latency: crate::latency::Histogram,
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
}

fn balanced_anchors(train: &Split, count: usize) -> Vec<usize> {
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

impl AppState {
    /// Open the store (seeding it with the first `gallery_size` test images if empty), take
    /// the anchors from the training split, and reuse the stored embedding if it matches the
    /// catalogue, the parameters and the anchors — otherwise embed now.
    pub fn open(opts: &Options) -> Result<Arc<Self>, StateError> {
        let train = load_split(opts.data_dir, "train")?;
        let anchor_idx = balanced_anchors(&train, opts.anchor_count);
        if anchor_idx.len() < 10 {
            return Err(StateError::Invalid("need at least 10 anchors".into()));
        }
        let d = (SIDE * SIDE) as usize;
        let store = Store::open(opts.store_path)?;
        let mut stored = store.load_items()?;
        let mut version = store.catalogue_version()?;
        if stored.is_empty() {
            // The test split first (ids 0..10,000), then, for bigger galleries, the training
            // split (ids 10,000 + index).
            let test = load_split(opts.data_dir, "t10k")?;
            let g = opts.gallery_size.min(test.labels.len());
            stored = (0..g)
                .map(|i| StoredItem {
                    id: i as u64,
                    label: test.labels[i] as u32,
                    pixels: test.images.image(i).to_vec(),
                })
                .collect();
            let extra = opts.gallery_size.saturating_sub(g).min(train.labels.len());
            stored.extend((0..extra).map(|i| StoredItem {
                id: (test.labels.len() + i) as u64,
                label: train.labels[i] as u32,
                pixels: train.images.image(i).to_vec(),
            }));
            version += 1;
            store.put_items(&stored, version)?;
        }
        let model = Model::from_bytes(crate::MODEL_WEIGHTS)?;
        if let Some(bad) = stored
            .iter()
            .find(|it| it.pixels.len() != d || it.label >= 10)
        {
            return Err(StateError::Invalid(format!(
                "stored item {} is malformed",
                bad.id
            )));
        }
        let items: Vec<GalleryItem> = stored
            .into_par_iter()
            .map(|it| GalleryItem::new(it.id, it.label, it.pixels, &model))
            .collect::<Result<_, _>>()?;
        let catalogue: BTreeMap<u64, Arc<GalleryItem>> =
            items.into_iter().map(|it| (it.id, Arc::new(it))).collect();
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
        let anchor_inf: Vec<Vec<f32>> = anchor_idx
            .par_iter()
            .map(|&i| model.infer(train.images.image(i)).map(|r| r.features))
            .collect::<Result<_, _>>()?;
        let fd = anchor_inf[0].len();
        let anchor_features =
            DMatrix::from_fn(anchor_idx.len(), fd, |r, j| anchor_inf[r][j] as f64);
        let frame = AnchorFrame::class_simplex(
            &anchor_features,
            &anchors.labels,
            params.smlq.num_classes,
            shared::frame::DEFAULT_KERNEL_SCALE,
        )?;
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
            frame_kernel_scale: shared::frame::DEFAULT_KERNEL_SCALE,
            anchor_count: anchor_idx.len(),
            model_version: model_version(crate::MODEL_WEIGHTS),
            limits: opts.limits,
        };
        let items: Vec<Arc<GalleryItem>> = catalogue.values().cloned().collect();
        let placeholder = Snapshot {
            catalogue_version: 0,
            items: Vec::new(),
            gallery_rows: Vec::new(),
            index: Index::build(&[]),
            anchor_rows: DMatrix::zeros(0, 0),
            frame: FrameGallery::new(&[], &[]),
        };
        let state = AppState {
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
        };
        let snap = match state.stored_snapshot(&items, version)? {
            Some(s) => s,
            None => {
                let s = state.embed(items, version)?;
                state.persist(&s)?;
                s
            }
        };
        *state.snapshot.write().unwrap() = Arc::new(snap);
        Ok(Arc::new(state))
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
        let g = items.len();
        let rows: Vec<Vec<f64>> = s.rows.chunks_exact(k).map(|r| r.to_vec()).collect();
        let frame = FrameGallery::new(&self.place(items)?, items);
        Ok(Some(Snapshot {
            catalogue_version: version,
            items: items.to_vec(),
            index: Index::build(&rows[..g]),
            frame,
            anchor_rows: DMatrix::from_row_iterator(
                n_anchor,
                k,
                rows[g..].iter().flatten().copied(),
            ),
            gallery_rows: rows[..g].to_vec(),
        }))
    }

    /// The gallery placed in the anchor frame (deterministic, so recomputed rather than stored).
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
                NYSTROM_LANDMARKS,
                &mut rng,
            )?
        };
        let secs = t.elapsed().as_secs_f64();
        tracing::info!(rows = g + n_anchor, secs, "embedded");
        let rows: Vec<Vec<f64>> = (0..g)
            .map(|i| emb.row(i).iter().copied().collect())
            .collect();
        let frame = FrameGallery::new(&self.place(&items)?, &items);
        Ok(Snapshot {
            catalogue_version: version,
            frame,
            items,
            index: Index::build(&rows),
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
            match state.embed(items, version) {
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
