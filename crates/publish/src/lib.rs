//! What a gallery publishes, as pure functions over plain data: a batch job can compute a
//! version apart from the serving process, and every client reads the same files through the
//! checked readers here.
//!
//! - [`partition`] — the k-means levels whose blocks also hold their members' nearest
//!   neighbours (the blocks' membership, coverage and overlap);
//! - [`blocks`], [`thumbs`], [`centroids`] — the block files, their thumbnails and a level's
//!   centroids: encoding, bounded decoding, SHA-256 names;
//! - [`thumbcode`] — the thumbnails' codebook;
//! - [`publish`] — a version's public documents; [`plan`] — what a search of a given ε and
//!   byte budget downloads (public: it never reads the photo);
//! - [`map`] — the gallery map the page draws;
//! - [`pir`] — the PIR databases of a version, their documents and derived seeds, and the
//!   records a search decodes.

pub mod blocks;
pub mod centroids;
#[cfg(any(test, feature = "fixture"))]
pub mod fixture;
pub mod map;
pub mod partition;
pub mod pir;
pub mod plan;
pub mod png;
pub mod publish;
pub mod thumbcode;
pub mod thumbs;
pub mod topk;
