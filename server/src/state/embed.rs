//! The non-private embedding of the gallery and the anchors (dense up to
//! [`DENSE_MAX_ROWS`], Nyström above: `paper::privatemail`'s choice), stored with the catalogue
//! version it embeds.

use std::sync::Arc;

use paper::privatemail::{embed_dense, embed_nystrom, nystrom_landmarks, DENSE_MAX_ROWS};
use paper::retrieve::gallery_rows;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::DMatrix;

use super::*;
use crate::gallery::index::Index;
use crate::gallery::store::{SnapshotMeta, StoredSnapshot};
use crate::item::GalleryItem;
use rayon::prelude::*;

impl AppState {
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
    pub(super) fn stored_snapshot(
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

    pub(super) fn persist(&self, snap: &Snapshot) -> Result<(), StateError> {
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
}
