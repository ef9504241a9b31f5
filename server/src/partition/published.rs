//! A partition version as served: the document, its block files (held, mapped or read on
//! first request) and their ETags; the operator's settings and the errors of serving.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderValue;
use publish::publish::{gzip, gzip_at, FAST_GZIP_ABOVE};
use shared::api::PartitionDoc;

use super::blockstore::{BlockStore, BlockStoreError, Checksums, LevelFile};

/// Where clients fetch blocks: `{BLOCKS_PREFIX}/{version}/{level}/{block}`, and each level's
/// centroids: `{BLOCKS_PREFIX}/{version}/{level}/centroids`.
pub const BLOCKS_PREFIX: &str = "/api/v1/blocks";
/// Replaced versions kept in memory at most, whatever the grace: each holds every block file
/// (about 210 MB at 10,000 items), so this bounds memory when the gallery changes often.
pub const MAX_RETIRED: usize = 2;
/// Expired version strings remembered (to answer 410 rather than 404).
pub const MAX_GONE: usize = 256;
/// Mapped block files kept at most, over all versions: each is one memory map, and the kernel
/// allows a process 65,530 (`vm.max_map_count`). Both files of every block of a 1,000,000-item
/// version are 15,872. Beyond this, a file is mapped per request.
pub const MAX_KEPT_MAPS: usize = 16_384;
/// The mapped block files kept now (all versions): how many, and their bytes.
pub(super) struct KeptMaps {
    count: AtomicUsize,
    bytes: AtomicU64,
}

pub(super) static KEPT_MAPS: KeptMaps = KeptMaps {
    count: AtomicUsize::new(0),
    bytes: AtomicU64::new(0),
};

impl KeptMaps {
    /// Reserves room for keeping one more mapping of `len` bytes: false (nothing reserved)
    /// past [`MAX_KEPT_MAPS`] or past `budget` bytes of kept mappings. A kept mapping was
    /// populated, so its pages count in the server's resident size for as long as it is kept:
    /// the bytes bound holds that to the operator's memory budget for blocks
    /// (`--blocks-cache-mib`) however many block files clients ask for.
    pub(super) fn reserve(&self, len: usize, budget: u64) -> bool {
        let len = len as u64;
        let count = self.count.fetch_add(1, Ordering::Relaxed);
        let bytes = self.bytes.fetch_add(len, Ordering::Relaxed);
        if count >= MAX_KEPT_MAPS || bytes + len > budget {
            self.release(1, len);
            return false;
        }
        true
    }

    /// Bytes of the mappings kept now.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Undoes [`KeptMaps::reserve`] for `count` mappings of `bytes` in all.
    pub(super) fn release(&self, count: usize, bytes: u64) {
        self.count.fetch_sub(count, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What the operator sets (flags of the `server` binary).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionSettings {
    /// The largest expected share of the gallery one search may download, in (0, 1].
    pub max_share: f64,
    /// Whether the whole gallery is published as one block (level 0).
    pub allow_full_download: bool,
    /// How long a replaced version stays served.
    pub grace: Duration,
    /// A version whose block files (plain + gzip) exceed this many bytes is not held in
    /// memory: a request's block file is read from the block store (and checked).
    pub cache_bytes: u64,
    /// PIR: each thumbnail record also carries its item's features, so clients check the
    /// hintless ranking's scores of the items they are returned (records 1.4× as large).
    pub verified_scores: bool,
    /// PIR: thumbnail records coded to this many bytes (`publish::thumbcode`)
    /// whatever the gallery's size; `None`: as `publish::pir::doc::thumbs_plan` decides.
    pub thumb_code_bytes: Option<usize>,
    /// PIR: a local directory the hintless ranking's planes and packing plans, the ranking
    /// table and the public files are written to and mapped from (each file unlinked once
    /// mapped), so they are file pages the kernel can reclaim rather than the process's own
    /// memory (about 2.6 GB at 1,000,000 items); `None` holds them in memory.
    /// `AppState::open_with` puts it beside the gallery store when none is given.
    pub pir_dir: Option<std::path::PathBuf>,
    /// PIR: this process is row shard `i` of `S` (`--shard-rows i/S`, `pir::shard`): it holds
    /// only its slice of every database's rows (and of the score plans' switch steps) and
    /// answers parts that a front (`server front`) combines; `None`: whole databases, whole
    /// answers.
    pub shard_rows: Option<crate::ops::slice::Shard>,
}

impl Default for PartitionSettings {
    fn default() -> Self {
        PartitionSettings {
            max_share: publish::publish::DEFAULT_MAX_SHARE,
            allow_full_download: true,
            grace: Duration::from_secs(600),
            cache_bytes: 1 << 30,
            verified_scores: false,
            thumb_code_bytes: None,
            pir_dir: None,
            shard_rows: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("partition: {0}")]
    Shared(#[from] shared::Error),
    #[error("partition: {0}")]
    Invalid(String),
    #[error("partition: {0}")]
    Store(#[from] BlockStoreError),
}

/// Why a version cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("partition version {asked} is no longer served; the current version is {current}")]
    Gone { asked: String, current: String },
    #[error("unknown partition version {asked}; the current version is {current}")]
    Unknown { asked: String, current: String },
    #[error("no partition is published (the gallery is too small to cut into blocks)")]
    Unavailable,
}

/// One block (or centroids) file, ready to send.
#[derive(Debug, Clone)]
pub struct BlockFile {
    pub raw: Bytes,
    pub gzip: Bytes,
}

/// A partition version: the document as served and every block file (held, or read from the
/// store on first request).
#[derive(Debug)]
pub struct Published {
    /// The document as served (`blocks_url` says where this server's clients fetch blocks).
    pub doc: PartitionDoc,
    pub doc_json: Bytes,
    pub doc_gzip: Bytes,
    /// `"<version>"`.
    pub doc_etag: HeaderValue,
    /// The document as stored: `blocks_url` empty, gzip transfer sizes (see [`served_doc`]).
    pub canonical_json: Bytes,
    /// `files[level][slot]`, levels as in `doc.levels`, slots as [`LevelFile::slot`] (the
    /// blocks, then the centroids); empty slots are read from the store.
    pub(super) files: Vec<Vec<OnceLock<BlockFile>>>,
    /// Whether a block read from the store is kept (the version fits the memory budget).
    pub(super) keep: bool,
    /// CRC-32 of every stored file (computed when built, or read with the version); `None`
    /// for a stored version written without them (its blocks are SHA-256-checked per read).
    pub(super) checksums: Option<Checksums>,
    /// `[level][slot][plain, gzip]`: a stored file of a local store, mapped and checked
    /// against its CRC-32 the first time it was sent (a response clones a reference count).
    pub(super) mapped: Vec<Vec<[OnceLock<Bytes>; 2]>>,
    /// The block files are already in the store under the version (streamed while built):
    /// persisting writes only the document.
    pub(super) written: bool,
    /// The version's PIR databases, once built (they live and expire with the version).
    pub pir: OnceLock<Arc<super::pir::PirServe>>,
    /// The catalogue version the gallery snapshot had.
    pub catalogue_version: u64,
    /// [`fingerprint`] of what it was built from.
    pub fingerprint: String,
    pub build_secs: f64,
    /// The store this version's files are read from when it is not the partitions' own (a
    /// replica's next gallery version lives in a prefix of its own: `Partitions::load_from`).
    pub(super) store: Option<Arc<BlockStore>>,
}

impl Drop for Published {
    fn drop(&mut self) {
        let kept: Vec<usize> = self
            .mapped
            .iter()
            .flatten()
            .flatten()
            .filter_map(|m| m.get().map(Bytes::len))
            .collect();
        KEPT_MAPS.release(kept.len(), kept.iter().map(|&l| l as u64).sum());
    }
}

impl Published {
    pub fn version(&self) -> &str {
        &self.doc.version
    }

    /// Its PIR files' pages leave the resident set (`ops::mapped::Pages::release`): when it is
    /// replaced, and after each late answer from it.
    pub fn release_pir_pages(&self) {
        if let Some(pir) = self.pir.get() {
            pir.pages.release();
        }
    }

    pub fn levels(&self) -> usize {
        self.files.len()
    }

    /// The slot of `file` at `level`, if both exist.
    pub fn slot(&self, level: usize, file: LevelFile) -> Option<usize> {
        file.slot(self.doc.levels.get(level)?.blocks as usize)
    }

    /// Whether the file exists, and its bytes if already held.
    pub fn cached(&self, level: usize, file: LevelFile) -> Option<Option<&BlockFile>> {
        let slot = self.slot(level, file)?;
        Some(self.files.get(level)?.get(slot)?.get())
    }

    /// The SHA-256 (hex) the document lists for a file, if it exists.
    pub fn hash(&self, level: usize, file: LevelFile) -> Option<&str> {
        let l = self.doc.levels.get(level)?;
        match file {
            LevelFile::Block(b) => l.hashes.get(b).map(String::as_str),
            LevelFile::Centroids => Some(&l.centroids_hash),
        }
    }

    /// A file's strong ETag (`"<sha256 of its plain file>"`), if the file exists.
    pub fn etag(&self, level: usize, file: LevelFile) -> Option<HeaderValue> {
        Some(quoted(self.hash(level, file)?))
    }

    /// Uncompressed and gzip bytes of all block files (from the document: the same whether
    /// the files are held or still in the store); the centroids files count in the first.
    pub fn total_bytes(&self) -> (u64, u64) {
        // The canonical sizes: `doc.levels[..].transfer_bytes` may count a bucket's raw bytes.
        let canonical: PartitionDoc =
            serde_json::from_slice(&self.canonical_json).unwrap_or_else(|_| self.doc.clone());
        canonical.levels.iter().fold((0, 0), |(r, g), l| {
            (
                r + l.bytes.iter().sum::<u64>() + l.centroids_bytes,
                g + l.transfer_bytes.iter().sum::<u64>(),
            )
        })
    }

    /// The version as the store holds it: the canonical document, every file's bytes.
    pub(super) fn files_for_store(&self) -> Option<Vec<Vec<(Bytes, Bytes)>>> {
        self.files
            .iter()
            .map(|l| {
                l.iter()
                    .map(|f| f.get().map(|f| (f.raw.clone(), f.gzip.clone())))
                    .collect()
            })
            .collect()
    }
}

/// The document as clients of this server see it: blocks fetched from `store`'s public URL
/// (or this server), and, when that is a bucket that sends files uncompressed, transfer sizes
/// equal to the file sizes (so a plan counts the bytes that really cross the wire).
pub fn served_doc(canonical: &PartitionDoc, store: Option<&BlockStore>) -> PartitionDoc {
    let mut doc = canonical.clone();
    doc.blocks_url = match store {
        Some(s) => s.blocks_url(&doc.version, BLOCKS_PREFIX),
        None => format!("{BLOCKS_PREFIX}/{}", doc.version),
    };
    if store.is_some_and(BlockStore::is_external) {
        for l in &mut doc.levels {
            l.transfer_bytes = l.bytes.clone();
        }
    }
    doc
}

/// Assemble a [`Published`] from the canonical document and (optionally) the files.
pub(super) fn assemble(
    canonical: PartitionDoc,
    files: Option<Vec<Vec<BlockFile>>>,
    checksums: Option<Checksums>,
    store: Option<&BlockStore>,
    catalogue_version: u64,
    fingerprint: String,
    build_secs: f64,
) -> Result<Published, PartitionError> {
    publish::plan::validate_doc(&canonical)?;
    let json = |d: &PartitionDoc| {
        serde_json::to_vec(d)
            .map(Bytes::from)
            .map_err(|e| PartitionError::Invalid(e.to_string()))
    };
    let doc = served_doc(&canonical, store);
    let doc_json = json(&doc)?;
    let checksums = match &files {
        Some(files) => Some(Checksums::of(
            &files
                .iter()
                .map(|l| l.iter().map(|f| (&f.raw[..], &f.gzip[..])).collect())
                .collect::<Vec<Vec<_>>>(),
        )),
        None => checksums,
    };
    let slots: Vec<Vec<OnceLock<BlockFile>>> = match files {
        Some(files) => files
            .into_iter()
            .map(|l| l.into_iter().map(OnceLock::from).collect())
            .collect(),
        None => canonical
            .levels
            .iter()
            .map(|l| (0..=l.blocks).map(|_| OnceLock::new()).collect())
            .collect(),
    };
    Ok(Published {
        doc_etag: quoted(&doc.version),
        // Level 1 for large galleries, as their blocks (the document of 1,000,000 items, 6.8 MB
        // with its centroids: 0.1 s instead of 0.9 s at every start).
        doc_gzip: Bytes::from(if doc.gallery_size > FAST_GZIP_ABOVE {
            gzip_at(&doc_json, 1)
        } else {
            gzip(&doc_json)
        }),
        doc_json,
        canonical_json: json(&canonical)?,
        doc,
        files: slots,
        keep: true,
        mapped: canonical
            .levels
            .iter()
            .map(|l| (0..=l.blocks).map(|_| Default::default()).collect())
            .collect(),
        checksums,
        written: false,
        pir: OnceLock::new(),
        catalogue_version,
        fingerprint,
        build_secs,
        store: None,
    })
}

pub(super) fn quoted(s: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{s}\"")).expect("hex digits are a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_mappings_stay_within_the_byte_budget_and_the_count() {
        let kept = KeptMaps {
            count: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
        };
        assert!(kept.reserve(600, 1_000));
        assert!(
            !kept.reserve(500, 1_000),
            "1,100 bytes would pass the budget"
        );
        assert!(kept.reserve(400, 1_000), "a refusal reserves nothing");
        assert!(!kept.reserve(1, 1_000));
        kept.release(1, 600);
        assert!(
            kept.reserve(600, 1_000),
            "a released mapping frees its bytes"
        );
        let many = KeptMaps {
            count: AtomicUsize::new(MAX_KEPT_MAPS - 1),
            bytes: AtomicU64::new(0),
        };
        assert!(many.reserve(1, u64::MAX));
        assert!(!many.reserve(1, u64::MAX), "past the count bound");
    }
}
