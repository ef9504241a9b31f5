//! PrivateMail math shared by the browser client and the gallery server.
//!
//! Pure functions over plain data: no I/O, no clocks, no global state. Randomness enters only
//! through explicit `rng` arguments, and every privacy-relevant function documents its guarantee
//! with a proof sketch (see [`sensitivity`], [`mechanism`], [`privatemail`]).
//!
//! Kernel convention (one for the whole workspace, the sensitivity bound included): a point set
//! `Z` gets weights `w_ij = exp(-‖Z_i − Z_j‖² / s)` for `i ≠ j`, `w_ii = 0`, where
//! `s = kernel_scale` (see [`laplacian::kernel_weight`]).

pub mod align;
pub mod api;
pub mod budget;
pub mod dsne;
pub mod error;
pub mod frame;
pub mod hashing;
pub mod idx;
pub mod laplacian;
pub mod mechanism;
pub mod metrics;
pub mod model;
pub mod nystrom;
pub mod params;
pub mod privatemail;
pub mod projection;
pub mod retrieve;
pub mod rng;
pub mod sensitivity;
pub mod smlq;

pub use error::Error;
pub use nalgebra::DMatrix;
pub use params::{Mechanism, Params, PostBandwidth, PrivacyParams, SmlqParams};
