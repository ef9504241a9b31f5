//! The gallery server: holds the gallery and the public anchors, embeds them non-privately,
//! and answers private searches over a REST API (`/api/v1`). I/O lives here; the math is
//! `shared`.

pub mod blockstore;
pub mod data;
pub mod error;
pub mod failpoint;
pub mod index;
pub mod latency;
pub mod packed;
pub mod partition;
pub mod pir;
pub mod pir_http;
pub mod progress;
pub mod quality;
pub mod routes;
pub mod state;
pub mod store;
pub mod thumbnail;
pub mod training;

/// The committed weights of the on-device model (`train` writes them; see the README).
pub const MODEL_WEIGHTS: &[u8] = include_bytes!("../assets/model.bin");
