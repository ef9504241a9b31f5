//! Private information retrieval as this protocol speaks it: the lattice code of the
//! `privatemail-pir` crate applied to a partition's blocks and gallery, and the documents that
//! publish it.
//!
//! The lattice code — LWE and its client, layouts of records as byte matrices, Ring-LWE with
//! its NTT, packing and key switching, the encrypted score database, their parameters, error
//! bounds and proofs — is the crate `pir` (package `privatemail-pir`), which knows nothing
//! about galleries. Its modules are re-exported here under their own names ([`lwe`],
//! [`layout`], [`client`], [`ring`], [`error`]), so `shared::pir::ring::scores` is
//! `pir::ring::scores`. Its [`error::Error`] converts into [`crate::Error`] with the same
//! message (see `crate::error`).
//!
//! What knows about partitions, blocks and documents is here:
//! - [`records`] — ranking and thumbnail records and their verification, and [`records::Ranked`],
//!   a search's ranked top k;
//! - [`doc`] — the published document, its validation, the geometry rules;
//! - [`seeds`] — every public mask's seed, derived from the partition's version and content;
//! - [`hintless`] — the ranking built on `ring::scores` for large galleries: encrypted exact
//!   scores of the photo's block of a capped level, no hint.
//!
//! `protocol::pir_search` builds a whole search from these; nothing here imports it.

pub use ::pir::{client, cpu, error, held, layout, lwe, ring, selftest};

pub mod doc;
pub mod hintless;
pub mod records;
pub mod seeds;
