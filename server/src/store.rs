//! Persistence on redb (an embedded, crash-safe key-value store): the gallery items and the
//! last computed embedding, so a restart serves the same results without recomputing.
//!
//! Layout: table `items` maps id → `label (u32 LE) ‖ pixels`; table `snapshot` holds
//! `meta` (JSON [`SnapshotMeta`]), `ids` (u64 LE, gallery order) and `rows` (f64 LE: the gallery
//! rows, then the anchor rows, each `embed_dim` wide).

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition, TableError};
use serde::{Deserialize, Serialize};
use shared::SmlqParams;

const ITEMS: TableDefinition<u64, &[u8]> = TableDefinition::new("items");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");

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
    db: Database,
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Db(e.to_string()))?;
        }
        Ok(Store {
            db: Database::create(path)?,
        })
    }

    pub fn load_items(&self) -> Result<Vec<StoredItem>, StoreError> {
        let tx = self.db.begin_read()?;
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
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(ITEMS)?;
            for it in items {
                let mut v = it.label.to_le_bytes().to_vec();
                v.extend_from_slice(&it.pixels);
                t.insert(it.id, v.as_slice())?;
            }
            let mut s = tx.open_table(SNAPSHOT)?;
            s.insert("catalogue_version", version.to_le_bytes().as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Remove an item and bump the catalogue version; false if it was not there.
    pub fn delete_item(&self, id: u64, version: u64) -> Result<bool, StoreError> {
        let tx = self.db.begin_write()?;
        let removed = {
            let mut t = tx.open_table(ITEMS)?;
            let removed = t.remove(id)?.is_some();
            let mut s = tx.open_table(SNAPSHOT)?;
            s.insert("catalogue_version", version.to_le_bytes().as_slice())?;
            removed
        };
        tx.commit()?;
        Ok(removed)
    }

    pub fn catalogue_version(&self) -> Result<u64, StoreError> {
        Ok(self
            .get("catalogue_version")?
            .map(|b| u64::from_le_bytes(b.as_slice().try_into().unwrap_or([0; 8])))
            .unwrap_or(0))
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.db.begin_read()?;
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
        let tx = self.db.begin_write()?;
        {
            let mut s = tx.open_table(SNAPSHOT)?;
            s.insert("meta", meta.as_slice())?;
            s.insert("ids", ids.as_slice())?;
            s.insert("rows", rows.as_slice())?;
        }
        tx.commit()?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
