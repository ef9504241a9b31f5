//! The server's state: the live catalogue (what is stored), the public anchors, and the search
//! snapshot (the catalogue as of its last embedding), which is swapped atomically after a
//! background re-embedding while searches keep being answered from the old one.

mod anchor_cache;
mod catalogue;
pub mod embed;
pub mod identity;
mod open;
mod switch;

pub use switch::{Prepared, ReplicaStatus};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use paper::frame::AnchorFrame;
use shared::api::{AnchorsResponse, ApiLimits, ConfigResponse, StatusResponse};
use shared::{DMatrix, Params};

use crate::gallery::index::Index;
use crate::gallery::store::{Store, StoreError};
use crate::item::GalleryItem;
use crate::partition::Partitions;
use ::embed::model::Model;
use data::fashion::DataError;

/// Anchor ids live above every gallery id the demo seeds.
pub const ANCHOR_ID_BASE: u64 = 1_000_000_000;

/// A short, stable version string for the model weights (FNV-1a of the bytes).
pub fn model_version(weights: &[u8]) -> String {
    ::embed::model::weights_version(weights)
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
    /// Both models' outputs over the anchors were read from beside the store (`anchor_cache`).
    pub anchors_reused: bool,
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

impl Snapshot {
    /// A snapshot of no items at `catalogue_version`: what start-up holds until the embedding
    /// is ready, and all a row shard keeps (it answers no search that reads one).
    pub(super) fn empty(catalogue_version: u64) -> Snapshot {
        Snapshot {
            catalogue_version,
            items: Vec::new(),
            gallery_rows: Vec::new(),
            index: Index::build(&[]),
            anchor_rows: DMatrix::zeros(0, 0),
            frame: FrameGallery::new(Vec::new(), 0, &[]),
        }
    }
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
    /// Requests and connections refused or cut off since start, by kind
    /// (`ops::refusals`: timeouts, caps, shed PIR load).
    #[serde(default)]
    pub refusals: crate::ops::refusals::RefusalStatus,
    /// PIR answers and uploads admitted at this moment (`net::admission`).
    #[serde(default)]
    pub pir_load: crate::net::admission::AdmissionLoad,
    /// A replica following its store (`server serve --from`): the version it serves, the one
    /// announced, and what it is doing about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaStatus>,
}

pub struct AppState {
    pub config: ConfigResponse,
    /// `GET /api/v1/identity`: the gallery's key and its signature of `config`
    /// (`state::identity`).
    pub identity: shared::identity::IdentityDoc,
    pub anchors: AnchorsResponse,
    anchor_features: DMatrix<f64>,
    /// The public anchor frame (`paper::frame`), fixed for the server's lifetime.
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
    /// Fair admission of expensive work, PIR answers and `POST /search` alike, and of PIR
    /// uploads (`net::admission`; search bodies are charged to the JSON body budget of
    /// `http::guard` instead). One admission for both, so one address's searches and PIR
    /// answers together hold one pass while other addresses are active.
    pub admission: Arc<crate::net::admission::Admission>,
    /// The pools PIR answers and searches run on, one per answer slot and priority
    /// (`net::pools`): answers running at once share the cores by the scheduler, where in one
    /// pool a small answer waited for a large one already split across every worker.
    pub answer_pools: crate::net::pools::AnswerPools,
    /// The pool batched scores answers run on (`partition::pir::batch`: one leader at a time
    /// per version, each batch over every core).
    pub pir_batch_pool: rayon::ThreadPool,
    /// The client-address header the operator trusts (`--client-address-header`).
    pub client_address_header: Option<String>,
    /// What was refused or cut off to protect the server (`/status`, throttled log).
    pub refusals: Arc<crate::ops::refusals::Refusals>,
    /// Items whose features are in the store (by identity: a re-added id is a new item).
    features_stored: Mutex<HashMap<u64, Arc<GalleryItem>>>,
    /// The file start-up's items read their pixels and features from (`item::mapped`).
    catalogue_pages: crate::ops::mapped::Pages,
    /// A replica following its store: what `/status` reports of it (`None` otherwise).
    replica: Mutex<Option<ReplicaStatus>>,
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
    /// PIR answers computed at once at most (each uses every core through rayon); the rest
    /// are admitted fairly by client (`net::admission`).
    pub pir_concurrency: usize,
    /// Bytes of PIR request bodies in flight at most (`net::admission`).
    pub pir_upload_budget: usize,
    /// A header naming the client's address, set by a proxy the operator runs.
    pub client_address_header: Option<String>,
    /// The gallery's signing key from this file (which must exist: it is never created
    /// here) instead of the one beside the store. Replicas answering one origin share one key
    /// (`server serve --from`), provisioned as a secret, never put in the bucket.
    pub identity_key: Option<&'a Path>,
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
    #[error("PIR thread pool: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
}

impl AppState {
    /// The current search snapshot (cheap: an `Arc` clone under a read lock).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap().clone()
    }

    /// A row shard (`--shard-rows`) answers its PIR parts and `/status`, nothing else: no
    /// request it serves reads the catalogue or the embedding.
    pub fn is_shard(&self) -> bool {
        self.partitions.settings.shard_rows.is_some()
    }

    /// A row shard whose PIR databases are built keeps nothing else of the gallery: the
    /// catalogue, the stored-features map and the search snapshot are emptied (the catalogue
    /// version stays) and their memory given back. They were what made a shard as large in
    /// its own memory as a whole serving process (docs/eval/scale.md, "Row shards"). Does
    /// nothing in any other process, or before the current version's databases exist.
    pub fn shed_gallery_if_shard(&self) {
        if !self.is_shard()
            || self
                .partitions
                .current()
                .is_none_or(|p| p.pir.get().is_none())
        {
            return;
        }
        let version = self.snapshot().catalogue_version;
        let catalogue = std::mem::take(&mut *self.catalogue.write().unwrap());
        let stored = std::mem::take(&mut *self.features_stored.lock().unwrap());
        *self.snapshot.write().unwrap() = Arc::new(Snapshot::empty(version));
        let items = catalogue.len();
        drop((catalogue, stored));
        self.release_catalogue_pages();
        data::progress::release_freed_memory();
        tracing::info!(
            items,
            "row shard: the gallery's items and embedding released"
        );
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
            refusals: self.refusals.status(),
            pir_load: self.admission.load(),
            replica: self
                .replica
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}
