//! Changes to the catalogue: the partition rebuilt, features stored, the re-embedding
//! scheduled in the background; the public gallery map.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use shared::api::GalleryMap;

use super::*;
use crate::gallery::store::FeatureRow;
use crate::item::GalleryItem;

impl AppState {
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
                let step = shared::api::GALLERY_MAP_STEP;
                map.rows.push(
                    snap.frame
                        .row(i)
                        .iter()
                        .map(|&v| ((v / step).round() * step) as f32)
                        .collect(),
                );
            }
        }
        map
    }

    /// Build the partition of `items` and make it current; on failure the old one stays.
    /// CPU-heavy: call off the async runtime.
    pub fn rebuild_partition(&self, items: &[Arc<GalleryItem>], version: u64) {
        // The re-embedding just freed its transients; give them back before the build's peak.
        data::progress::release_freed_memory();
        let built = self
            .partitions
            .build(
                items,
                &self.anchors.features,
                self.seed,
                version,
                &self.catalogue_pages,
            )
            .and_then(|p| {
                // PIR databases are built before the version is announced: a client that sees
                // the version can query them.
                crate::partition::pir::attach(&p, &self.partitions, items, &self.catalogue_pages);
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
        data::progress::release_freed_memory();
        self.release_catalogue_pages();
    }

    /// After a build has read every item: the pages of the items' mapped file leave the
    /// resident set (`ops::mapped::Pages::release`); serving reads none of them.
    pub fn release_catalogue_pages(&self) {
        self.catalogue_pages.release();
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
