//! The published partition (private block retrieval, `shared/spec/blocks.md`): the gallery cut
//! into blocks at several levels, built from a gallery snapshot with
//! [`publish::publish`], written to the [`BlockStore`] before it is announced, served
//! from memory, and swapped atomically when the gallery changes.
//!
//! Serving is the hot path, so everything a response needs is computed once: the block files
//! (uncompressed and gzip) as [`Bytes`] (a response clones a reference count, never the
//! bytes), their strong ETags, and the document's JSON. A version loaded from the store at
//! start-up reads each block on its first request (checked against the document's SHA-256)
//! and keeps it; a version over the memory budget maps the one file a request needs (plain or
//! gzip) from a local store, checks it against the version's stored CRC-32 ([`Checksums`])
//! and keeps the mapping (the page cache's bytes, sent without a copy). Looking a version up takes a read lock for an `Arc` clone; nothing is locked
//! while a response is written.
//!
//! Versions: the current one is served, and each version it replaced stays served for a grace
//! period (clients that fetched the document just before a rebuild can finish their
//! downloads). After that a request for it is answered 410 Gone naming the current version;
//! a small bounded list of retired version strings tells "expired" from "never existed" (404).
//! The store's copy of a version is deleted by [`Partitions::collect_garbage`] once it is
//! neither current nor retired and its files are older than the grace period.

pub mod blockstore;
mod build;
pub mod pir;
pub(crate) mod published;
pub(crate) mod versions;

pub use build::{build, fingerprint, BuildIo};
pub use published::*;
pub use versions::*;
