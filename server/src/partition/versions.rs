//! The served versions: the current one, the ones it replaced for their grace period, the
//! expired ones remembered (410, not 404), and the store's garbage collection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use axum::body::Bytes;
use shared::api::PartitionDoc;

use super::blockstore::{BlockStore, LevelFile, Manifest};
use super::build::*;
use super::published::*;
use crate::item::GalleryItem;
use crate::ops::mapped::Pages;

/// Numbers staging prefixes of this process's builds.
static STAGING_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The partition part of `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartitionStatus {
    pub version: String,
    /// The catalogue version the partition was built from.
    pub catalogue_version: u64,
    pub gallery_size: usize,
    /// B of each served level, in order (1 = the whole gallery).
    pub levels: Vec<u32>,
    pub build_secs: f64,
    /// All block files, uncompressed and gzip.
    pub bytes: u64,
    pub transfer_bytes: u64,
    /// Replaced versions still served (grace period).
    pub retired: usize,
    /// Bytes of block files kept mapped, all versions (they count in the resident size; at
    /// most the blocks' memory budget).
    pub kept_map_bytes: u64,
}

/// The served partitions: the current one and, for their grace period, the ones it replaced;
/// and the store they are written to.
#[derive(Debug)]
pub struct Partitions {
    pub settings: PartitionSettings,
    store: Option<Arc<BlockStore>>,
    current: RwLock<Option<Arc<Published>>>,
    history: Mutex<History>,
    /// Versions being written to the store (not yet announced): garbage collection must not
    /// delete them.
    in_flight: Mutex<Vec<String>>,
}

/// Why a block (or centroids) file could not be served.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error("partition {version} has no block {level}/{block} ({levels} levels)")]
    Missing {
        version: String,
        level: usize,
        block: LevelFile,
        levels: usize,
    },
    #[error("reading block {level}/{block} of {version}: {err}")]
    Store {
        version: String,
        level: usize,
        block: LevelFile,
        err: String,
    },
}

#[derive(Debug, Default)]
struct History {
    /// A version answerable by name before it is current (a replica's next gallery version,
    /// prepared ahead of the moment the fleet switches: `Partitions::stage`).
    staged: Option<Arc<Published>>,
    /// Replaced versions still served, oldest first, with when they expire.
    retired: VecDeque<(Arc<Published>, Instant)>,
    /// Versions no longer served, newest last.
    gone: VecDeque<String>,
}

impl History {
    fn forget(&mut self, version: String) {
        if !self.gone.contains(&version) {
            self.gone.push_back(version);
            while self.gone.len() > MAX_GONE {
                self.gone.pop_front();
            }
        }
    }

    fn prune(&mut self, now: Instant) {
        while self.retired.len() > MAX_RETIRED
            || self.retired.front().is_some_and(|(_, exp)| *exp <= now)
        {
            if let Some((p, _)) = self.retired.pop_front() {
                self.forget(p.doc.version.clone());
            }
        }
    }
}

/// Version strings echoed in messages are cut to this many characters.
const ECHO_MAX: usize = shared::params::limits::MAX_ECHO_CHARS;

impl Partitions {
    pub fn new(settings: PartitionSettings, store: Option<Arc<BlockStore>>) -> Self {
        Partitions {
            settings,
            store,
            current: RwLock::new(None),
            history: Mutex::new(History::default()),
            in_flight: Mutex::new(Vec::new()),
        }
    }

    pub fn store(&self) -> Option<&BlockStore> {
        self.store.as_deref()
    }

    /// Build the partition of a gallery snapshot (with this store's URLs).
    pub fn build(
        &self,
        items: &[Arc<GalleryItem>],
        anchor_features: &[Vec<f32>],
        seed: u64,
        catalogue_version: u64,
        inputs: &Pages,
    ) -> Result<Published, PartitionError> {
        // A staging prefix for files streamed before the version is known; kept from garbage
        // collection while the build runs, and its result (the version) until published.
        let staging = format!(
            "staging-{catalogue_version}-{}-{}",
            std::process::id(),
            STAGING_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.hold(&staging);
        let built = build(
            items,
            anchor_features,
            seed,
            catalogue_version,
            &self.settings,
            BuildIo {
                store: self.store(),
                staging: Some(&staging),
                inputs,
            },
        );
        if let Ok(p) = &built {
            if p.written {
                self.hold(&p.doc.version);
            }
        }
        self.release(&staging);
        built
    }

    /// Keep `prefix` from garbage collection (a version or staging prefix being written).
    fn hold(&self, prefix: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(prefix.to_string());
    }

    /// Undo every [`Partitions::hold`] of `prefix`.
    fn release(&self, prefix: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|v| v != prefix);
    }

    /// Write a built version to the store, then announce it there, then make it current here
    /// (in that order: what a restart or a bucket's client sees is always a whole version).
    /// Returns false, keeping the old version, if the store failed, or if `new` was built from
    /// an older catalogue than the current one (a slower rebuild must not undo a newer one).
    pub fn persist_and_publish(&self, new: Published) -> Result<bool, PartitionError> {
        let version = new.doc.version.clone();
        let done = self.persist_and_publish_inner(new);
        self.release(&version);
        done
    }

    fn persist_and_publish_inner(&self, mut new: Published) -> Result<bool, PartitionError> {
        if let Some(cur) = self.current() {
            if new.catalogue_version < cur.catalogue_version {
                tracing::info!(
                    built = new.catalogue_version,
                    current = cur.catalogue_version,
                    "partition: a newer catalogue is already published; dropping this build"
                );
                return Ok(false);
            }
        }
        if let Some(store) = &self.store {
            let files =
                if new.written {
                    None
                } else {
                    Some(new.files_for_store().ok_or_else(|| {
                        PartitionError::Invalid("a built version lacks files".into())
                    })?)
                };
            let canonical: PartitionDoc = serde_json::from_slice(&new.canonical_json)
                .map_err(|e| PartitionError::Invalid(e.to_string()))?;
            self.hold(&new.doc.version);
            let t = Instant::now();
            let sums = new
                .checksums
                .as_ref()
                .ok_or_else(|| PartitionError::Invalid("a built version lacks checksums".into()))?;
            let written = match &files {
                Some(files) => store.write_version(&canonical, files, sums, &new.canonical_json),
                None => store.write_document(&canonical.version, sums, &new.canonical_json),
            }
            .and_then(|()| {
                // A damaged announcement is replaced (it names nothing servable).
                let previous = store.manifest().unwrap_or(None);
                let m = Manifest {
                    version: new.doc.version.clone(),
                    fingerprint: new.fingerprint.clone(),
                    catalogue_version: new.catalogue_version,
                    build_secs: new.build_secs,
                    replaced: Vec::new(),
                };
                store.announce(&m.after(previous.as_ref()))
            });
            written?;
            tracing::info!(
                version = %new.doc.version,
                store = store.describe(),
                secs = t.elapsed().as_secs_f64(),
                "partition written and announced"
            );
            self.fit_memory(&mut new);
        }
        self.publish(new);
        Ok(true)
    }

    /// The version the store announced, ready to serve (block files are read on first
    /// request), if there is one.
    pub fn load_announced(&self) -> Result<Option<Published>, PartitionError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let p = Self::load_current_of(store)?;
        Ok(p.map(|mut p| {
            self.fit_memory(&mut p);
            p
        }))
    }

    /// The version announced in another store (a replica's next gallery version, in a prefix
    /// of its own), ready to serve: its files are read from `store` (checked as the own
    /// store's are). An error if nothing is announced there.
    pub fn load_from(&self, store: Arc<BlockStore>) -> Result<Published, PartitionError> {
        let mut p = Self::load_current_of(&store)?.ok_or_else(|| {
            PartitionError::Invalid(format!("{} announces no partition", store.describe()))
        })?;
        p.store = Some(store);
        self.fit_memory(&mut p);
        Ok(p)
    }

    fn load_current_of(store: &BlockStore) -> Result<Option<Published>, PartitionError> {
        let Some((m, doc, _)) = store.load_current()? else {
            return Ok(None);
        };
        // Without usable checksums every block read is SHA-256-checked instead.
        let checksums = match store.load_checksums(&m.version) {
            Ok(Some(c)) if c.fits(&doc) => Some(c),
            Ok(Some(_)) => {
                tracing::warn!(version = %m.version, "partition: stored checksums do not fit the document; ignored");
                None
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(version = %m.version, error = %e, "partition: stored checksums unreadable; ignored");
                None
            }
        };
        let p = assemble(
            doc,
            None,
            checksums,
            Some(store),
            m.catalogue_version,
            m.fingerprint,
            m.build_secs,
        )?;
        Ok(Some(p))
    }

    /// Drop a version's held files (and hold none later) if it exceeds the memory budget; its
    /// blocks are then read from the store on each request.
    fn fit_memory(&self, p: &mut Published) {
        let (raw, gz) = p.total_bytes();
        if raw + gz > self.settings.cache_bytes {
            for slot in p.files.iter_mut().flatten() {
                slot.take();
            }
            p.keep = false;
            tracing::info!(
                version = %p.doc.version,
                mib = (raw + gz) >> 20,
                budget_mib = self.settings.cache_bytes >> 20,
                "partition: blocks are read from the store per request (over the memory budget)"
            );
        }
    }

    /// One block or centroids file, plain or gzip (`gz`): held in memory; else, for a version held once
    /// read, both files read from the store, checked against the document's SHA-256 and
    /// kept; else the one file read from the store (SHA-256-checked on every read when the
    /// version has no checksums).
    ///
    /// With checksums, the file is checked against its CRC-32 when first read; a local
    /// store's file is read by mapping it, and the checked mapping is kept and sent from
    /// then on (the bytes are the page cache's: no copy, no per-request system call) while the
    /// kept mappings fit the memory budget ([`KeptMaps::reserve`]). Stored
    /// files are immutable (the block store's invariant), so a kept mapping always holds the
    /// bytes checked. A damaged stored file is an error, never served; and whatever is sent,
    /// every client checks each block against the document's SHA-256 (held in this server's
    /// memory) before using it.
    pub async fn block(
        &self,
        p: &Published,
        level: usize,
        block: LevelFile,
        gz: bool,
    ) -> Result<Bytes, BlockError> {
        self.read(p, level, block, gz, true).await
    }

    /// [`Partitions::block`] for a one-off read (the PIR build reads every block of a level
    /// once, for its ids): a mapping is not kept, so those pages leave the server's resident
    /// size when the caller drops the bytes.
    pub async fn block_once(
        &self,
        p: &Published,
        level: usize,
        block: LevelFile,
        gz: bool,
    ) -> Result<Bytes, BlockError> {
        self.read(p, level, block, gz, false).await
    }

    async fn read(
        &self,
        p: &Published,
        level: usize,
        block: LevelFile,
        gz: bool,
        keep_map: bool,
    ) -> Result<Bytes, BlockError> {
        let missing = || BlockError::Missing {
            version: p.doc.version.clone(),
            level,
            block,
            levels: p.levels(),
        };
        let pick = |f: &BlockFile| if gz { f.gzip.clone() } else { f.raw.clone() };
        match p.cached(level, block) {
            None => return Err(missing()),
            Some(Some(f)) => return Ok(pick(f)),
            Some(None) => {}
        }
        let fail = |err: String| BlockError::Store {
            version: p.doc.version.clone(),
            level,
            block,
            err,
        };
        let store = p
            .store
            .as_ref()
            .or(self.store.as_ref())
            .ok_or_else(|| fail("no store".into()))?;
        let version = &p.doc.version;
        let slot = p.slot(level, block).ok_or_else(missing)?;
        if let (false, Some(sums)) = (p.keep, &p.checksums) {
            if let Some(kept) = p.mapped[level][slot][usize::from(gz)].get() {
                return Ok(kept.clone());
            }
            let want = sums.get(level, slot, gz).ok_or_else(missing)?;
            let bytes = store
                .read_file(version, level, block, gz)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if crc32fast::hash(&bytes) != want {
                return Err(fail(format!("stored bytes do not match CRC-32 {want:08x}")));
            }
            // A bucket's bytes are a copy in this process's memory: not kept. Nor is a mapping
            // of a one-off read, or past the bounds (sent, then unmapped).
            let len = bytes.len();
            if !store.is_mapped() || !keep_map || !KEPT_MAPS.reserve(len, self.settings.cache_bytes)
            {
                return Ok(bytes);
            }
            let mut kept = false;
            let sent = p.mapped[level][slot][usize::from(gz)]
                .get_or_init(|| {
                    kept = true;
                    bytes
                })
                .clone();
            if !kept {
                KEPT_MAPS.release(1, len as u64);
            }
            return Ok(sent);
        }
        let (raw, gzip) = store
            .read_block(version, level, block)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let want = p.hash(level, block).ok_or_else(missing)?;
        if publish::blocks::hash_hex(&raw) != want {
            return Err(fail(format!("stored bytes do not match SHA-256 {want}")));
        }
        // The gzip file too, where the version has checksums (else the client's SHA-256 check
        // of the inflated bytes is its only check).
        if let Some(sum) = p.checksums.as_ref().and_then(|c| c.get(level, slot, true)) {
            if crc32fast::hash(&gzip) != sum {
                return Err(fail(format!(
                    "stored gzip bytes do not match CRC-32 {sum:08x}"
                )));
            }
        }
        let f = BlockFile { raw, gzip };
        if p.keep {
            Ok(pick(p.files[level][slot].get_or_init(|| f)))
        } else {
            Ok(pick(&f))
        }
    }

    /// Delete the store's copies of versions that are neither current, retired nor being
    /// written, and whose newest file is older than the grace period (so a client that
    /// fetched the document of a version just replaced can still finish). Returns the
    /// versions deleted. Safe to run at any time; errors are logged.
    pub fn collect_garbage(&self) -> Vec<String> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let live: Vec<String> = {
            let cur = self.current();
            let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
            cur.iter()
                .map(|p| p.doc.version.clone())
                .chain(h.retired.iter().map(|(p, _)| p.doc.version.clone()))
                .chain(h.staged.iter().map(|p| p.doc.version.clone()))
                .chain(
                    self.in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .cloned(),
                )
                .collect()
        };
        let versions = match store.versions() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "partition: listing the block store failed");
                return Vec::new();
            }
        };
        let cutoff =
            crate::partition::blockstore::now_secs() - self.settings.grace.as_secs() as i64;
        // When each version was replaced (also before a restart, which forgets the retired
        // list); a version never announced counts from its newest file.
        let replaced = match store.manifest() {
            Ok(m) => m.map(|m| m.replaced).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "partition: reading the announcement failed");
                return Vec::new();
            }
        };
        let mut deleted = Vec::new();
        for v in versions {
            let since = replaced
                .iter()
                .rev()
                .find(|(r, _)| *r == v.version)
                .map_or(v.newest_secs, |&(_, t)| t.max(v.newest_secs));
            if live.contains(&v.version) || since > cutoff {
                continue;
            }
            match store.delete_version(&v.version) {
                Ok(files) => {
                    tracing::info!(version = %v.version, files, complete = v.complete, "partition: expired version deleted from the store");
                    deleted.push(v.version);
                }
                Err(e) => {
                    tracing::warn!(version = %v.version, error = %e, "partition: deleting an expired version failed")
                }
            }
        }
        deleted
    }

    /// The current partition, if one was built.
    pub fn current(&self) -> Option<Arc<Published>> {
        let cur = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .prune(Instant::now());
        cur
    }

    /// What `/status` shows.
    pub fn status(&self) -> Option<PartitionStatus> {
        let p = self.current()?;
        let (bytes, transfer_bytes) = p.total_bytes();
        Some(PartitionStatus {
            version: p.doc.version.clone(),
            catalogue_version: p.catalogue_version,
            gallery_size: p.doc.gallery_size,
            levels: p.doc.levels.iter().map(|l| l.blocks).collect(),
            build_secs: p.build_secs,
            bytes,
            transfer_bytes,
            retired: self.retired_count(),
            kept_map_bytes: KEPT_MAPS.bytes(),
        })
    }

    /// Versions still served besides the current one.
    pub fn retired_count(&self) -> usize {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retired
            .len()
    }

    /// Make `new` current; the replaced version (if different) is served for the grace period.
    pub fn publish(&self, new: Published) {
        self.publish_arc(Arc::new(new));
    }

    /// Make `new` answerable by name (`get`, hence every version-named URL) without making it
    /// current: what a replica does with the next gallery version once it is whole (fetched,
    /// checked, its PIR databases built), until the moment every replica switches. A search
    /// that starts on a replica that has switched may then send its next request to one that
    /// has not, and be answered. One version at a time: a new one replaces the last staged.
    pub fn stage(&self, new: Published) {
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.gone.retain(|v| *v != new.doc.version);
        h.staged = Some(Arc::new(new));
    }

    /// Make the staged version `version` current ([`Partitions::publish`]); false if it is not
    /// the one staged.
    pub fn promote(&self, version: &str) -> bool {
        let staged = {
            let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
            match h.staged.take() {
                Some(p) if p.doc.version == version => p,
                other => {
                    h.staged = other;
                    return false;
                }
            }
        };
        self.publish_arc(staged);
        true
    }

    fn publish_arc(&self, new: Arc<Published>) {
        // History first, then current (the only place both are held): a concurrent `get` that
        // no longer finds the old version current finds it retired.
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let old = self
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(Arc::clone(&new));
        h.retired.retain(|(p, _)| p.doc.version != new.doc.version);
        h.gone.retain(|v| *v != new.doc.version);
        if h.staged
            .as_ref()
            .is_some_and(|s| s.doc.version == new.doc.version)
        {
            h.staged = None;
        }
        let Some(old) = old.filter(|o| o.doc.version != new.doc.version) else {
            return;
        };
        let now = Instant::now();
        h.retired
            .push_back((Arc::clone(&old), now + self.settings.grace));
        h.prune(now);
        drop(h);
        // Its clients move to the new version: its PIR files' pages leave the resident set
        // now instead of staying counted for the grace period (a late request reads them back
        // from the files). After the lock: unmapping gigabytes of pages takes a while, and
        // requests for retired versions wait on that lock.
        old.release_pir_pages();
    }

    /// After a PIR answer from `p`: if it is no longer current (a late request in its grace
    /// period, from a client that has not yet moved on), its files' pages leave the resident
    /// set again, as at the swap — else a few late searches would keep both versions' files
    /// resident for the whole grace period (4.0 instead of 2.0 GB at 1,000,000 items). A
    /// concurrent late answer reads them back from the files: slower, the same bytes.
    pub fn after_answer(&self, p: &Published) {
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|c| c.doc.version == p.doc.version);
        if !current {
            p.release_pir_pages();
        }
    }

    /// The partition with this version, if it is still served.
    pub fn get(&self, version: &str) -> Result<Arc<Published>, VersionError> {
        let cur = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(VersionError::Unavailable)?;
        if cur.doc.version == version {
            return Ok(cur);
        }
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.prune(Instant::now());
        if let Some((p, _)) = h.retired.iter().find(|(p, _)| p.doc.version == version) {
            return Ok(Arc::clone(p));
        }
        if let Some(p) = h.staged.as_ref().filter(|p| p.doc.version == version) {
            return Ok(Arc::clone(p));
        }
        let asked: String = version.chars().take(ECHO_MAX).collect();
        let current = cur.doc.version.clone();
        if h.gone.iter().any(|v| v == version) {
            Err(VersionError::Gone { asked, current })
        } else {
            Err(VersionError::Unknown { asked, current })
        }
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::Duration;

    use super::*;

    fn fake(version: &str) -> Published {
        Published {
            doc: crate::partition::blockstore::tests::doc(version),
            doc_json: Bytes::new(),
            doc_gzip: Bytes::new(),
            doc_etag: quoted(version),
            canonical_json: Bytes::new(),
            files: Vec::new(),
            keep: true,
            checksums: None,
            mapped: Vec::new(),
            written: false,
            pir: OnceLock::new(),
            catalogue_version: 0,
            fingerprint: String::new(),
            build_secs: 0.0,
            store: None,
        }
    }

    #[test]
    fn versions_are_served_then_gone_and_unknown_ones_are_told_apart() {
        let p = Partitions::new(
            PartitionSettings {
                grace: Duration::from_millis(200),
                ..Default::default()
            },
            None,
        );
        assert_eq!(p.get("a").unwrap_err(), VersionError::Unavailable);
        p.publish(fake("a"));
        assert!(p.get("a").is_ok());
        p.publish(fake("b"));
        // In the grace period both are served.
        assert!(p.get("a").is_ok() && p.get("b").is_ok());
        assert!(
            matches!(p.get("zz"), Err(VersionError::Unknown { ref current, .. }) if current == "b")
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            matches!(p.get("a"), Err(VersionError::Gone { ref current, .. }) if current == "b")
        );
        // Republishing the same version retires nothing.
        p.publish(fake("b"));
        assert_eq!(p.retired_count(), 0);
        // A version that comes back (same gallery again) is current, not gone.
        p.publish(fake("a"));
        assert!(p.get("a").is_ok());
    }

    #[test]
    fn a_staged_version_is_answered_by_name_and_promoted_with_the_old_one_kept() {
        let p = Partitions::new(PartitionSettings::default(), None);
        p.publish(fake("a"));
        p.stage(fake("b"));
        // Answerable by name, not current.
        assert!(p.get("b").is_ok());
        assert_eq!(p.current().unwrap().doc.version, "a");
        assert!(!p.promote("c"), "only the staged version is promoted");
        assert!(
            p.get("b").is_ok(),
            "a failed promotion keeps the staged one"
        );
        assert!(p.promote("b"));
        assert_eq!(p.current().unwrap().doc.version, "b");
        // The old version serves its searches in flight for the grace period.
        assert!(p.get("a").is_ok());
        assert_eq!(p.retired_count(), 1);
        assert!(!p.promote("b"), "nothing is staged any more");
    }

    #[test]
    fn retired_versions_are_bounded() {
        let p = Partitions::new(PartitionSettings::default(), None);
        for i in 0..10 {
            p.publish(fake(&format!("v{i}")));
        }
        assert_eq!(p.retired_count(), MAX_RETIRED);
        assert!(matches!(p.get("v0"), Err(VersionError::Gone { .. })));
        assert!(p.get("v8").is_ok());
        let long = "x".repeat(10_000);
        match p.get(&long) {
            Err(VersionError::Unknown { asked, .. }) => assert_eq!(asked.len(), ECHO_MAX),
            other => panic!("{other:?}"),
        }
    }
}
