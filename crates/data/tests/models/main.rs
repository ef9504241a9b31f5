//! The committed models on the real data, one test binary: quality floors, the photo pipeline
//! and familiarity check, the ranking level's coverage, Nyström against the dense kernel, and
//! the fixtures the wasm client and the page are checked against.

mod familiarity_heldout;
mod model_quality;
mod nystrom_vs_dense;
mod photo_pipeline;
mod ranking_coverage;
mod wasm_parity_fixture;
