//! The gallery server: holds the gallery and the public anchors, embeds them non-privately,
//! and answers private searches over a REST API (`/api/v1`). I/O lives here; the math is
//! `shared`.
//!
//! Modules by role, arrows pointing one way (`http` → `state` → `gallery`, `partition` →
//! `item`, `ops`): see ARCHITECTURE.md.

pub mod gallery;
pub mod http;
pub mod item;
pub mod net;
pub mod ops;
pub mod partition;
pub mod state;

/// The committed weights of the gallery model: the server embeds the gallery and the anchors
/// with them (`train` writes them; see the README).
pub const MODEL_WEIGHTS: &[u8] = include_bytes!("../assets/model.bin");
/// The committed weights of the query model, the one the page and the CLI run on a photo
/// (served as `web/pkg/query.bin`): the gallery model fine-tuned so that a photo's features
/// land where the gallery model puts its clean image (`train --init --teacher --distill`; see
/// the README). The server uses them only for the familiarity reference, which
/// the client scores its own features against.
pub const QUERY_WEIGHTS: &[u8] = include_bytes!("../assets/query.bin");
/// The class model the page and the CLI show the class with (`embed::classify`); the
/// server only serves it (as `web/pkg/classifier.bin`) and the evaluation measures it.
pub const CLASS_WEIGHTS: &[u8] = include_bytes!("../assets/classifier.bin");
