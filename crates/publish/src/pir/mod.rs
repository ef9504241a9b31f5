//! Private information retrieval as this protocol speaks it: the lattice code of the
//! `privatemail-pir` crate applied to a partition's blocks and gallery, and the documents that
//! publish it.
//!
//! The lattice code — LWE and its client, layouts of records as byte matrices, InspiRING
//! packing, the encrypted score database, their parameters, error bounds and proofs — is the
//! crate `pir` (package `privatemail-pir`), on the lattice maths of the crate `lattice` (Ring-LWE
//! with its NTT, key switching, sampling); neither knows anything about galleries. Its errors
//! become [`shared::Error`] with the same message through [`from_lattice`].
//!
//! What knows about partitions, blocks and documents is here:
//! - [`records`] — ranking and thumbnail records and their verification, and [`records::Ranked`],
//!   a search's ranked top k;
//! - [`doc`] — the published document, its validation, the geometry rules;
//! - [`seeds`] — every public mask's seed, derived from the partition's version and content;
//! - [`hintless`] — the ranking built on `pir::scores` for large galleries: encrypted exact
//!   scores of the photo's block of a capped level, no hint.
//!
//! `client::pir_search` builds a whole search from these; nothing here imports it.

// The wire's bound on a request's PIR queries is the lattice code's own.
const _: () = assert!(shared::params::limits::MAX_PIR_QUERIES == ::pir::client::MAX_QUERIES);

/// The lattice code's refusals as the wire's [`shared::Error`], with the messages they have
/// always had: `Error::InvalidParameter`/`TooLarge` as themselves, an answer, hint or record
/// that failed its checks as an invalid `pir` parameter.
pub fn from_lattice(e: ::pir::Error) -> shared::Error {
    match e {
        ::pir::Error::InvalidParameter { name, reason } => {
            shared::Error::InvalidParameter { name, reason }
        }
        ::pir::Error::TooLarge { what, count, limit } => {
            shared::Error::TooLarge { what, count, limit }
        }
        ::pir::Error::Pir(e) => refused(e),
    }
}

/// A PIR answer, hint or record that failed its checks, as the wire's [`shared::Error`].
pub fn refused(e: ::pir::PirError) -> shared::Error {
    shared::Error::InvalidParameter {
        name: "pir",
        reason: e.to_string(),
    }
}

pub mod doc;
pub mod hintless;
pub mod records;
pub mod seeds;
