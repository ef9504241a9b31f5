//! A replica's live version switch, the state's side (`crate::replica` follows the store):
//! the next gallery version is prepared beside the one serving — its items, its embedding,
//! its partition with the PIR databases built — and staged (answerable by name, not
//! current); then one switch makes it current. The replaced partition stays served for the
//! grace period (`partition::versions`), so a search in flight finishes on the version it
//! started with: every request of a search names its version.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use crate::item::GalleryItem;
use crate::partition::Published;

/// What a replica following its store reports in `GET /api/v1/status` (`replica`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaStatus {
    /// The manifest (SHA-256) whose version is current here.
    pub serving: String,
    /// The manifest the store's `CURRENT.json` named at the last poll.
    pub announced: String,
    /// What the replica is doing: `serving`, `preparing`, `staged` (whole, waiting for the
    /// switch moment) or `refused` (the announced version failed a check; the old one serves).
    pub state: String,
    /// Why the last announced version was refused, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Versions switched to since start.
    pub switches: u64,
    /// Seconds the last switch's preparation took (fetch, checks, embedding, PIR build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prepare_secs: Option<f64>,
}

/// A version prepared and staged, ready for [`AppState::switch_to`].
pub struct Prepared {
    catalogue: BTreeMap<u64, Arc<GalleryItem>>,
    snapshot: Snapshot,
    /// The staged partition's version.
    pub partition: String,
}

impl AppState {
    /// Prepare `items` (the next version's catalogue) and its partition `p` beside the version
    /// serving: the embedding, the PIR databases (which must build: a version without them
    /// would fail every PIR search sent to it), then stage the partition. CPU-heavy: call off
    /// the async runtime. Nothing current changes.
    pub fn prepare_version(
        &self,
        mut items: Vec<GalleryItem>,
        p: Published,
    ) -> Result<Prepared, StateError> {
        // File pages rather than the process's memory, as at start-up (`item::mapped`).
        if let Some(dir) = self.partitions.settings.pir_dir.as_deref() {
            if let Err(e) = crate::item::mapped::map_items(dir, &mut items, &self.catalogue_pages) {
                tracing::warn!(error = %e, "mapping the next catalogue failed; held in memory");
            }
        }
        let catalogue: BTreeMap<u64, Arc<GalleryItem>> =
            items.into_iter().map(|it| (it.id, Arc::new(it))).collect();
        // The partition and PIR build index items in id order (the catalogue's order).
        let items: Vec<Arc<GalleryItem>> = catalogue.values().cloned().collect();
        if items.len() != p.doc.gallery_size {
            return Err(StateError::Invalid(format!(
                "the catalogue has {} items, partition {} was built from {}",
                items.len(),
                p.doc.version,
                p.doc.gallery_size
            )));
        }
        let version = self.catalogue_version.load(Ordering::SeqCst) + 1;
        let t = std::time::Instant::now();
        let snapshot = if self.is_shard() {
            // A row shard keeps no embedding (`AppState::shed_gallery_if_shard`).
            Snapshot::empty(version)
        } else {
            let s = self.embed(items.clone(), version)?;
            tracing::info!(
                items = items.len(),
                secs = t.elapsed().as_secs_f64(),
                "replica: next version embedded"
            );
            s
        };
        let t = std::time::Instant::now();
        crate::partition::pir::attach(&p, &self.partitions, &items, &self.catalogue_pages);
        if p.pir.get().is_none() {
            return Err(StateError::Invalid(format!(
                "the PIR databases of partition {} could not be built",
                p.doc.version
            )));
        }
        tracing::info!(
            partition = %p.doc.version,
            secs = t.elapsed().as_secs_f64(),
            "replica: next version's PIR databases built"
        );
        let partition = p.doc.version.clone();
        self.partitions.stage(p);
        // Nor its items, once its databases are built.
        let catalogue = if self.is_shard() {
            BTreeMap::new()
        } else {
            catalogue
        };
        Ok(Prepared {
            catalogue,
            snapshot,
            partition,
        })
    }

    /// Make a prepared version current: the catalogue, the search snapshot and the partition
    /// (whose predecessor stays answerable by name for the grace period).
    pub fn switch_to(&self, next: Prepared) -> Result<(), StateError> {
        if !self.partitions.promote(&next.partition) {
            return Err(StateError::Invalid(format!(
                "partition {} is no longer staged",
                next.partition
            )));
        }
        let version = next.snapshot.catalogue_version;
        *self.catalogue.write().unwrap() = next.catalogue;
        self.catalogue_version.store(version, Ordering::SeqCst);
        *self.snapshot.write().unwrap() = Arc::new(next.snapshot);
        data::progress::release_freed_memory();
        Ok(())
    }

    /// Update what `/status` reports of the replica.
    pub fn set_replica_status(&self, f: impl FnOnce(&mut ReplicaStatus)) {
        let mut r = self.replica.lock().unwrap_or_else(|e| e.into_inner());
        f(r.get_or_insert_with(ReplicaStatus::default));
    }
}
