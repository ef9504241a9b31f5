//! Algorithm 1 of the paper and the math it rests on, and the anchor frame release built on
//! the same kernel.
//!
//! Kernel convention (one for the whole workspace, the sensitivity bound included): a point set
//! `Z` gets weights `w_ij = exp(-‖Z_i − Z_j‖² / s)` for `i ≠ j`, `w_ii = 0`, where
//! `s = kernel_scale` (see [`laplacian::kernel_weight`]).
//!
//! - [`laplacian`], [`smlq`], [`nystrom`] — the kernel, SMLQ and its large-gallery
//!   approximation;
//! - [`privatemail`] — Algorithm 1's client release and post-processing, with
//!   [`sensitivity`] (its proven bound), [`align`] (Kabsch–Umeyama on the anchor rows) and
//!   [`retrieve`] (the server's ranking);
//! - [`frame`] — the anchor frame release (the query's own k numbers, sensitivity √2);
//! - [`metrics`] — Recall@k and fidelity@k.
//!
//! Pure functions over plain data: no I/O, no clocks, randomness only through `rng` arguments.

pub mod align;
pub mod frame;
pub mod laplacian;
pub mod metrics;
pub mod nystrom;
pub mod privatemail;
pub mod retrieve;
pub mod sensitivity;
pub mod smlq;
