//! The tree packing (CDKS) beside the `ring` bench, the baseline InspiRING is measured against:
//! its tests run here, since a bench's do not. It is no part of the library.

// The bench uses the rest (`benches/ring/main.rs`).
#[allow(dead_code)]
#[path = "../benches/ring/pack.rs"]
mod pack;
