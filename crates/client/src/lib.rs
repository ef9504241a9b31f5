//! The search drivers both clients run — the page (through `client-wasm`) and the CLI — each
//! a sans-IO state machine: it says which request to make next and takes the answer; the
//! callers only move bytes. The order and sizes of a search's requests are the privacy rule,
//! so they exist here once.
//!
//! - [`pir_search`] — the default: exact results, nothing released (ε = 0);
//! - [`block_driver`] — private block retrieval and the whole gallery: the k-subset release
//!   of which blocks to download (pure ε-DP, [`block_search`]), then an exact ranking on the
//!   client;
//! - [`frame_search`] — the anchor frame and Algorithm 1: one noisy release in one `POST`;
//! - [`words`] — a release and a privacy total in words, from their receipts, for both.
//!
//! [`config`] holds a gallery's configuration against the client's own models, at start; [`identity`] holds what every search is gated by: the gallery's signed key, pinned on
//! first use, and the refusal keyed by key, normalised origin and resolved address.
//!
//! The ledger rule lives in the drivers ([`ledger`]): a release's receipt is recorded before
//! the request that carries it is handed to the caller.

pub mod block_driver;
pub mod block_search;
pub mod config;
pub mod frame_search;
pub mod identity;
pub mod ledger;
pub mod pir_search;
pub mod words;
