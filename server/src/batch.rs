//! The build as a batch job, and the stateless replica's source (ARCHITECTURE.md, "Scale").
//!
//! `server build --out STORE --shard i/N` computes the features of slice `i` of `N` of the
//! demo gallery (contiguous by position) and writes them as one object named by its
//! SHA-256 (`objects/{sha}.rows`) plus a pointer `shards/{N}/{i}.json`. `server build --out
//! STORE --join N` reads the `N` pointers, checks each object's hash, concatenates the rows
//! into the catalogue object (the same bytes for any `N`), builds the embedding and the
//! partition from it into `galleries/{catalogue sha}/` (the block store's layout, one
//! content-addressed version), and writes a manifest `manifests/{sha}.json` naming all of it,
//! then `CURRENT.json` naming the manifest — written last, one atomic put: publishing a new
//! version is that one switch.
//!
//! `server serve --from STORE [--from-version SHA]` (a replica) reads a manifest, copies its
//! catalogue into a local cache (checked against its hash), opens a local store from it, and
//! serves the partition the build published (never rebuilding into the bucket). Everything a
//! request depends on is a function of the manifest: the partition is loaded from the
//! bucket, and the PIR databases are derived from it deterministically (their seeds come
//! from the partition document, `publish::pir::seeds`), so any replica of one manifest
//! answers any request of a search the same way.
//!
//! Every object is immutable: its name is its content's hash, so a worker that is run again
//! writes the same name with the same bytes.

use std::path::{Path, PathBuf};

use axum::body::Bytes;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::gallery::store::{FeatureRow, Store, StoredItem};
use crate::item::SIDE;
use crate::partition::blockstore::BlockStore;
use crate::state::StateError;

/// The announcement's object name: which manifest replicas following the store serve.
pub const CURRENT: &str = "CURRENT.json";
const ROWS_MAGIC: &[u8; 8] = b"PMROWS1\0";
/// More items than this is a corrupt object, not an allocation to attempt.
const MAX_ITEMS: u64 = 10_000_000;

pub use crate::ops::slice::Shard;

/// A worker's output, `shards/{N}/{i}.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardPointer {
    pub shard: String,
    pub object: String,
    pub sha256: String,
    pub items: usize,
    pub weights: String,
}

/// What the partition was built with; a replica serves with exactly these.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BuildSettings {
    pub max_share: f64,
    pub allow_full_download: bool,
    pub verified_scores: bool,
    pub thumb_code_bytes: Option<usize>,
}

/// One gallery version: every published object it consists of, by content.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GalleryManifest {
    pub format: u32,
    /// The catalogue object (ids, labels, pixels, features), `objects/{sha}.rows`.
    pub catalogue: String,
    pub catalogue_sha256: String,
    pub items: usize,
    pub gallery_size: usize,
    pub anchors: usize,
    pub seed: u64,
    /// The feature model's weights version the features were computed with.
    pub weights: String,
    /// The block store prefix of the partition, `galleries/{catalogue sha}`.
    pub blocks: String,
    /// The partition's content-addressed version in that prefix.
    pub partition_version: String,
    pub partition_fingerprint: String,
    pub settings: BuildSettings,
}

/// The announcement: which manifest is current.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Current {
    pub manifest: String,
}

fn sha_hex(b: &[u8]) -> String {
    publish::blocks::hash_hex(b)
}

fn io(e: std::io::Error) -> StateError {
    StateError::Blocks(e.into())
}

fn invalid(e: impl std::fmt::Display) -> StateError {
    StateError::Invalid(e.to_string())
}

/// `spec`'s sub-prefix `sub` (a directory, `file:///dir` or `s3://bucket/prefix`).
pub fn sub_spec(spec: &str, sub: &str) -> String {
    format!("{}/{}", spec.trim_end_matches('/'), sub)
}

/// Rows as one object: `PMROWS1\0`, count (u64 LE), pixels and features per item (u32 LE
/// each), then per item id (u64 LE), label (u32 LE), pixels, features (f32 LE).
pub fn encode_rows(rows: &[(StoredItem, Vec<f32>)]) -> Vec<u8> {
    let px = (SIDE * SIDE) as usize;
    let fd = ::embed::model::EMBED;
    let mut out = Vec::with_capacity(24 + rows.len() * (12 + px + 4 * fd));
    out.extend_from_slice(ROWS_MAGIC);
    out.extend_from_slice(&(rows.len() as u64).to_le_bytes());
    out.extend_from_slice(&(px as u32).to_le_bytes());
    out.extend_from_slice(&(fd as u32).to_le_bytes());
    for (it, f) in rows {
        out.extend_from_slice(&it.id.to_le_bytes());
        out.extend_from_slice(&it.label.to_le_bytes());
        out.extend_from_slice(&it.pixels);
        for v in f {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// The rows of [`encode_rows`]; a typed error on any other shape, a non-finite feature or a
/// label out of range.
pub fn decode_rows(b: &[u8]) -> Result<Vec<(StoredItem, Vec<f32>)>, StateError> {
    let bad = |m: &str| invalid(format!("malformed rows object: {m}"));
    if b.len() < 24 || &b[..8] != ROWS_MAGIC {
        return Err(bad("header"));
    }
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let (n, px, fd) = (u64_at(8), u32_at(16) as usize, u32_at(20) as usize);
    if n > MAX_ITEMS || px != (SIDE * SIDE) as usize || fd != ::embed::model::EMBED {
        return Err(bad("shape"));
    }
    let row = 12 + px + 4 * fd;
    if b.len() != 24 + n as usize * row {
        return Err(bad("length"));
    }
    b[24..]
        .par_chunks(row)
        .map(|r| {
            let id = u64::from_le_bytes(r[..8].try_into().unwrap());
            let label = u32::from_le_bytes(r[8..12].try_into().unwrap());
            let pixels = r[12..12 + px].to_vec();
            let f: Vec<f32> = r[12 + px..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            if label >= 10 || !f.iter().all(|v| v.is_finite()) {
                return Err(bad("a row's label or features"));
            }
            Ok((StoredItem { id, label, pixels }, f))
        })
        .collect()
}

/// A worker: the features of its slice of the demo gallery, written as one object named by
/// its hash and a pointer to it. Returns the pointer.
pub fn build_shard(
    out: &str,
    data_dir: &Path,
    gallery_size: usize,
    anchor_count: usize,
    shard: Shard,
) -> Result<ShardPointer, StateError> {
    let t = std::time::Instant::now();
    let (train, test) = rayon::join(
        || data::fashion::load_split(data_dir, "train"),
        || data::fashion::load_split(data_dir, "t10k"),
    );
    let (train, test) = (train?, test?);
    let anchors = data::fashion::balanced_anchors(&train, anchor_count);
    let mut all = data::fashion::demo_gallery(&test, &train, &anchors, gallery_size);
    let range = shard.range(all.len());
    let mine: Vec<_> = all.drain(range).collect();
    drop(all);
    let model = ::embed::model::Model::from_bytes(data::assets::MODEL_WEIGHTS)?;
    let progress = data::progress::Progress::new(
        format!("features of shard {}/{}", shard.index, shard.count),
        mine.len() as u64,
        "images",
    );
    let rows: Vec<(StoredItem, Vec<f32>)> = mine
        .par_chunks(256)
        .map(|chunk| {
            let images: Vec<&[u8]> = chunk.iter().map(|d| d.pixels.as_slice()).collect();
            let inf = model.infer_batch(&images)?;
            progress.inc(chunk.len() as u64);
            Ok(chunk
                .iter()
                .zip(inf)
                .map(|(d, r)| {
                    (
                        StoredItem {
                            id: d.id,
                            label: d.label as u32,
                            pixels: d.pixels.clone(),
                        },
                        r.features,
                    )
                })
                .collect::<Vec<_>>())
        })
        .collect::<Result<Vec<_>, StateError>>()?
        .into_iter()
        .flatten()
        .collect();
    progress.finish();
    let bytes = encode_rows(&rows);
    let sha = sha_hex(&bytes);
    let store = BlockStore::open_objects(out)?;
    let object = format!("objects/{sha}.rows");
    store.put_object(&object, Bytes::from(bytes))?;
    let pointer = ShardPointer {
        shard: format!("{}/{}", shard.index, shard.count),
        object,
        sha256: sha,
        items: rows.len(),
        weights: crate::state::model_version(data::assets::MODEL_WEIGHTS),
    };
    store.put_object(
        &format!("shards/{}/{}.json", shard.count, shard.index),
        Bytes::from(serde_json::to_vec_pretty(&pointer).map_err(invalid)?),
    )?;
    tracing::info!(
        shard = %pointer.shard,
        items = pointer.items,
        object = %pointer.object,
        secs = t.elapsed().as_secs_f64(),
        "shard written"
    );
    Ok(pointer)
}

/// An object, checked against the hash its name carries.
fn get_checked(store: &BlockStore, object: &str, sha: &str) -> Result<Bytes, StateError> {
    let b = store
        .get_object(object)?
        .ok_or_else(|| invalid(format!("{object} is missing from {}", store.describe())))?;
    if sha_hex(&b) != sha {
        return Err(invalid(format!("{object} does not match its hash")));
    }
    Ok(b)
}

/// What the join step needs besides the store.
pub struct JoinOptions<'a> {
    pub out: &'a str,
    pub shards: usize,
    pub data_dir: &'a Path,
    pub work_dir: &'a Path,
    pub gallery_size: usize,
    pub anchor_count: usize,
    pub seed: u64,
    pub settings: BuildSettings,
    /// Where clients will fetch the blocks from (required for a bucket; see `--blocks-public-url`).
    pub blocks_public_url: Option<&'a str>,
}

/// The join: the shards' rows into the catalogue object, the embedding and partition built
/// from it into the store, the manifest, and last the announcement. Returns the manifest's
/// name.
pub fn join(o: &JoinOptions) -> Result<(String, GalleryManifest), StateError> {
    let store = BlockStore::open_objects(o.out)?;
    let weights = crate::state::model_version(data::assets::MODEL_WEIGHTS);
    let mut rows = Vec::new();
    for i in 0..o.shards {
        let name = format!("shards/{}/{i}.json", o.shards);
        let p: ShardPointer =
            serde_json::from_slice(&store.get_object(&name)?.ok_or_else(|| {
                invalid(format!("{name} is missing: run worker {i}/{}", o.shards))
            })?)
            .map_err(|e| invalid(format!("{name}: {e}")))?;
        if p.weights != weights {
            return Err(invalid(format!("{name} was computed with other weights")));
        }
        let mut part = decode_rows(&get_checked(&store, &p.object, &p.sha256)?)?;
        if part.len() != p.items {
            return Err(invalid(format!(
                "{name}: item count differs from its object"
            )));
        }
        rows.append(&mut part);
    }
    let bytes = encode_rows(&rows);
    let catalogue_sha = sha_hex(&bytes);
    let catalogue = format!("objects/{catalogue_sha}.rows");
    store.put_object(&catalogue, Bytes::from(bytes))?;
    let blocks = format!("galleries/{catalogue_sha}");
    // A fresh local store from exactly these rows; the server's own start-up builds the
    // embedding and the partition into the bucket prefix.
    let _ = std::fs::remove_dir_all(o.work_dir);
    std::fs::create_dir_all(o.work_dir).map_err(io)?;
    let store_path = o.work_dir.join("gallery.redb");
    fill_store(&store_path, &rows, &weights)?;
    let items = rows.len();
    drop(rows);
    let state = open_state(
        &store_path,
        o.data_dir,
        &sub_spec(o.out, &blocks),
        o.blocks_public_url.or(Some("/api/v1/blocks")),
        o.gallery_size,
        o.anchor_count,
        o.seed,
        &o.settings,
        None,
    )?;
    let p = state
        .partitions
        .current()
        .ok_or_else(|| invalid("no partition was built"))?;
    let manifest = GalleryManifest {
        format: 1,
        catalogue,
        catalogue_sha256: catalogue_sha,
        items,
        gallery_size: o.gallery_size,
        anchors: o.anchor_count,
        seed: o.seed,
        weights,
        blocks,
        partition_version: p.doc.version.clone(),
        partition_fingerprint: p.fingerprint.clone(),
        settings: o.settings.clone(),
    };
    state.store.close();
    let json = serde_json::to_vec_pretty(&manifest).map_err(invalid)?;
    let sha = sha_hex(&json);
    store.put_object(&format!("manifests/{sha}.json"), Bytes::from(json))?;
    store.put_object(
        CURRENT,
        Bytes::from(
            serde_json::to_vec_pretty(&Current {
                manifest: sha.clone(),
            })
            .map_err(invalid)?,
        ),
    )?;
    Ok((sha, manifest))
}

fn fill_store(
    path: &Path,
    rows: &[(StoredItem, Vec<f32>)],
    weights: &str,
) -> Result<(), StateError> {
    let store = Store::open(path)?;
    let items: Vec<StoredItem> = rows.iter().map(|(it, _)| it.clone()).collect();
    store.put_items(&items, 1)?;
    let feats: Vec<FeatureRow> = rows
        .iter()
        .map(|(it, f)| FeatureRow {
            id: it.id,
            label: it.label,
            pixels: &it.pixels,
            features: f,
        })
        .collect();
    store.put_features(weights, &feats)?;
    store.close();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn open_state(
    store_path: &Path,
    data_dir: &Path,
    blocks: &str,
    public_url: Option<&str>,
    gallery_size: usize,
    anchor_count: usize,
    seed: u64,
    s: &BuildSettings,
    identity_key: Option<&Path>,
) -> Result<std::sync::Arc<crate::state::AppState>, StateError> {
    crate::state::AppState::open_with(
        &crate::state::Options {
            data_dir,
            store_path,
            gallery_size,
            anchor_count,
            seed,
            limits: shared::api::ApiLimits {
                max_k: 50,
                max_query_rows: 32,
                max_body_bytes: 1 << 20,
            },
            admin_token: None,
            blocks_store: Some(blocks),
            blocks_public_url: public_url,
            pir_concurrency: 1,
            pir_upload_budget: 16 << 20,
            client_address_header: None,
            identity_key,
        },
        crate::partition::PartitionSettings {
            max_share: s.max_share,
            allow_full_download: s.allow_full_download,
            verified_scores: s.verified_scores,
            thumb_code_bytes: s.thumb_code_bytes,
            ..Default::default()
        },
    )
}

/// The items of a version copied into the local cache by [`materialize`] (its store at
/// `store_path`), with their features: what a replica switching to it serves.
pub fn cached_items(store_path: &Path) -> Result<Vec<crate::item::GalleryItem>, StateError> {
    let store = Store::open(store_path)?;
    let weights = crate::state::model_version(data::assets::MODEL_WEIGHTS);
    let loaded = store
        .load_items()
        .and_then(|items| Ok((items, store.load_features(&weights)?)));
    store.close();
    let (items, mut features) = loaded?;
    items
        .into_iter()
        .map(|it| {
            let f = features
                .remove(&it.id)
                .ok_or_else(|| invalid(format!("cached item {} has no features", it.id)))?;
            Ok(crate::item::GalleryItem::with_features(
                it.id, it.label, it.pixels, f,
            )?)
        })
        .collect()
}

/// A replica's local copy of a manifest's version: the manifest (the pinned one, or the one
/// `CURRENT.json` names) and a local store filled from its catalogue, checked against its
/// hash. Copied once into `cache_dir/{manifest sha}/` (written aside, renamed), reused after.
pub fn materialize(
    from: &str,
    version: Option<&str>,
    cache_dir: &Path,
) -> Result<(String, GalleryManifest, PathBuf), StateError> {
    let store = BlockStore::open_objects(from)?;
    let sha = match version {
        Some(v) => v.to_string(),
        None => {
            let b = store.get_object(CURRENT)?.ok_or_else(|| {
                invalid(format!(
                    "{} announces no version ({CURRENT})",
                    store.describe()
                ))
            })?;
            serde_json::from_slice::<Current>(&b)
                .map_err(|e| invalid(format!("{CURRENT}: {e}")))?
                .manifest
        }
    };
    if sha.len() != 64 || !sha.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(invalid(format!("{sha:?} is not a manifest's SHA-256")));
    }
    let m: GalleryManifest = serde_json::from_slice(&get_checked(
        &store,
        &format!("manifests/{sha}.json"),
        &sha,
    )?)
    .map_err(|e| invalid(format!("manifest {sha}: {e}")))?;
    let weights = crate::state::model_version(data::assets::MODEL_WEIGHTS);
    if m.weights != weights {
        return Err(invalid(format!(
            "manifest {sha} was built with weights {}, this binary has {weights}",
            m.weights
        )));
    }
    let dir = cache_dir.join(&sha);
    let store_path = dir.join("gallery.redb");
    if !dir.join("ready").exists() {
        let t = std::time::Instant::now();
        let rows = decode_rows(&get_checked(&store, &m.catalogue, &m.catalogue_sha256)?)?;
        let part = cache_dir.join(format!("{sha}.part"));
        let _ = std::fs::remove_dir_all(&part);
        std::fs::create_dir_all(&part).map_err(io)?;
        fill_store(&part.join("gallery.redb"), &rows, &weights)?;
        std::fs::write(part.join("ready"), b"").map_err(io)?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&part, &dir).map_err(io)?;
        tracing::info!(
            manifest = %sha,
            items = rows.len(),
            secs = t.elapsed().as_secs_f64(),
            "version copied into the local cache"
        );
    }
    Ok((sha, m, store_path))
}
