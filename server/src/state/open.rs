//! Start-up: the store and the dataset loaded side by side, features reused or computed,
//! the embedding and the partition reused when they match, else rebuilt.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use paper::frame::AnchorFrame;
use paper::retrieve::gallery_rows;
use shared::api::{AnchorsResponse, ConfigResponse};
use shared::{DMatrix, Params};

use super::*;
use crate::gallery::store::{FeatureRow, Store, StoredItem};
use crate::item::{GalleryItem, SIDE};
use crate::partition::{PartitionSettings, Partitions};
use ::embed::model::Model;
use data::fashion::{balanced_anchors, demo_gallery, load_split, CLASS_NAMES};
use data::progress::{Progress, Spinner};
use rayon::prelude::*;

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
        if f.as_ref()
            .is_some_and(|f| f.len() != ::embed::model::EMBED || !f.iter().all(|v| v.is_finite()))
        {
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

/// The store's items as start-up reads them.
enum Rows {
    /// Each stored item with its stored features, if any.
    Stored(Vec<(StoredItem, Option<Vec<f32>>)>),
    /// The items of a packed copy, their pixels and features mapped ([`mapped_from`]).
    Mapped(Vec<GalleryItem>),
}

impl Rows {
    fn is_empty(&self) -> bool {
        match self {
            Rows::Stored(r) => r.is_empty(),
            Rows::Mapped(r) => r.is_empty(),
        }
    }
}

/// The packed copy's items with their pixels and features read straight into the catalogue's
/// mapped file in `dir` (`item::mapped::map_read`: two passes over the file, never held).
/// `None` — the caller then reads the copy into memory, or the store — unless the copy's
/// rows are this model's features and the gallery's image size, every label is a class,
/// every feature finite, the CRC matches and the file could be written and mapped.
fn mapped_from(
    packed: &mut crate::gallery::packed::Packed,
    dir: &std::path::Path,
    pages: &crate::ops::mapped::Pages,
) -> Option<Vec<GalleryItem>> {
    use crate::gallery::packed::PIECE_BYTES;
    use crate::item::mapped::{map_read, Part};
    let (count, dim, pixels) = (packed.count, packed.dim, packed.pixels);
    if dim != ::embed::model::EMBED || pixels != (SIDE * SIDE) as usize {
        return None;
    }
    let mut heads: Vec<(u64, u32)> = Vec::with_capacity(count);
    let mut valid = true;
    let views = map_read(dir, pages, count, dim, pixels, |part, out| {
        let mut failed = None;
        let read = packed.for_each_piece(PIECE_BYTES, |rows| {
            for r in rows {
                if failed.is_some() {
                    return;
                }
                let written = match part {
                    Part::Features => {
                        heads.push((r.id, r.label));
                        valid &= r.label < 10;
                        r.features().try_for_each(|v| {
                            valid &= v.is_finite();
                            out.write_all(&v.to_ne_bytes())
                        })
                    }
                    Part::Pixels => out.write_all(r.pixels),
                };
                failed = written.err();
            }
        });
        match (failed, read) {
            (Some(e), _) => Err(e),
            (None, None) => Err(std::io::Error::other("the packed copy is damaged")),
            (None, Some(())) if !valid => {
                Err(std::io::Error::other("the packed copy has a malformed row"))
            }
            (None, Some(())) => Ok(()),
        }
    });
    let views = match views {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "reading the packed copy into a mapped file failed");
            return None;
        }
    };
    heads
        .into_iter()
        .zip(views)
        .map(|((id, label), (f, p))| GalleryItem::from_parts(id, label, p, f).ok())
        .collect()
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
        mut partition: PartitionSettings,
    ) -> Result<Arc<Self>, StateError> {
        let t_total = std::time::Instant::now();
        if partition.pir_dir.is_none() {
            partition.pir_dir = Some(opts.store_path.with_extension("pir"));
        }
        let mut report = StartupReport::default();
        let t = std::time::Instant::now();
        let d = (SIDE * SIDE) as usize;
        let weights = model_version(data::assets::MODEL_WEIGHTS);
        // The training split (for the anchors) and the store load independently: overlapped.
        // Each stored item with its stored features, if any — or, from a packed copy where
        // there is a directory to map, the items themselves, already mapped.
        type Loaded = (Store, Rows, u64, u64, bool, f64);
        let packed_path = crate::gallery::packed::path_for(opts.store_path);
        // Serving never reads the pixels and features: file pages, not the process's own
        // memory (`item::mapped`).
        let catalogue_pages = crate::ops::mapped::Pages::default();
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
                let packed = crate::gallery::packed::open(
                    &packed_path,
                    instance,
                    store.generation()?,
                    &weights,
                );
                if let Some(mut packed) = packed {
                    let dir = partition.pir_dir.as_deref();
                    if let Some(items) =
                        dir.and_then(|d| mapped_from(&mut packed, d, &catalogue_pages))
                    {
                        let secs = t.elapsed().as_secs_f64();
                        let rows = Rows::Mapped(items);
                        return Ok((store, rows, version, instance, true, secs));
                    }
                    if let Some(rows) = packed.read_all(crate::gallery::packed::PIECE_BYTES) {
                        let rows = rows.into_iter().map(|(it, f)| (it, Some(f))).collect();
                        let secs = t.elapsed().as_secs_f64();
                        return Ok((store, Rows::Stored(rows), version, instance, true, secs));
                    }
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
                Ok((store, Rows::Stored(rows), version, instance, false, secs))
            },
        );
        let train = train?;
        let (store, rows, mut version, instance, packed_used, load_secs) = loaded?;
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
        let mut rows = rows;
        if rows.is_empty() {
            // The demo gallery: the test split, the training split without the anchors and the
            // reserved evaluation photos, then variants (`data::fashion::demo_gallery`).
            let test = load_split(opts.data_dir, "t10k")?;
            let seeded: Vec<StoredItem> =
                demo_gallery(&test, &train, &anchor_idx, opts.gallery_size)
                    .into_iter()
                    .map(|d| StoredItem {
                        id: d.id,
                        label: d.label as u32,
                        pixels: d.pixels,
                    })
                    .collect();
            version += 1;
            store.put_items(&seeded, version)?;
            rows = Rows::Stored(seeded.into_iter().map(|it| (it, None)).collect());
        }
        report.store_load_secs = load_secs + t.elapsed().as_secs_f64();
        let model = Model::from_bytes(data::assets::MODEL_WEIGHTS)?;
        let (items, computed) = match rows {
            Rows::Mapped(items) => {
                tracing::info!(
                    items = items.len(),
                    secs = report.store_load_secs,
                    "store loaded: pixels and features read from the packed copy into a mapped file"
                );
                report.features_loaded = items.len();
                report.features_reused = true;
                (items, HashMap::new())
            }
            Rows::Stored(stored) => {
                tracing::info!(
                    items = stored.len(),
                    stored_features = stored.iter().filter(|(_, f)| f.is_some()).count(),
                    packed = packed_used,
                    secs = report.store_load_secs,
                    "store loaded"
                );
                if let Some((bad, _)) = stored
                    .iter()
                    .find(|(it, _)| it.pixels.len() != d || it.label >= 10)
                {
                    return Err(StateError::Invalid(format!(
                        "stored item {} is malformed",
                        bad.id
                    )));
                }
                let (mut items, computed) =
                    gallery_features(&store, &weights, stored, &model, &mut report)?;
                if let Some(dir) = partition.pir_dir.as_deref() {
                    let t = std::time::Instant::now();
                    match crate::item::mapped::map_items(dir, &mut items, &catalogue_pages) {
                        Ok(()) => tracing::info!(
                            items = items.len(),
                            secs = t.elapsed().as_secs_f64(),
                            "pixels and features mapped from a file"
                        ),
                        Err(e) => {
                            tracing::warn!(error = %e, "mapping the catalogue failed; held in memory")
                        }
                    }
                }
                (items, computed)
            }
        };
        data::progress::release_freed_memory();
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
        let anchor_labels: Vec<u32> = anchor_idx.iter().map(|&i| train.labels[i] as u32).collect();
        // Both models' outputs over the anchors, kept beside the store under a key of the
        // weights and the anchor images (`anchor_cache`): a start with the same ones reads them.
        let familiar = ::embed::ood::FamiliarityModel::compiled().model();
        let anchor_images: Vec<&[u8]> = anchor_idx.iter().map(|&i| train.images.image(i)).collect();
        let cache_path = super::anchor_cache::path_for(opts.store_path);
        let cache_key = super::anchor_cache::key(
            &weights,
            &model_version(::embed::ood::FAMILIARITY_WEIGHTS),
            &anchor_images,
        );
        let outputs = match super::anchor_cache::read(&cache_path, &cache_key) {
            Some(kept) if kept.features.len() == anchor_idx.len() => {
                tracing::info!(
                    anchors = anchor_idx.len(),
                    "anchor outputs read from the store"
                );
                report.anchors_reused = true;
                kept
            }
            _ => {
                let outputs = anchor_outputs(&model, familiar, &anchor_images)?;
                if let Err(e) = super::anchor_cache::write(&cache_path, &cache_key, &outputs) {
                    tracing::warn!(error = %e, "keeping the anchor outputs failed");
                }
                outputs
            }
        };
        let super::anchor_cache::AnchorOutputs {
            features: anchor_inf,
            familiarity_features,
            layer_means,
        } = outputs;
        let fd = anchor_inf[0].len();
        let anchor_features =
            DMatrix::from_fn(anchor_idx.len(), fd, |r, j| anchor_inf[r][j] as f64);
        let frame = AnchorFrame::class_simplex(
            &anchor_features,
            &anchor_labels,
            params.smlq.num_classes,
            paper::frame::DEFAULT_KERNEL_SCALE,
        )?;
        // The out-of-distribution reference: Gaussians over the anchors' features and layer
        // means (`::embed::ood`) under the familiarity model, the one a client scores its
        // photo with.
        let familiarity = ::embed::ood::fit(
            &familiarity_features.concat(),
            &layer_means.concat(),
            &anchor_labels,
            fd,
            familiar.w.arch.layer_dim(),
        )?;
        report.data_secs += t.elapsed().as_secs_f64();
        let anchors = AnchorsResponse {
            ids: anchor_idx
                .iter()
                .map(|&i| ANCHOR_ID_BASE + i as u64)
                .collect(),
            labels: anchor_labels,
            features: anchor_inf,
            frame_rows: gallery_rows(frame.rows()),
            familiarity,
        };
        // The same bytes `GET /anchors` serves (`http::cache::json_revalidated`).
        let anchors_sha256 =
            publish::blocks::hash_hex(&serde_json::to_vec(&anchors).map_err(|e| {
                StateError::Invalid(format!("the anchors could not be written: {e}"))
            })?);
        let config = ConfigResponse {
            smlq: params.smlq,
            privacy_defaults: params.privacy,
            class_names: CLASS_NAMES.iter().map(|s| s.to_string()).collect(),
            feature_dim: fd,
            frame_dim: frame.dim(),
            frame_kernel_scale: paper::frame::DEFAULT_KERNEL_SCALE,
            anchor_count: anchor_idx.len(),
            anchors_sha256,
            model_version: weights,
            query_model_version: model_version(data::assets::QUERY_WEIGHTS),
            limits: opts.limits,
        };
        let key = match opts.identity_key {
            Some(path) => super::identity::load_existing(path)?,
            None => super::identity::load_or_create(&super::identity::key_path(opts.store_path))?,
        };
        let identity = super::identity::document(&key, &config)?;
        let items: Vec<Arc<GalleryItem>> = catalogue.values().cloned().collect();
        let placeholder = Snapshot::empty(0);
        let mut state = AppState {
            config,
            identity,
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
            catalogue_pages,
            pir_counters: Default::default(),
            admission: crate::net::admission::Admission::new(
                opts.pir_concurrency,
                opts.pir_upload_budget,
            ),
            client_address_header: opts.client_address_header.clone(),
            answer_pools: crate::net::pools::AnswerPools::new(
                opts.pir_concurrency,
                rayon::current_num_threads(),
            )?,
            pir_batch_pool: rayon::ThreadPoolBuilder::new()
                .num_threads(rayon::current_num_threads())
                .thread_name(|t| format!("pir-batch-{t}"))
                .build()?,
            refusals: Default::default(),
            replica: Mutex::new(None),
        };
        // The embedding (stored or computed) and the stored partition are independent: loaded
        // side by side. A partition that must be rebuilt is built after both.
        let (embedded, (loaded, partition_load_secs)) = rayon::join(
            || -> Result<(Snapshot, bool, f64), StateError> {
                if state.is_shard() {
                    // A row shard serves no search that reads the embedding.
                    return Ok((Snapshot::empty(version), false, 0.0));
                }
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
        data::progress::release_freed_memory();
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
        data::progress::release_freed_memory();
        state.release_catalogue_pages();
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
                    crate::partition::pir::attach(&p, &s.partitions, &items, &s.catalogue_pages);
                }
                drop(items);
                s.release_catalogue_pages();
                if !stale {
                    s.shed_gallery_if_shard();
                }
            });
        } else if !stale {
            state.shed_gallery_if_shard();
        }
        if stale {
            // Serve the stored version now; replace it once the current gallery's is built.
            let s = Arc::clone(&state);
            std::thread::spawn(move || {
                let items: Vec<Arc<GalleryItem>> =
                    s.catalogue.read().unwrap().values().cloned().collect();
                let version = s.catalogue_version.load(Ordering::SeqCst);
                s.rebuild_partition(&items, version);
                drop(items);
                s.shed_gallery_if_shard();
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
            &self.catalogue_pages,
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
}

/// Each anchor's features under the gallery model, and its features and layer means under the
/// familiarity model (the one a client scores its photo with). Eight images per SIMD pass
/// (`infer_batch`, `infer_batch_with_layer_means`: bit-identical to the one-image calls),
/// chunks in parallel.
fn anchor_outputs(
    model: &Model,
    familiar: &Model,
    images: &[&[u8]],
) -> Result<super::anchor_cache::AnchorOutputs, StateError> {
    let features: Vec<Vec<f32>> = images
        .par_chunks(64)
        .map(|chunk| model.infer_batch(chunk))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .map(|r| r.features)
        .collect();
    let (familiarity_features, layer_means): (Vec<Vec<f32>>, Vec<Vec<f32>>) = images
        .par_chunks(64)
        .map(|chunk| familiar.infer_batch_with_layer_means(chunk))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .map(|(inf, layers)| (inf.features, layers))
        .unzip();
    Ok(super::anchor_cache::AnchorOutputs {
        features,
        familiarity_features,
        layer_means,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gallery::packed;

    /// A packed copy is read straight into the mapped catalogue, the same items and bits as
    /// read into memory; a damaged one, or one whose rows are another model's, is not (the
    /// caller falls back), and nothing is left on disk either way.
    #[test]
    fn a_packed_copy_is_mapped_as_read_and_a_damaged_one_is_not() {
        let dir = std::env::temp_dir().join(format!("pm-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("g.packed");
        let d = (SIDE * SIDE) as usize;
        let dim = ::embed::model::EMBED;
        let px: Vec<Vec<u8>> = (0..5).map(|i| vec![40 * i as u8; d]).collect();
        let fs: Vec<Vec<f32>> = (0..5).map(|i| vec![i as f32 / 8.0; dim]).collect();
        let rows: Vec<packed::Row> = (0..5)
            .map(|i| (100 + i as u64, i as u32 % 10, &px[i][..], &fs[i][..]))
            .collect();
        packed::write(&path, 1, 2, "w", &rows).unwrap();
        let pages = crate::ops::mapped::Pages::default();
        let maps = dir.join("maps");
        let mut copy = packed::open(&path, 1, 2, "w").unwrap();
        let items = mapped_from(&mut copy, &maps, &pages).unwrap();
        let held = packed::read(&path, 1, 2, "w").unwrap();
        assert_eq!(items.len(), held.len());
        for (it, (s, f)) in items.iter().zip(&held) {
            assert_eq!((it.id, it.label), (s.id, s.label));
            assert_eq!(it.pixels.as_slice(), &s.pixels[..]);
            assert_eq!(it.features.as_slice(), &f[..]);
        }
        assert_eq!(pages.mapped_len(), 5 * (d + 4 * dim));
        // One flipped pixel: the CRC no longer matches, nothing is mapped.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 4 * dim - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut damaged = packed::open(&path, 1, 2, "w").unwrap();
        assert!(mapped_from(&mut damaged, &maps, &pages).is_none());
        // Another model's width of features: left to the caller's path, which recomputes.
        let short: Vec<Vec<f32>> = (0..5).map(|_| vec![0.5; dim - 1]).collect();
        let rows: Vec<packed::Row> = (0..5)
            .map(|i| (100 + i as u64, 0, &px[i][..], &short[i][..]))
            .collect();
        packed::write(&path, 1, 3, "w", &rows).unwrap();
        let mut other = packed::open(&path, 1, 3, "w").unwrap();
        assert!(mapped_from(&mut other, &maps, &pages).is_none());
        // A label that is no class: left to the caller's path, which refuses the store.
        let rows: Vec<packed::Row> = (0..5)
            .map(|i| (100 + i as u64, 10 + i as u32, &px[i][..], &fs[i][..]))
            .collect();
        packed::write(&path, 1, 4, "w", &rows).unwrap();
        let mut unlabelled = packed::open(&path, 1, 4, "w").unwrap();
        assert!(mapped_from(&mut unlabelled, &maps, &pages).is_none());
        drop(items);
        assert_eq!(pages.mapped_len(), 0, "only the first was mapped");
        assert_eq!(std::fs::read_dir(&maps).unwrap().count(), 0, "unlinked");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
