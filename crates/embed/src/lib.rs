//! The on-device model: what turns a photo into the features every search uses, on the
//! client, and the server's embedding of its gallery with the same code.
//!
//! The photo pipeline runs one way — [`photo`] (any RGBA photo to the model's frame) →
//! [`base`] (a shoe levelled by its base) → [`upright`] (the object's axis onto the image's)
//! → [`place`] (the object framed in the model's 28×28 input) — then [`model`] (inference,
//! which makes the upright step its own; 8-lane batches in [`lanes`]),
//! [`views`] (a photo's search features over nine half-pixel views), [`ood`] (is it something
//! the gallery holds?) and [`classify`] (the class shown). [`weights`] is the weights' file
//! format; [`sample`] checks the features published with the page's samples; [`idx`] reads Fashion-MNIST.
//!
//! Pure functions over plain data: no I/O, no clocks. Builds for x86_64 and
//! wasm32-unknown-unknown. Nothing here is released: what leaves the client is decided by the
//! protocols above this crate.

pub mod base;
pub mod classify;
pub mod cut;
pub mod detector;
#[rustfmt::skip]
pub mod detector_weights;
pub mod idx;
pub mod lanes;
pub mod light;
pub mod model;
pub mod ood;
pub mod photo;
#[cfg(feature = "photo-files")]
pub mod photo_file;
pub mod place;
pub mod reduce;
pub mod sample;
pub mod upright;
pub mod views;
pub mod weights;
