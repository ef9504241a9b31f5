//! Where the partition's files live: any `object_store` backend — a local directory by
//! default, an S3-compatible bucket when configured — so that clients can fetch blocks from
//! this server, a bucket or a CDN in front of it, and a restart serves the stored partition
//! instead of rebuilding it.
//!
//! Layout under the store's prefix (one directory per content-addressed version):
//!
//! ```text
//! {version}/{level}/{block}      block file (the format of publish::blocks)
//! {version}/{level}/{block}.gz   the same, gzip (what this server sends when asked)
//! {version}/{level}/centroids    the level's centroids (publish::centroids), and
//! {version}/{level}/centroids.gz   its gzip: a name no block number can take
//! {version}/checksums.json       CRC-32 of every block file (a [`Checksums`]), before the document
//! {version}/partition.json       the partition document, written after every block
//! CURRENT.json                   the announced version (a [`Manifest`]), written last
//! ```
//!
//! Architecture invariant: a version is announced (CURRENT.json points at it) only after all
//! its files and its document are written, and a version's files are deleted only when it is
//! neither current nor retired and its newest file is older than the grace period. Each put
//! is atomic (a local file is written aside and renamed; an S3 PUT is all or nothing), so a
//! process killed at any point leaves CURRENT.json naming one complete version.
//!
//! All object-store I/O runs on this module's own small Tokio runtime: the store's HTTP
//! connections stay on one runtime, and synchronous callers (the partition builder's
//! thread, start-up) can wait on it without being inside another runtime.

use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use shared::api::PartitionDoc;

/// Concurrent puts while writing a version.
const WRITE_CONCURRENCY: usize = 16;
/// The announcement's object name.
const CURRENT: &str = "CURRENT.json";
/// The document's object name inside a version.
const DOC: &str = "partition.json";
/// The checksums' object name inside a version.
const CHECKSUMS: &str = "checksums.json";

#[derive(Debug, thiserror::Error)]
pub enum BlockStoreError {
    #[error("block store: {0}")]
    Store(#[from] object_store::Error),
    #[error("block store: {0}")]
    Config(String),
    #[error("block store: malformed {what}: {err}")]
    Malformed { what: String, err: String },
    #[error("block store: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, BlockStoreError>;

/// One file of a level: a block, or the level's centroids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelFile {
    Block(usize),
    Centroids,
}

impl LevelFile {
    /// Its slot among a level's `blocks + 1` files (the blocks, then the centroids): how
    /// [`Checksums`] and the served version index them.
    pub fn slot(self, blocks: usize) -> Option<usize> {
        match self {
            LevelFile::Block(b) if b < blocks => Some(b),
            LevelFile::Block(_) => None,
            LevelFile::Centroids => Some(blocks),
        }
    }

    /// The file in `slot` of a level of `blocks` blocks.
    pub fn of_slot(slot: usize, blocks: usize) -> Self {
        if slot == blocks {
            LevelFile::Centroids
        } else {
            LevelFile::Block(slot)
        }
    }
}

impl std::fmt::Display for LevelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LevelFile::Block(b) => write!(f, "{b}"),
            LevelFile::Centroids => f.write_str(publish::centroids::FILE_NAME),
        }
    }
}

/// CRC-32 of each file's plain and gzip form, `crc32[level][slot] = [plain, gzip]` (slots as
/// [`LevelFile::slot`]: the blocks, then the centroids), written
/// with a version before its document. A server reading blocks from the store per request
/// checks every file it sends against these (about 50 µs per MB) instead of SHA-256-hashing
/// it (about 0.7 ms per MB): a damaged or truncated stored file is an error, never sent.
/// Integrity against a deliberate change is the client's SHA-256 check of every block
/// against the document, which the server holds in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checksums {
    pub crc32: Vec<Vec<[u32; 2]>>,
}

impl Checksums {
    /// The checksums of `(plain, gzip)` files, `[level][slot]`.
    pub fn of(files: &[Vec<(&[u8], &[u8])>]) -> Self {
        use rayon::prelude::*;
        Checksums {
            crc32: files
                .iter()
                .map(|l| {
                    l.par_iter()
                        .map(|(raw, gz)| [crc32fast::hash(raw), crc32fast::hash(gz)])
                        .collect()
                })
                .collect(),
        }
    }

    /// Whether they have exactly the document's levels and blocks.
    pub fn fits(&self, doc: &PartitionDoc) -> bool {
        self.crc32.len() == doc.levels.len()
            && self
                .crc32
                .iter()
                .zip(&doc.levels)
                .all(|(c, l)| c.len() == l.blocks as usize + 1)
    }

    /// The checksum of one stored file by its slot, if it exists.
    pub fn get(&self, level: usize, slot: usize, gz: bool) -> Option<u32> {
        Some(self.crc32.get(level)?.get(slot)?[usize::from(gz)])
    }
}

/// What `CURRENT.json` holds: the announced version and what it was built from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: String,
    /// [`crate::partition::fingerprint`] of the gallery snapshot, settings and code the
    /// version was built from; a restart with the same fingerprint serves it as is.
    pub fingerprint: String,
    /// The store's catalogue version at the snapshot.
    pub catalogue_version: u64,
    pub build_secs: f64,
    /// Versions announced before this one, each with when it was replaced (seconds since the
    /// epoch), newest last, at most [`MAX_REPLACED`]: a replaced version's files stay for the
    /// grace period from its replacement, across restarts too.
    #[serde(default)]
    pub replaced: Vec<(String, i64)>,
}

/// Replaced versions a manifest remembers.
pub const MAX_REPLACED: usize = 64;

impl Manifest {
    /// The manifest announcing `version` after `previous`, now.
    pub fn after(mut self, previous: Option<&Manifest>) -> Self {
        let now = now_secs();
        let mut replaced = previous.map(|p| p.replaced.clone()).unwrap_or_default();
        if let Some(p) = previous.filter(|p| p.version != self.version) {
            replaced.push((p.version.clone(), now));
        }
        replaced.retain(|(v, _)| *v != self.version);
        let extra = replaced.len().saturating_sub(MAX_REPLACED);
        replaced.drain(..extra);
        self.replaced = replaced;
        self
    }
}

/// A stored version seen when listing the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVersion {
    pub version: String,
    /// Seconds since the Unix epoch of the version's newest file.
    pub newest_secs: i64,
    /// Whether its document was written (a version without one was cut off mid-write).
    pub complete: bool,
}

/// This module's runtime. Dropping a `Runtime` waits for its threads, which panics when the
/// drop happens inside another runtime — as it does at shutdown, where the server's runtime
/// drops the last reference to the state. Its threads are let go without waiting instead; the
/// store is closed before that, and a cut-off write is what crash recovery already handles.
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for OwnRuntime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("taken only on drop")
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// An object's [`BlockStore::head_object`]: equal stamps, the same content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStamp {
    pub e_tag: Option<String>,
    /// When it was written, by the store's clock (milliseconds since the Unix epoch).
    pub modified_ms: i64,
    pub size: u64,
}

/// The partition's file store.
pub struct BlockStore {
    store: Arc<dyn ObjectStore>,
    rt: OwnRuntime,
    /// Where clients fetch blocks: `{public_url}/{version}/{level}/{block}`; `None` = this
    /// server's `/api/v1/blocks`.
    public_url: Option<String>,
    describe: String,
    /// The directory of a local store (empty directories left by a rename are removed).
    local_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for BlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockStore")
            .field("store", &self.describe)
            .field("public_url", &self.public_url)
            .finish()
    }
}

impl BlockStore {
    /// Open a store. `spec` is a local directory (a path or `file:///abs/path`, created if
    /// missing) or `s3://bucket[/prefix]`, configured from the environment as
    /// `object_store`'s `AmazonS3Builder::from_env` reads it (`AWS_ENDPOINT`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`,
    /// `AWS_SKIP_SIGNATURE`, …). A bucket needs `public_url`: this server does not proxy it.
    pub fn open(spec: &str, public_url: Option<String>) -> Result<Self> {
        Self::open_inner(spec, public_url, true)
    }

    /// A store used only for its objects ([`BlockStore::put_object`], [`BlockStore::get_object`]):
    /// the batch build's output and a replica's source (`crate::batch`), which serve no blocks
    /// and so need no public URL.
    pub fn open_objects(spec: &str) -> Result<Self> {
        Self::open_inner(spec, None, false)
    }

    fn open_inner(spec: &str, public_url: Option<String>, serves: bool) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("block-store")
            .enable_all()
            .build()?;
        let public_url = public_url.map(|u| u.trim_end_matches('/').to_string());
        if let Some(u) = &public_url {
            if !(u.starts_with("http://") || u.starts_with("https://") || u.starts_with('/')) {
                return Err(BlockStoreError::Config(format!(
                    "the public blocks URL must be http(s):// or a path, got {u:?}"
                )));
            }
        }
        let mut local_dir = None;
        let (store, describe): (Arc<dyn ObjectStore>, String) = if let Some(rest) =
            spec.strip_prefix("s3://")
        {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(BlockStoreError::Config(format!("no bucket in {spec:?}")));
            }
            if serves && public_url.is_none() {
                return Err(BlockStoreError::Config(
                    "a bucket needs --blocks-public-url (where clients fetch its objects)".into(),
                ));
            }
            // The builder's HTTP client must be created inside the runtime it will use.
            let s3 = {
                let _guard = rt.enter();
                object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()?
            };
            let store: Arc<dyn ObjectStore> = if prefix.trim_matches('/').is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(PrefixStore::new(s3, prefix.trim_matches('/')))
            };
            (store, format!("s3://{bucket}/{}", prefix.trim_matches('/')))
        } else {
            let dir = spec.strip_prefix("file://").unwrap_or(spec);
            if dir.is_empty() {
                return Err(BlockStoreError::Config("empty blocks store path".into()));
            }
            std::fs::create_dir_all(dir)?;
            local_dir = Some(std::path::PathBuf::from(dir));
            let local =
                LocalFileSystem::new_with_prefix(FsPath::new(dir))?.with_automatic_cleanup(true);
            (Arc::new(local), format!("file://{dir}"))
        };
        Ok(BlockStore {
            store,
            rt: OwnRuntime(Some(rt)),
            public_url,
            describe,
            local_dir,
        })
    }

    /// A local directory store.
    pub fn local(dir: &FsPath) -> Result<Self> {
        Self::open(&dir.to_string_lossy(), None)
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The base URL clients fetch `version`'s blocks under, given this server's own.
    pub fn blocks_url(&self, version: &str, own: &str) -> String {
        match &self.public_url {
            Some(u) => format!("{u}/{version}"),
            None => format!("{own}/{version}"),
        }
    }

    /// Whether [`BlockStore::read_file`] maps files (a local directory) rather than copying
    /// them into memory.
    pub fn is_mapped(&self) -> bool {
        self.local_dir.is_some()
    }

    /// Whether clients fetch from somewhere else than this server (which then cannot
    /// negotiate gzip for them: the plan counts uncompressed bytes).
    pub fn is_external(&self) -> bool {
        self.public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("http"))
    }

    fn block_path(version: &str, level: usize, file: LevelFile, gz: bool) -> Path {
        let ext = if gz { ".gz" } else { "" };
        Path::from(format!("{version}/{level}/{file}{ext}"))
    }

    /// Put files concurrently (each put atomic).
    fn put_all(&self, puts: Vec<(Path, Bytes)>) -> Result<()> {
        let store = Arc::clone(&self.store);
        self.rt.block_on(async move {
            futures::stream::iter(puts)
                .map(|(path, bytes)| {
                    let store = Arc::clone(&store);
                    async move { store.put(&path, PutPayload::from_bytes(bytes)).await }
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .try_for_each(|_| async { Ok(()) })
                .await
        })?;
        Ok(())
    }

    /// Write files `(file, plain, gzip)` of one level under `prefix` (a version, or a
    /// staging prefix renamed to the version by [`BlockStore::rename_prefix`] once known).
    pub fn write_blocks(
        &self,
        prefix: &str,
        level: usize,
        files: Vec<(LevelFile, Bytes, Bytes)>,
    ) -> Result<()> {
        let puts = files
            .into_iter()
            .flat_map(|(bi, raw, gz)| {
                [
                    (Self::block_path(prefix, level, bi, false), raw),
                    (Self::block_path(prefix, level, bi, true), gz),
                ]
            })
            .collect();
        self.put_all(puts)
    }

    /// Move every file under `from/` to the same name under `to/` (a local rename; copy then
    /// delete on S3). Returns how many.
    pub fn rename_prefix(&self, from: &str, to: &str) -> Result<usize> {
        let store = Arc::clone(&self.store);
        let from_dir = from.to_string();
        let (from, to) = (from.to_string(), to.to_string());
        let moved = self.rt.block_on(async move {
            let paths: Vec<Path> = store
                .list(Some(&Path::from(from.as_str())))
                .map_ok(|m| m.location)
                .try_collect()
                .await?;
            let n = paths.len();
            futures::stream::iter(paths)
                .map(|p| {
                    let store = Arc::clone(&store);
                    let rest = p.as_ref()[from.len()..].to_string();
                    let dest = Path::from(format!("{to}{rest}"));
                    async move { store.rename(&p, &dest).await }
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .try_for_each(|_| async { Ok(()) })
                .await?;
            Ok::<_, object_store::Error>(n)
        })?;
        if let Some(dir) = &self.local_dir {
            // Only empty directories are left under `from` (every file was moved).
            let left = dir.join(from_dir);
            if left.is_dir() {
                std::fs::remove_dir_all(left)?;
            }
        }
        Ok(moved)
    }

    /// Write a version's checksums, then its document (after all its block files; not yet
    /// announced).
    pub fn write_document(
        &self,
        version: &str,
        checksums: &Checksums,
        doc_json: &Bytes,
    ) -> Result<()> {
        crate::ops::failpoint::hit("blocks-written");
        let sums = serde_json::to_vec(checksums).map_err(|e| BlockStoreError::Malformed {
            what: CHECKSUMS.into(),
            err: e.to_string(),
        })?;
        self.put_all(vec![(
            Path::from(format!("{version}/{CHECKSUMS}")),
            Bytes::from(sums),
        )])?;
        self.put_all(vec![(
            Path::from(format!("{version}/{DOC}")),
            doc_json.clone(),
        )])?;
        crate::ops::failpoint::hit("document-written");
        Ok(())
    }

    /// Write every file of a version (`files[level][slot]`, slots as [`LevelFile::slot`]), then
    /// its document (not yet announced). Files already there are rewritten with the same
    /// bytes (the version is a content hash).
    pub fn write_version(
        &self,
        doc: &PartitionDoc,
        files: &[Vec<(Bytes, Bytes)>],
        checksums: &Checksums,
        doc_json: &Bytes,
    ) -> Result<()> {
        for (li, level) in files.iter().enumerate() {
            let blocks = doc
                .levels
                .get(li)
                .map_or(level.len(), |l| l.blocks as usize);
            let level: Vec<(LevelFile, Bytes, Bytes)> = level
                .iter()
                .enumerate()
                .map(|(slot, (raw, gz))| {
                    (LevelFile::of_slot(slot, blocks), raw.clone(), gz.clone())
                })
                .collect();
            self.write_blocks(&doc.version, li, level)?;
        }
        self.write_document(&doc.version, checksums, doc_json)
    }

    /// Announce a written version: the one put that makes it what a restart serves.
    pub fn announce(&self, manifest: &Manifest) -> Result<()> {
        let json = serde_json::to_vec_pretty(manifest).map_err(|e| BlockStoreError::Malformed {
            what: CURRENT.into(),
            err: e.to_string(),
        })?;
        let store = Arc::clone(&self.store);
        self.rt.block_on(async move {
            store
                .put(&Path::from(CURRENT), PutPayload::from(json))
                .await
        })?;
        Ok(())
    }

    /// The announced version and its document, if any was announced.
    pub fn load_current(&self) -> Result<Option<(Manifest, PartitionDoc, Bytes)>> {
        let store = Arc::clone(&self.store);
        let got = self.rt.block_on(async move {
            let manifest = match store.get(&Path::from(CURRENT)).await {
                Ok(r) => r.bytes().await?,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let m: Manifest = match serde_json::from_slice(&manifest) {
                Ok(m) => m,
                Err(e) => return Ok(Some(Err((CURRENT.to_string(), e.to_string())))),
            };
            let doc = store
                .get(&Path::from(format!("{}/{DOC}", m.version)))
                .await?
                .bytes()
                .await?;
            Ok(Some(Ok((m, doc))))
        })?;
        let (m, doc_json) = match got {
            None => return Ok(None),
            Some(Err((what, err))) => return Err(BlockStoreError::Malformed { what, err }),
            Some(Ok(x)) => x,
        };
        let doc: PartitionDoc =
            serde_json::from_slice(&doc_json).map_err(|e| BlockStoreError::Malformed {
                what: format!("{}/{DOC}", m.version),
                err: e.to_string(),
            })?;
        if doc.version != m.version {
            return Err(BlockStoreError::Malformed {
                what: format!("{}/{DOC}", m.version),
                err: format!("it holds version {}", doc.version),
            });
        }
        Ok(Some((m, doc, doc_json)))
    }

    /// Put one object (atomic: a local file is written aside and renamed; an S3 PUT is all or
    /// nothing).
    pub fn put_object(&self, name: &str, bytes: Bytes) -> Result<()> {
        self.put_all(vec![(Path::from(name), bytes)])
    }

    /// What identifies an object's current content without reading it (one HEAD): its ETag,
    /// last-modified time and size; `None` if there is no such object. A replica polls its
    /// store's announcement with this and reads it only when the stamp changes.
    pub fn head_object(&self, name: &str) -> Result<Option<ObjectStamp>> {
        let store = Arc::clone(&self.store);
        let path = Path::from(name);
        Ok(self.rt.block_on(async move {
            match store.head(&path).await {
                Ok(m) => Ok(Some(ObjectStamp {
                    e_tag: m.e_tag,
                    modified_ms: m.last_modified.timestamp_millis(),
                    size: m.size,
                })),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?)
    }

    /// One object, `None` if there is none.
    pub fn get_object(&self, name: &str) -> Result<Option<Bytes>> {
        let store = Arc::clone(&self.store);
        let path = Path::from(name);
        Ok(self.rt.block_on(async move {
            match store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?)
    }

    /// A version's checksums; `None` if it has none (written by older code).
    pub fn load_checksums(&self, version: &str) -> Result<Option<Checksums>> {
        self.get_json(format!("{version}/{CHECKSUMS}"))
    }

    /// A JSON object, if it exists.
    fn get_json<T: serde::de::DeserializeOwned>(&self, name: String) -> Result<Option<T>> {
        let store = Arc::clone(&self.store);
        let path = Path::from(name.as_str());
        let bytes = self.rt.block_on(async move {
            match store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        bytes
            .map(|b| {
                serde_json::from_slice(&b).map_err(|e| BlockStoreError::Malformed {
                    what: name,
                    err: e.to_string(),
                })
            })
            .transpose()
    }

    /// One stored file, plain or gzip (async: for request handlers; runs on the store's
    /// runtime).
    pub async fn read_file(
        &self,
        version: &str,
        level: usize,
        file: LevelFile,
        gz: bool,
    ) -> Result<Bytes> {
        let path = Self::block_path(version, level, file, gz);
        if let Some(dir) = &self.local_dir {
            // A local file is mapped, not read through `object_store` (which zero-fills a
            // buffer, copies the file into it and hops to this module's runtime): the response
            // is then written straight from the page cache. Mapping may wait on the disk, so
            // it runs as blocking work (in place on a multi-thread runtime: no thread hop).
            let file = dir.join(path.as_ref());
            let map = move || map_file(&file);
            let on_workers = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            return if on_workers {
                tokio::task::block_in_place(map)
            } else {
                tokio::task::spawn_blocking(map)
                    .await
                    .map_err(|e| BlockStoreError::Config(format!("read task failed: {e}")))?
            };
        }
        let store = Arc::clone(&self.store);
        let task = self
            .rt
            .spawn(async move { store.get(&path).await?.bytes().await });
        task.await
            .map_err(|e| BlockStoreError::Config(format!("read task failed: {e}")))?
            .map_err(Into::into)
    }

    /// One file and its gzip form (async: for request handlers; runs on the store's
    /// runtime).
    pub async fn read_block(
        &self,
        version: &str,
        level: usize,
        file: LevelFile,
    ) -> Result<(Bytes, Bytes)> {
        let store = Arc::clone(&self.store);
        let (raw, gz) = (
            Self::block_path(version, level, file, false),
            Self::block_path(version, level, file, true),
        );
        let task = self.rt.spawn(async move {
            let (a, b) = futures::join!(store.get(&raw), store.get(&gz));
            let (a, b) = futures::join!(a?.bytes(), b?.bytes());
            Ok::<_, object_store::Error>((a?, b?))
        });
        task.await
            .map_err(|e| BlockStoreError::Config(format!("read task failed: {e}")))?
            .map_err(Into::into)
    }

    /// Every version directory in the store, with its newest file's time.
    pub fn versions(&self) -> Result<Vec<StoredVersion>> {
        let store = Arc::clone(&self.store);
        self.rt.block_on(async move {
            let top = store.list_with_delimiter(None).await?;
            let mut out = Vec::new();
            for dir in top.common_prefixes {
                let version = dir.to_string();
                let metas: Vec<_> = store.list(Some(&dir)).try_collect().await?;
                let doc = Path::from(format!("{version}/{DOC}"));
                out.push(StoredVersion {
                    newest_secs: metas
                        .iter()
                        .map(|m| m.last_modified.timestamp())
                        .max()
                        .unwrap_or(0),
                    complete: metas.iter().any(|m| m.location == doc),
                    version,
                });
            }
            Ok(out)
        })
    }

    /// The current announcement, if there is one.
    pub fn manifest(&self) -> Result<Option<Manifest>> {
        self.get_json(CURRENT.to_string())
    }

    /// Delete every file of a version; returns how many.
    pub fn delete_version(&self, version: &str) -> Result<usize> {
        let store = Arc::clone(&self.store);
        let dir = Path::from(version);
        let n = self.rt.block_on(async move {
            let paths: Vec<Path> = store
                .list(Some(&dir))
                .map_ok(|m| m.location)
                .try_collect()
                .await?;
            let n = paths.len();
            futures::stream::iter(paths)
                .map(|p| {
                    let store = Arc::clone(&store);
                    async move { store.delete(&p).await }
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .try_for_each(|_| async { Ok(()) })
                .await?;
            Ok::<_, BlockStoreError>(n)
        })?;
        if let Some(dir) = &self.local_dir {
            // A local store keeps empty directories (of a rename, or of an aborted write).
            let left = dir.join(version);
            if left.is_dir() {
                std::fs::remove_dir_all(left)?;
            }
        }
        Ok(n)
    }
}

/// A stored block file, mapped into memory (the bytes are the page cache's; dropping the last
/// clone unmaps it). The partition keeps checked mappings while their version is served, so
/// the process's resident size counts those pages (as file pages the kernel can reclaim and
/// read again).
///
/// Architecture invariant: stored files are immutable. Every put writes a new file aside and
/// renames it into place, and a version's files are removed only by unlinking them; nothing
/// truncates or rewrites a file in place. A mapping therefore always sees the bytes it
/// mapped, even while the file is replaced or deleted (the mapping keeps its inode, so a
/// deleted version's disk space is freed when its last mapping goes). Only a process outside
/// this server truncating a file under it could fault the mapping — the same class of fault
/// as rewriting the gallery store under a running server.
fn map_file(path: &FsPath) -> Result<Bytes> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is never modified in place while mapped (the invariant above); the
    // mapping is read-only and owned by the returned `Bytes`.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file)? };
    Ok(Bytes::from_owner(map))
}

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A document with no levels (for tests of versions and storage).
    pub(crate) fn doc(version: &str) -> PartitionDoc {
        PartitionDoc {
            version: version.into(),
            gallery_size: 1,
            feature_dim: 1,
            thumb_side: 1,
            blocks_url: String::new(),
            max_share: 1.0,
            allow_full_download: true,
            coverage_k: 8,
            coverage_probes: 0,
            levels: Vec::new(),
        }
    }

    #[test]
    fn a_version_is_served_only_once_announced_and_deleted_whole() {
        let dir = std::env::temp_dir().join(format!("pm-blockstore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = BlockStore::local(&dir).unwrap();
        assert!(s.load_current().unwrap().is_none());
        let files = vec![vec![
            (Bytes::from_static(b"raw0"), Bytes::from_static(b"gz0")),
            (Bytes::from_static(b"raw1"), Bytes::from_static(b"gz1")),
        ]];
        let d = doc("abc");
        let json = Bytes::from(serde_json::to_vec(&d).unwrap());
        let refs: Vec<Vec<(&[u8], &[u8])>> = files
            .iter()
            .map(|l| l.iter().map(|(a, b)| (&a[..], &b[..])).collect())
            .collect();
        let sums = Checksums::of(&refs);
        assert_eq!(sums.get(0, 1, true), Some(crc32fast::hash(b"gz1")));
        assert_eq!(sums.get(0, 0, false), Some(crc32fast::hash(b"raw0")));
        assert_eq!(sums.get(0, 2, false), None);
        assert!(!sums.fits(&d), "the document has no levels");
        s.write_version(&d, &files, &sums, &json).unwrap();
        assert_eq!(s.load_checksums("abc").unwrap(), Some(sums));
        assert_eq!(s.load_checksums("nope").unwrap(), None);
        // Written, not announced: a restart would not serve it.
        assert!(s.load_current().unwrap().is_none());
        let m = Manifest {
            version: "abc".into(),
            fingerprint: "f".into(),
            catalogue_version: 3,
            build_secs: 0.5,
            replaced: Vec::new(),
        };
        s.announce(&m).unwrap();
        let (m2, d2, j2) = s.load_current().unwrap().unwrap();
        assert_eq!((m2, d2, j2), (m.clone(), d, json));
        assert_eq!(s.manifest().unwrap(), Some(m.clone()));
        // The next announcement remembers when this one was replaced.
        let next = Manifest {
            version: "def".into(),
            ..m.clone()
        }
        .after(Some(&m));
        assert_eq!(next.replaced.len(), 1);
        assert_eq!(next.replaced[0].0, "abc");
        assert!((next.replaced[0].1 - now_secs()).abs() < 60);
        // Coming back to a replaced version drops it from the list.
        assert!(Manifest { ..m.clone() }
            .after(Some(&next))
            .replaced
            .iter()
            .all(|(v, _)| v != "abc"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (raw, gz) = rt
            .block_on(s.read_block("abc", 0, LevelFile::Block(1)))
            .unwrap();
        assert_eq!((&raw[..], &gz[..]), (&b"raw1"[..], &b"gz1"[..]));
        assert!(rt
            .block_on(s.read_block("abc", 0, LevelFile::Block(2)))
            .is_err());
        // One file, mapped: on a current-thread runtime (a blocking task) and on a
        // multi-thread one (in place).
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        for rt in [&rt, &multi] {
            let gz = rt
                .block_on(s.read_file("abc", 0, LevelFile::Block(1), true))
                .unwrap();
            let raw = rt
                .block_on(s.read_file("abc", 0, LevelFile::Block(0), false))
                .unwrap();
            assert_eq!((&raw[..], &gz[..]), (&b"raw0"[..], &b"gz1"[..]));
            assert!(rt
                .block_on(s.read_file("abc", 0, LevelFile::Block(2), true))
                .is_err());
        }
        let v = s.versions().unwrap();
        assert_eq!(v.len(), 1);
        assert!(v[0].complete && v[0].version == "abc");
        assert!((v[0].newest_secs - now_secs()).abs() < 60);
        assert_eq!(s.delete_version("abc").unwrap(), 6);
        assert!(s.versions().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bucket_needs_a_public_url_and_urls_are_checked() {
        let e = BlockStore::open("s3://bucket/p", None).unwrap_err();
        assert!(e.to_string().contains("--blocks-public-url"), "{e}");
        let e = BlockStore::open("s3:///p", Some("http://x".into())).unwrap_err();
        assert!(e.to_string().contains("no bucket"), "{e}");
        let dir = std::env::temp_dir().join(format!("pm-blockstore-u-{}", std::process::id()));
        let e = BlockStore::open(dir.to_str().unwrap(), Some("ftp://x".into())).unwrap_err();
        assert!(e.to_string().contains("http"), "{e}");
        let s = BlockStore::open(dir.to_str().unwrap(), Some("https://cdn/x/".into())).unwrap();
        assert_eq!(s.blocks_url("v1", "/api/v1/blocks"), "https://cdn/x/v1");
        assert!(s.is_external());
        let s = BlockStore::local(&dir).unwrap();
        assert_eq!(s.blocks_url("v1", "/api/v1/blocks"), "/api/v1/blocks/v1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
