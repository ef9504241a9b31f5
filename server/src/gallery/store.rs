//! Persistence on redb (an embedded, crash-safe key-value store): the gallery items, their
//! model features and the last computed embedding, so a restart serves the same results
//! without recomputing.
//!
//! Layout: table `items` maps id → `label (u32 LE) ‖ pixels`; table `features` maps id →
//! `version length (u8) ‖ model weights version (UTF-8) ‖ features (f32 LE)`, valid only while
//! the weights version matches (`embed::model::weights_version`); table `snapshot`
//! holds `meta` (JSON [`SnapshotMeta`]), `ids` (u64 LE, gallery order) and `rows` (f64 LE: the
//! gallery rows, then the anchor rows, each `embed_dim` wide).
//!
//! A features row never outlives its item: [`Store::put_items`] and [`Store::delete_item`]
//! remove it in the same transaction, and [`Store::put_features`] writes only for items whose
//! stored label and pixels are still the ones the features were computed from. Stores written
//! before the `features` table existed open as stores without features.

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition, TableError};
use serde::{Deserialize, Serialize};
use shared::SmlqParams;

/// redb's page cache (its default is 1 GiB, which a 1,000,000-image gallery — 1 GB of items —
/// would fill and keep: the store is read once at start-up and written on changes, so the
/// operating system's file cache serves it as well).
const CACHE_BYTES: usize = 128 << 20;

const ITEMS: TableDefinition<u64, &[u8]> = TableDefinition::new("items");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");
const FEATURES: TableDefinition<u64, &[u8]> = TableDefinition::new("features");

/// Encode a features row: `len(version) ‖ version ‖ f32 LE`.
fn encode_features(version: &str, features: &[f32]) -> Vec<u8> {
    let v = version.as_bytes();
    let mut out = Vec::with_capacity(1 + v.len() + 4 * features.len());
    out.push(v.len().min(255) as u8);
    out.extend_from_slice(&v[..v.len().min(255)]);
    for f in features {
        out.extend_from_slice(&f.to_le_bytes());
    }
    out
}

/// Decode a features row if it was computed with weights `version`.
fn decode_features(version: &str, bytes: &[u8]) -> Option<Vec<f32>> {
    let (&n, rest) = bytes.split_first()?;
    let (v, f) = rest.split_at_checked(n as usize)?;
    if v != version.as_bytes() || f.len() % 4 != 0 {
        return None;
    }
    Some(
        f.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

/// Features to store for one item, with what they were computed from.
pub struct FeatureRow<'a> {
    pub id: u64,
    pub label: u32,
    pub pixels: &'a [u8],
    pub features: &'a [f32],
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store: {0}")]
    Db(String),
    #[error("store is corrupt: {0}")]
    Corrupt(String),
}

macro_rules! db_err {
    ($($t:ty),*) => { $(impl From<$t> for StoreError { fn from(e: $t) -> Self { StoreError::Db(e.to_string()) } })* };
}
db_err!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// A stored gallery image.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    pub id: u64,
    pub label: u32,
    pub pixels: Vec<u8>,
}

/// What a stored embedding was computed from; it is reused only if all of it matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub catalogue_version: u64,
    pub smlq: SmlqParams,
    pub seed: u64,
    pub anchor_ids: Vec<u64>,
    pub gallery_len: usize,
    pub model_version: String,
}

/// A stored embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub ids: Vec<u64>,
    pub rows: Vec<f64>,
}

pub struct Store {
    /// `None` once closed ([`Store::close`]).
    db: std::sync::RwLock<Option<Database>>,
}

/// The open database, borrowed for one call.
struct Db<'a>(std::sync::RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for Db<'_> {
    type Target = Database;
    fn deref(&self) -> &Database {
        self.0
            .as_ref()
            .expect("checked open when the guard was made")
    }
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Db(e.to_string()))?;
        }
        Ok(Store {
            db: std::sync::RwLock::new(Some(
                Database::builder()
                    .set_cache_size(CACHE_BYTES)
                    .create(path)?,
            )),
        })
    }

    fn db(&self) -> Result<Db<'_>, StoreError> {
        let g = self.db.read().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            return Err(StoreError::Db("the store is closed (shutting down)".into()));
        }
        Ok(Db(g))
    }

    /// Close the database cleanly (waiting for calls in progress). A redb file dropped without
    /// closing — the process killed, or still held by a background thread when `main`
    /// returns — is repaired at the next open: 4 s for a 1,000,000-image store. Later calls
    /// fail with a typed error.
    pub fn close(&self) {
        let db = self.db.write().unwrap_or_else(|e| e.into_inner()).take();
        drop(db);
    }

    pub fn load_items(&self) -> Result<Vec<StoredItem>, StoreError> {
        let tx = self.db()?.begin_read()?;
        let table = match tx.open_table(ITEMS) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let v = v.value();
            if v.len() < 4 {
                return Err(StoreError::Corrupt(format!("item {} too short", k.value())));
            }
            out.push(StoredItem {
                id: k.value(),
                label: u32::from_le_bytes(v[..4].try_into().unwrap()),
                pixels: v[4..].to_vec(),
            });
        }
        Ok(out)
    }

    /// Insert items and bump the catalogue version, in one transaction.
    pub fn put_items(&self, items: &[StoredItem], version: u64) -> Result<(), StoreError> {
        let tx = self.db()?.begin_write()?;
        {
            let mut t = tx.open_table(ITEMS)?;
            let mut f = tx.open_table(FEATURES)?;
            for it in items {
                let mut v = it.label.to_le_bytes().to_vec();
                v.extend_from_slice(&it.pixels);
                t.insert(it.id, v.as_slice())?;
                f.remove(it.id)?;
            }
            let mut s = tx.open_table(SNAPSHOT)?;
            for it in items {
                raise_next_id(&mut s, it.id)?;
            }
            s.insert("catalogue_version", version.to_le_bytes().as_slice())?;
            bump_generation(&mut s)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Remove an item and bump the catalogue version; false if it was not there.
    pub fn delete_item(&self, id: u64, version: u64) -> Result<bool, StoreError> {
        let tx = self.db()?.begin_write()?;
        let removed = {
            let mut t = tx.open_table(ITEMS)?;
            let removed = t.remove(id)?.is_some();
            tx.open_table(FEATURES)?.remove(id)?;
            let mut s = tx.open_table(SNAPSHOT)?;
            raise_next_id(&mut s, id)?;
            s.insert("catalogue_version", version.to_le_bytes().as_slice())?;
            bump_generation(&mut s)?;
            removed
        };
        tx.commit()?;
        Ok(removed)
    }

    /// The stored features computed with weights `version`, by id (rows of other versions,
    /// malformed rows and rows of deleted items are left out).
    pub fn load_features(&self, version: &str) -> Result<HashMap<u64, Vec<f32>>, StoreError> {
        let tx = self.db()?.begin_read()?;
        let table = match tx.open_table(FEATURES) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(HashMap::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = HashMap::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            if let Some(f) = decode_features(version, v.value()) {
                out.insert(k.value(), f);
            }
        }
        Ok(out)
    }

    /// Store features computed with weights `version`, in one transaction; a row is written
    /// only if its item is still stored with the same label and pixels. Returns how many
    /// were written.
    pub fn put_features(&self, version: &str, rows: &[FeatureRow]) -> Result<usize, StoreError> {
        let tx = self.db()?.begin_write()?;
        let mut written = 0;
        {
            let items = tx.open_table(ITEMS)?;
            let mut f = tx.open_table(FEATURES)?;
            for r in rows {
                let current = items.get(r.id)?.is_some_and(|v| {
                    let v = v.value();
                    v.len() >= 4 && v[..4] == r.label.to_le_bytes() && &v[4..] == r.pixels
                });
                if current {
                    f.insert(r.id, encode_features(version, r.features).as_slice())?;
                    written += 1;
                }
            }
            bump_generation(&mut tx.open_table(SNAPSHOT)?)?;
        }
        tx.commit()?;
        Ok(written)
    }

    /// This store's instance id (made when first asked): tells a store from one deleted and
    /// seeded anew, whose catalogue versions start again.
    pub fn instance(&self) -> Result<u64, StoreError> {
        if let Some(b) = self.get("instance")? {
            if let Ok(b) = <[u8; 8]>::try_from(b.as_slice()) {
                return Ok(u64::from_le_bytes(b));
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let id = nanos ^ (u64::from(std::process::id()) << 40);
        let tx = self.db()?.begin_write()?;
        tx.open_table(SNAPSHOT)?
            .insert("instance", id.to_le_bytes().as_slice())?;
        tx.commit()?;
        Ok(id)
    }

    /// Bumped by every write of items or features: what a copy of them ([`crate::gallery::packed`])
    /// must have been taken at to be current.
    pub fn generation(&self) -> Result<u64, StoreError> {
        self.get_u64("generation")
    }

    /// The least id never given to an item through [`Self::put_items`] or deleted through
    /// [`Self::delete_item`] (0 for a store from before it was kept: then the catalogue's
    /// highest id is the mark).
    pub fn next_id(&self) -> Result<u64, StoreError> {
        self.get_u64("next_id")
    }

    pub fn catalogue_version(&self) -> Result<u64, StoreError> {
        self.get_u64("catalogue_version")
    }

    /// A u64 the snapshot table keeps under `key`; 0 where none is (or not 8 bytes).
    fn get_u64(&self, key: &str) -> Result<u64, StoreError> {
        Ok(self
            .get(key)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map_or(0, u64::from_le_bytes))
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.db()?.begin_read()?;
        let table = match tx.open_table(SNAPSHOT) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    }

    pub fn save_snapshot(&self, snap: &StoredSnapshot) -> Result<(), StoreError> {
        let meta = serde_json::to_vec(&snap.meta).map_err(|e| StoreError::Db(e.to_string()))?;
        let ids: Vec<u8> = snap.ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        let rows: Vec<u8> = snap.rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        let tx = self.db()?.begin_write()?;
        {
            let mut s = tx.open_table(SNAPSHOT)?;
            s.insert("meta", meta.as_slice())?;
            s.insert("ids", ids.as_slice())?;
            s.insert("rows", rows.as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Store the gallery's rows in the anchor frame (`width` f64 each), valid for `guard` (a
    /// digest of everything they were computed from).
    pub fn save_frame_rows(&self, guard: &[u8], rows: &[f64]) -> Result<(), StoreError> {
        let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        let tx = self.db()?.begin_write()?;
        {
            let mut s = tx.open_table(SNAPSHOT)?;
            s.insert("frame_guard", guard)?;
            s.insert("frame_rows", bytes.as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The stored frame rows if they were saved under `guard`.
    pub fn load_frame_rows(&self, guard: &[u8]) -> Result<Option<Vec<f64>>, StoreError> {
        if self.get("frame_guard")?.as_deref() != Some(guard) {
            return Ok(None);
        }
        let Some(bytes) = self.get("frame_rows")? else {
            return Ok(None);
        };
        if bytes.len() % 8 != 0 {
            return Err(StoreError::Corrupt("frame rows length".into()));
        }
        Ok(Some(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ))
    }

    pub fn load_snapshot(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let (Some(meta), Some(ids), Some(rows)) =
            (self.get("meta")?, self.get("ids")?, self.get("rows")?)
        else {
            return Ok(None);
        };
        let meta: SnapshotMeta =
            serde_json::from_slice(&meta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if ids.len() % 8 != 0 || rows.len() % 8 != 0 {
            return Err(StoreError::Corrupt("snapshot lengths".into()));
        }
        Ok(Some(StoredSnapshot {
            meta,
            ids: ids
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            rows: rows
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        }))
    }
}

/// A u64 the snapshot table keeps under `key` (in the caller's transaction); 0 where none is.
fn counter(s: &redb::Table<&str, &[u8]>, key: &str) -> Result<u64, StoreError> {
    Ok(s.get(key)?
        .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
        .map_or(0, u64::from_le_bytes))
}

/// Raise the ids' high-water mark (`next_id`) past `id`: never lowered, so an id once given is
/// never given again, even after its item (the highest) is deleted.
fn raise_next_id(s: &mut redb::Table<&str, &[u8]>, id: u64) -> Result<(), StoreError> {
    if id >= counter(s, "next_id")? {
        s.insert("next_id", (id + 1).to_le_bytes().as_slice())?;
    }
    Ok(())
}

/// Add one to the stored generation (in the caller's transaction).
fn bump_generation(s: &mut redb::Table<&str, &[u8]>) -> Result<(), StoreError> {
    let g = counter(s, "generation")?;
    s.insert("generation", (g + 1).to_le_bytes().as_slice())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids' high-water mark only rises: deleting the highest item keeps its id given.
    #[test]
    fn an_id_once_given_stays_given() {
        let dir = std::env::temp_dir().join(format!("pm-store-ids-{}", std::process::id()));
        let path = dir.join("g.redb");
        let _ = std::fs::remove_file(&path);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.next_id().unwrap(), 0);
        let item = |id| StoredItem {
            id,
            label: 1,
            pixels: vec![0; 4],
        };
        s.put_items(&[item(4), item(7)], 1).unwrap();
        assert_eq!(s.next_id().unwrap(), 8);
        assert!(s.delete_item(7, 2).unwrap());
        assert_eq!(s.next_id().unwrap(), 8);
        s.put_items(&[item(2)], 3).unwrap();
        assert_eq!(s.next_id().unwrap(), 8);
        // A store from before the mark was kept: deleting its highest item sets it.
        assert!(s.delete_item(4, 4).unwrap());
        assert_eq!(s.next_id().unwrap(), 8);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn items_and_snapshot_survive_reopening() {
        let dir = std::env::temp_dir().join(format!("pm-store-{}", std::process::id()));
        let path = dir.join("g.redb");
        let _ = std::fs::remove_file(&path);
        {
            let s = Store::open(&path).unwrap();
            assert!(s.load_items().unwrap().is_empty());
            assert!(s.load_snapshot().unwrap().is_none());
            s.put_items(
                &[
                    StoredItem {
                        id: 3,
                        label: 7,
                        pixels: vec![1, 2, 3],
                    },
                    StoredItem {
                        id: 9,
                        label: 1,
                        pixels: vec![4],
                    },
                ],
                1,
            )
            .unwrap();
            assert!(s.delete_item(9, 2).unwrap());
            assert!(!s.delete_item(9, 3).unwrap());
            s.save_snapshot(&StoredSnapshot {
                meta: SnapshotMeta {
                    catalogue_version: 3,
                    smlq: SmlqParams::default(),
                    seed: 1,
                    anchor_ids: vec![5],
                    gallery_len: 1,
                    model_version: "m".into(),
                },
                ids: vec![3],
                rows: vec![0.5, -1.25, 2.0, 3.0],
            })
            .unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(
            s.load_items().unwrap(),
            vec![StoredItem {
                id: 3,
                label: 7,
                pixels: vec![1, 2, 3]
            }]
        );
        assert_eq!(s.catalogue_version().unwrap(), 3);
        let snap = s.load_snapshot().unwrap().unwrap();
        assert_eq!(snap.ids, vec![3]);
        assert_eq!(snap.rows, vec![0.5, -1.25, 2.0, 3.0]);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn features_are_kept_per_weights_version_and_never_outlive_their_item() {
        let dir = std::env::temp_dir().join(format!("pm-store-f-{}", std::process::id()));
        let path = dir.join("g.redb");
        let _ = std::fs::remove_file(&path);
        let item = |id, label, px: u8| StoredItem {
            id,
            label,
            pixels: vec![px; 3],
        };
        let s = Store::open(&path).unwrap();
        assert!(s.load_features("v1").unwrap().is_empty());
        s.put_items(&[item(1, 2, 7), item(2, 3, 8)], 1).unwrap();
        let row = |id, label, pixels: &'static [u8], features: &'static [f32]| FeatureRow {
            id,
            label,
            pixels,
            features,
        };
        let written = s
            .put_features(
                "v1",
                &[
                    row(1, 2, &[7, 7, 7], &[0.5, -1.0]),
                    row(2, 3, &[9, 9, 9], &[1.0, 2.0]), // pixels no longer stored: skipped
                    row(5, 0, &[7, 7, 7], &[1.0, 2.0]), // no such item: skipped
                ],
            )
            .unwrap();
        assert_eq!(written, 1);
        drop(s);
        let s = Store::open(&path).unwrap();
        let f = s.load_features("v1").unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[&1], vec![0.5, -1.0]);
        assert!(s.load_features("v2").unwrap().is_empty());
        // Re-putting an item drops its features; deleting it too.
        s.put_items(&[item(1, 2, 6)], 2).unwrap();
        assert!(s.load_features("v1").unwrap().is_empty());
        s.put_features("v1", &[row(2, 3, &[8, 8, 8], &[3.0])])
            .unwrap();
        assert_eq!(s.load_features("v1").unwrap()[&2], vec![3.0]);
        s.delete_item(2, 3).unwrap();
        assert!(s.load_features("v1").unwrap().is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}
