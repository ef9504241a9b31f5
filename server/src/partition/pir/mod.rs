//! PIR databases of a partition version (`publish::pir`): built from the version's blocks and
//! the gallery, held with the version (so they live and expire with it), and answered on the
//! blocking pool with rayon.
//!
//! Per version: the thumbnail database (one record per gallery item, in gallery order), the
//! whole ranking table as a public file where it is small, and one database per level whose
//! records are its blocks' ranking records, where the level's shape is affordable
//! ([`MAX_LEVEL_UPLOAD`], [`MAX_LEVEL_DB_BYTES`]). Hints and the table are immutable files
//! (content-addressed by the version, cacheable).

mod batch;
mod build;
mod counters;
mod serve;

pub use batch::{Batcher, Reply, MAX_BATCH};
pub use build::{attach, build, PirBuildError};
pub use serve::*;
