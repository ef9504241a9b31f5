//! The search drivers both clients run — the page (through `client-wasm`) and the CLI — each
//! a sans-IO state machine: it says which request to make next and takes the answer; the
//! callers only move bytes. The order and sizes of a search's requests are the privacy rule,
//! so they exist here once.
//!
//! - [`pir_search`] — the default: exact results, nothing released (ε = 0);
//! - [`block_search`] — private block retrieval: the k-subset release of which blocks to
//!   download (pure ε-DP), then an exact ranking on the client.

pub mod block_search;
pub mod pir_search;
