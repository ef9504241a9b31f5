//! PrivateMail math shared by the browser client and the gallery server.
//!
//! Pure functions over plain data: no I/O, no clocks, no global state. Randomness enters only
//! through explicit `rng` arguments, and every privacy-relevant function documents its guarantee
//! with a proof sketch (see [`dp`], [`protocol`]).
//!
//! Kernel convention (one for the whole workspace, the sensitivity bound included): a point set
//! `Z` gets weights `w_ij = exp(-‖Z_i − Z_j‖² / s)` for `i ≠ j`, `w_ii = 0`, where
//! `s = kernel_scale` (see [`embed::laplacian::kernel_weight`]).

pub mod api;
pub mod bounded;
pub mod error;
pub mod idx;
pub mod metrics;
pub mod params;
pub mod pir;
pub mod text;

/// Privacy mechanisms and their accounting: every function here that touches a private value
/// states its guarantee and proof.
pub mod dp {
    pub mod budget;
    pub mod exact;
    pub mod mechanism;
    pub mod posterior;
    pub mod randomized_response;
    pub mod rng;
    pub mod sensitivity;
    pub mod subset;
}

/// Embedding math: the on-device model, the kernel, SMLQ and its large-gallery approximation.
pub mod embed {
    pub mod base;
    pub mod classify;
    pub mod lanes;
    pub mod laplacian;
    pub mod model;
    pub mod nystrom;
    pub mod ood;
    pub mod photo;
    pub mod sample;
    pub mod smlq;
    pub mod upright;
    pub mod views;
    pub mod weights;
}

/// The retrieval protocols: what the client releases and what each side computes from it.
pub mod protocol {
    pub mod align;
    pub mod block_driver;
    pub mod block_search;
    pub mod blocks;
    pub mod centroids;
    pub mod frame;
    pub mod frame_search;
    pub mod ledger;
    pub mod map;
    pub mod partition;
    pub mod pir_search;
    pub mod plan;
    pub mod privatemail;
    pub mod publish;
    pub mod retrieve;
    pub mod thumbcode;
    pub mod thumbs;
}

/// The evaluation's private baselines (no server route or page uses them).
pub mod baselines {
    pub mod dsne;
    pub mod hashing;
    pub mod projection;
}

pub use error::Error;
pub use nalgebra::DMatrix;
pub use params::{Mechanism, Params, PostBandwidth, PrivacyParams, SmlqParams};
