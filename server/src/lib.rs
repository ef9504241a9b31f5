//! The gallery server: holds the gallery and the public anchors, embeds them non-privately,
//! and answers private searches over a REST API (`/api/v1`). I/O lives here; the math is in
//! the crates beneath it (`publish`, `paper`, `embed`, `pir`), the wire in `shared`.
//!
//! Modules by role, arrows pointing one way (`http` → `state` → `gallery`, `partition` →
//! `item`, `ops`): see ARCHITECTURE.md.

pub mod batch;
pub mod front;
pub mod gallery;
pub mod http;
pub mod item;
pub mod net;
pub mod ops;
pub mod partition;
pub mod replica;
pub mod state;
