//! The browser client, compiled to WebAssembly with wasm-bindgen: the on-device model, the
//! client side of the anchor-frame protocol (`::paper::frame`) and of private block
//! retrieval (`publish::plan`, `publish::blocks`, `dp::subset`).
//!
//! API boundary: what leaves this module towards the network is only
//! - for the frame protocol, the JSON body that [`Client::search_request`] returns — noisy rows
//!   in a random order;
//! - for block retrieval, the list of block URLs that [`Client::block_requests`] returns — the
//!   output of the pure ε-DP k-subset mechanism, in a fresh uniformly random order.
//!
//! Both come from the shared search drivers (`client::frame_search`, `client::block_driver`,
//! the CLI's too), which hand them out only after the page's ledger recorded the release's
//! receipt (`budget.rs`, `JsLedger`).
//!
//! The features, the predicted label, the real row's position and the photo's true block stay
//! inside the `Client`; [`Client::pick`] and [`Client::rank_blocks`] use them to compute the
//! answer for the user's screen only. Everything is JSON strings across the boundary (one wire
//! format, `shared::api`); errors are JS exceptions with plain messages, never panics.
//!
//! Layout: one [`Client`] (this file: the client's state, its constructor and shared helpers)
//! with one `#[wasm_bindgen] impl Client` block per protocol, so JavaScript sees a single class:
//! `model.rs` (the on-device model, loading the photo), `frame.rs` (the anchor frame and the
//! `POST /api/v1/search` round trip), `paper.rs` (Algorithm 1), `blocks.rs` (private block
//! retrieval, and the block map), `pir.rs` (private information retrieval), `budget.rs` (composing
//! receipts) and `disclosure.rs` (what a plan tells the server, in figures). `identity.rs` holds
//! free functions (no `Client`): the gallery's key verified and pinned, and the refusal, over
//! the book the page keeps in `localStorage` (`client::identity`'s rules).

use ::paper::frame::AnchorFrame;
use ::paper::privatemail::Anchors;
use embed::classify::Classifier;
use embed::model::Model;
use shared::api::{AnchorsResponse, ConfigResponse, PartitionDoc};
use shared::DMatrix;
use wasm_bindgen::prelude::*;

mod blocks;
mod budget;
mod disclosure;
mod frame;
mod identity;
mod model;
mod paper;
mod pir;

pub use budget::compose_budget;
pub use disclosure::{disclosure, yes_no_bound};
pub use model::OnDeviceModel;

pub(crate) fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// One browser session: the model, the server's public frame and partition, the current image's
/// features, the position of the real row of the last frame release and the blocks (in URL
/// order) of the last block release.
#[wasm_bindgen]
pub struct Client {
    model: Model,
    /// The class model (`embed::classify`): the label shown and Algorithm 1's.
    classifier: Classifier,
    frame: AnchorFrame,
    config: ConfigResponse,
    query: Option<Vec<f64>>,
    /// The same features in f32, as the model computed them (the block ranking's query).
    query_f32: Option<Vec<f32>>,
    /// The last noisy-numbers release (the frame or Algorithm 1), until its answer.
    pending: Option<client::frame_search::FrameSearch>,
    /// The validated partition document (`GET /api/v1/partition`).
    partition: Option<PartitionDoc>,
    /// Verified centroids of the loaded partition's levels, by their SHA-256 (content
    /// addressed, so per version; each level's fetched at most once while its version is
    /// loaded).
    centroids: std::collections::HashMap<String, publish::centroids::Centroids>,
    /// The last block release, until its blocks are ranked.
    pending_blocks: Option<client::block_driver::BlockSearch>,
    /// The public anchors' features and labels, for Algorithm 1 (its kernel cache is built on
    /// the first Algorithm 1 search, so page load does not pay for it).
    anchor_features: DMatrix<f64>,
    /// The anchors' reference for the photo's out-of-distribution score
    /// (`embed::ood`), checked for shape when loaded (`AnchorsResponse::check`).
    familiarity: embed::ood::Reference,
    /// The network that score reads (`Client::set_familiarity_model`, before the first photo).
    familiar: Option<embed::ood::FamiliarityModel>,
    anchor_labels: Vec<u32>,
    paper: Option<Anchors>,
    /// The on-device model's label of the loaded photo (Algorithm 1's query label; it never
    /// leaves the `Client` except hidden among one decoy row per other class).
    query_label: Option<u32>,
    /// Private information retrieval (`pir.rs`).
    pir: pir::PirSession,
}

#[wasm_bindgen]
impl Client {
    /// `weights`: the bytes of `query.bin` (the query model); `class_weights`: the bytes of
    /// `classifier.bin` (the class model, `embed::classify`); `config_json`,
    /// `anchors_json`: the bodies of `GET /api/v1/config` and `GET /api/v1/anchors`. The frame's sensitivity is computed here
    /// from the rows received, so a server cannot make the noise too small.
    #[wasm_bindgen(constructor)]
    pub fn new(
        weights: &[u8],
        class_weights: &[u8],
        config_json: &str,
        anchors_json: &str,
    ) -> Result<Client, JsError> {
        // The query model's file may be the familiarity model's too (the pinned bytes): then
        // nothing more is fetched for it, and the file is parsed once.
        let familiar = embed::ood::FamiliarityModel::from_bytes(weights).ok();
        let model = match &familiar {
            Some(f) => f.model().clone(),
            None => Model::from_bytes(weights).map_err(js_err)?,
        };
        let classifier = Classifier::from_bytes(class_weights).map_err(js_err)?;
        let config: ConfigResponse = serde_json::from_str(config_json)
            .map_err(|e| js_err(format!("the server's configuration is malformed: {e}")))?;
        // Refused alike for every photo, before any is read (`client::config`).
        client::config::check(&config, weights).map_err(|e| {
            js_err(format!(
                "{e}: reload the page; if this persists, the server is misconfigured"
            ))
        })?;
        // The anchors the configuration names, as the CLI checks them.
        AnchorsResponse::check_named(anchors_json.as_bytes(), &config).map_err(js_err)?;
        let anchors: AnchorsResponse = serde_json::from_str(anchors_json)
            .map_err(|e| js_err(format!("the server's anchors are malformed: {e}")))?;
        // Every part of the anchors checked once, here (the CLI calls the same check).
        anchors
            .check(&config, embed::ood::FAMILIARITY_LAYER_DIM)
            .map_err(|e| js_err(format!("the server's anchors are malformed: {e}")))?;
        let n = anchors.features.len();
        let feats = DMatrix::from_row_iterator(
            n,
            config.feature_dim,
            anchors.features.iter().flatten().map(|&v| v as f64),
        );
        let rows = DMatrix::from_row_iterator(
            n,
            config.frame_dim,
            anchors.frame_rows.iter().flatten().copied(),
        );
        let frame = AnchorFrame::new(&feats, &rows, config.frame_kernel_scale).map_err(js_err)?;
        Ok(Client {
            model,
            classifier,
            frame,
            config,
            query: None,
            query_f32: None,
            pending: None,
            partition: None,
            centroids: Default::default(),
            pending_blocks: None,
            anchor_features: feats,
            familiarity: anchors.familiarity,
            familiar,
            anchor_labels: anchors.labels,
            paper: None,
            query_label: None,
            pir: Default::default(),
        })
    }
}

impl Client {
    pub(crate) fn class_name(&self, label: u32) -> String {
        self.config
            .class_names
            .get(label as usize)
            .cloned()
            .unwrap_or_else(|| format!("class {label}"))
    }
}

/// What the page accepts from a server (JSON `shared::params::limits::ClientLimits`): the one
/// limits table the CLI uses too — answer sizes, redirects and timeouts.
#[wasm_bindgen]
pub fn limits() -> String {
    serde_json::to_string(&shared::params::limits::CLIENT).unwrap_or_default()
}

/// The δ of the page's (ε, δ) releases and of its privacy total (`shared::params::DELTA`): the
/// client's own, never the server's configuration's, which could shrink the noise.
#[wasm_bindgen]
pub fn delta() -> f64 {
    shared::params::DELTA
}

/// A wire enum from its JSON name (`discrete_gaussian`, `proportional`, …).
fn named<T: serde::de::DeserializeOwned>(name: &str, what: &str) -> Result<T, JsError> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| js_err(format!("unknown {what} `{name}`")))
}
