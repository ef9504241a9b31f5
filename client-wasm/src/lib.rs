//! The browser client, compiled to WebAssembly with wasm-bindgen: the on-device model, the
//! client side of the anchor-frame protocol (`shared::protocol::frame`) and of private block
//! retrieval (`shared::protocol::{plan, blocks}`, `shared::dp::subset`).
//!
//! API boundary: what leaves this module towards the network is only
//! - for the frame protocol, the JSON body that [`Client::privatize`] returns — noisy rows in a
//!   random order;
//! - for block retrieval, the list of block URLs that [`Client::release_blocks`] returns — the
//!   output of the pure ε-DP k-subset mechanism, in a fresh uniformly random order.
//!
//! The features, the predicted label, the real row's position and the photo's true block stay
//! inside the `Client`; [`Client::pick`] and [`Client::rank_blocks`] use them to compute the
//! answer for the user's screen only. Everything is JSON strings across the boundary (one wire
//! format, `shared::api`); errors are JS exceptions with plain messages, never panics.

use shared::api::{
    AnchorsResponse, ConfigResponse, PartitionDoc, Ranking, SearchRequest, SearchResponse,
};
use shared::dp::mechanism::Receipt;
use shared::embed::model::{from_rgba, Model};
use shared::protocol::frame::{privatize_in_frame, AnchorFrame};
use shared::protocol::privatemail::{privatize as privatize_paper, Anchors};
use shared::{DMatrix, Mechanism, Params, PrivacyParams};
use wasm_bindgen::prelude::*;

mod blocks;
mod pir;

pub(crate) fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// The on-device model, loaded from its weights file.
#[wasm_bindgen]
pub struct OnDeviceModel {
    model: Model,
}

#[wasm_bindgen]
impl OnDeviceModel {
    /// Load weights (the bytes of `model.bin`); a clear error for anything else.
    #[wasm_bindgen(constructor)]
    pub fn new(weights: &[u8]) -> Result<OnDeviceModel, JsError> {
        Ok(OnDeviceModel {
            model: Model::from_bytes(weights).map_err(js_err)?,
        })
    }

    /// Unit-norm features of a 28×28 greyscale image (784 bytes, row-major).
    pub fn features(&self, pixels: &[u8]) -> Result<Vec<f32>, JsError> {
        Ok(self.model.infer(pixels).map_err(js_err)?.features)
    }

    /// The predicted class of the image.
    pub fn label(&self, pixels: &[u8]) -> Result<u32, JsError> {
        Ok(self.model.infer(pixels).map_err(js_err)?.label)
    }
}

/// What the page shows about the loaded image (`Client::load_image`).
#[derive(serde::Serialize)]
struct ImageInfo {
    /// The model's 28×28 input, for the page to show.
    pixels: Vec<u8>,
    label: u32,
    class_name: String,
    probability: f32,
    probabilities: Vec<f32>,
}

/// What the page learns from one privatization (never the position of the real row).
#[derive(serde::Serialize)]
struct Privatized {
    /// The body of `POST /api/v1/search`.
    request: String,
    receipt: Receipt,
    sensitivity: f64,
}

/// The real row's answer, for the user's screen only.
#[derive(serde::Serialize)]
struct Picked {
    matches: Vec<shared::api::Match>,
    real_row: Vec<f64>,
    rows: Vec<Vec<f64>>,
}

struct Pending {
    real_position: usize,
    rows: usize,
}

/// One browser session: the model, the server's public frame and partition, the current image's
/// features, the position of the real row of the last frame release and the blocks (in URL
/// order) of the last block release.
#[wasm_bindgen]
pub struct Client {
    model: Model,
    frame: AnchorFrame,
    config: ConfigResponse,
    query: Option<Vec<f64>>,
    /// The same features in f32, as the model computed them (the block ranking's query).
    query_f32: Option<Vec<f32>>,
    pending: Option<Pending>,
    /// The validated partition document (`GET /api/v1/partition`).
    partition: Option<PartitionDoc>,
    pending_blocks: Option<blocks::PendingBlocks>,
    /// The public anchors' features and labels, for Algorithm 1 (its kernel cache is built on
    /// the first Algorithm 1 search, so page load does not pay for it).
    anchor_features: DMatrix<f64>,
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
    /// `weights`: the bytes of `model.bin`; `config_json`, `anchors_json`: the bodies of
    /// `GET /api/v1/config` and `GET /api/v1/anchors`. The frame's sensitivity is computed here
    /// from the rows received, so a server cannot make the noise too small.
    #[wasm_bindgen(constructor)]
    pub fn new(weights: &[u8], config_json: &str, anchors_json: &str) -> Result<Client, JsError> {
        let model = Model::from_bytes(weights).map_err(js_err)?;
        let config: ConfigResponse = serde_json::from_str(config_json)
            .map_err(|e| js_err(format!("the server's configuration is malformed: {e}")))?;
        let anchors: AnchorsResponse = serde_json::from_str(anchors_json)
            .map_err(|e| js_err(format!("the server's anchors are malformed: {e}")))?;
        let n = anchors.features.len();
        if anchors.frame_rows.len() != n
            || anchors
                .features
                .iter()
                .any(|f| f.len() != config.feature_dim)
            || anchors
                .frame_rows
                .iter()
                .any(|r| r.len() != config.frame_dim)
        {
            return Err(js_err(
                "the server's anchors do not match its configuration",
            ));
        }
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
            frame,
            config,
            query: None,
            query_f32: None,
            pending: None,
            partition: None,
            pending_blocks: None,
            anchor_features: feats,
            anchor_labels: anchors.labels,
            paper: None,
            query_label: None,
            pir: Default::default(),
        })
    }

    /// Load a decoded image (RGBA bytes, e.g. `ImageData.data`) as the query: preprocess
    /// (`shared::embed::model::from_rgba`), run the model, keep the features. Returns JSON
    /// `{pixels, label, class_name, probability, probabilities}`.
    pub fn load_image(&mut self, rgba: &[u8], width: u32, height: u32) -> Result<String, JsError> {
        let pixels = from_rgba(rgba, width as usize, height as usize).map_err(js_err)?;
        self.load_pixels(&pixels)
    }

    /// As [`Client::load_image`] for a 28×28 greyscale image (784 bytes).
    pub fn load_pixels(&mut self, pixels: &[u8]) -> Result<String, JsError> {
        let inf = self.model.infer(pixels).map_err(js_err)?;
        let class_name = self.class_name(inf.label);
        let info = ImageInfo {
            pixels: pixels.to_vec(),
            label: inf.label,
            class_name,
            probability: inf.probabilities[inf.label as usize],
            probabilities: inf.probabilities,
        };
        self.query = Some(inf.features.iter().map(|&v| v as f64).collect());
        self.query_f32 = Some(inf.features);
        self.query_label = Some(inf.label);
        self.pending = None;
        self.pending_blocks = None;
        serde_json::to_string(&info).map_err(js_err)
    }

    /// Privatize the loaded image: place it in the frame with one dummy row per other class,
    /// release with (ε, δ) and the named mechanism (`discrete_gaussian`, `analytic_gaussian`,
    /// `classic_gaussian`), and return JSON `{request, receipt, sensitivity}` where
    /// `request` is the body to POST, asking for the named `ranking` of the `k` results
    /// (`proportional`: shared among the likely categories; `posterior`: the most likely
    /// category only). Noise comes from the browser's crypto RNG.
    pub fn privatize(
        &mut self,
        epsilon: f64,
        delta: f64,
        mechanism: &str,
        k: usize,
        ranking: &str,
    ) -> Result<String, JsError> {
        let query = self
            .query
            .as_ref()
            .ok_or_else(|| js_err("load an image before searching"))?;
        let mechanism: Mechanism = named(mechanism, "mechanism")?;
        let ranking: Ranking = named(ranking, "ranking")?;
        if k == 0 || k > self.config.limits.max_k {
            return Err(js_err(format!(
                "k must be in 1..={}",
                self.config.limits.max_k
            )));
        }
        let privacy = PrivacyParams {
            epsilon,
            delta,
            mechanism,
        };
        let mut rng = shared::dp::rng::secure_rng().map_err(js_err)?;
        let dummies = self.config.smlq.num_classes as usize - 1;
        let r =
            privatize_in_frame(query, &self.frame, dummies, &privacy, &mut rng).map_err(js_err)?;
        let req = SearchRequest::from_frame(&r, k, ranking);
        self.hold(req, r.real_position(), r.receipt, r.sensitivity.value)
    }

    /// Privatize the loaded image with the paper's Algorithm 1 (`shared::protocol::privatemail`):
    /// the photo's features, one public anchor of every other class as decoys, and every
    /// anchor, one SMLQ step released with discrete Gaussian noise calibrated to the proven
    /// sensitivity bound (ε, δ, the named mechanism), then post-processing from the noisy rows
    /// only. Returns JSON `{request, receipt, sensitivity}`; `request` asks the server to align
    /// the anchor rows and return `k` matches for every query row. Guarantee: (ε, δ)-DP for the
    /// features given the predicted label; the label is hidden only among the decoys (its rows
    /// are shuffled with the crypto RNG, and the real position stays here). Noise comes from
    /// the browser's crypto RNG.
    pub fn privatize_paper(
        &mut self,
        epsilon: f64,
        delta: f64,
        mechanism: &str,
        k: usize,
    ) -> Result<String, JsError> {
        let (Some(query), Some(label)) = (self.query.as_ref(), self.query_label) else {
            return Err(js_err("load an image before searching"));
        };
        let mechanism: Mechanism = named(mechanism, "mechanism")?;
        if k == 0 || k > self.config.limits.max_k {
            return Err(js_err(format!(
                "k must be in 1..={}",
                self.config.limits.max_k
            )));
        }
        if self.paper.is_none() {
            let a = Anchors::new(
                &self.anchor_features,
                &self.anchor_labels,
                &self.config.smlq,
            )
            .map_err(js_err)?;
            self.paper = Some(a);
        }
        let anchors = self.paper.as_ref().expect("built above");
        let params = Params {
            smlq: self.config.smlq,
            privacy: PrivacyParams {
                epsilon,
                delta,
                mechanism,
            },
            post_bandwidth: Default::default(),
        };
        let mut rng = shared::dp::rng::secure_rng().map_err(js_err)?;
        let r = privatize_paper(query, label, anchors, &params, &mut rng).map_err(js_err)?;
        let req = SearchRequest::from_release(&r, k);
        self.hold(req, r.real_position(), r.receipt, r.sensitivity.value)
    }

    /// Pick the real row's matches out of the server's answer to the last privatized request.
    /// Returns JSON `{matches, real_row, rows}` (rows: every submitted row in the frame).
    pub fn pick(&self, response_json: &str) -> Result<String, JsError> {
        let p = self
            .pending
            .as_ref()
            .ok_or_else(|| js_err("no search is pending"))?;
        let resp: SearchResponse = serde_json::from_str(response_json)
            .map_err(|e| js_err(format!("the server's answer is malformed: {e}")))?;
        if resp.results.len() != p.rows || resp.rows_in_frame.len() != p.rows {
            return Err(js_err(format!(
                "the server answered {} rows, but {} were sent",
                resp.results.len(),
                p.rows
            )));
        }
        let picked = Picked {
            matches: resp.results[p.real_position].clone(),
            real_row: resp.rows_in_frame[p.real_position].clone(),
            rows: resp.rows_in_frame,
        };
        serde_json::to_string(&picked).map_err(js_err)
    }

    /// The L2 sensitivity of the placement, computed from the frame the server sent.
    pub fn sensitivity(&self) -> f64 {
        self.frame.sensitivity().value
    }
}

impl Client {
    /// Remember where the real row of a request is (it stays here) and return what the page
    /// may see: the request body, the receipt and the sensitivity.
    fn hold(
        &mut self,
        req: SearchRequest,
        real_position: usize,
        receipt: Receipt,
        sensitivity: f64,
    ) -> Result<String, JsError> {
        self.pending = Some(Pending {
            real_position,
            rows: req.query_rows.len(),
        });
        let out = Privatized {
            request: serde_json::to_string(&req).map_err(js_err)?,
            receipt,
            sensitivity,
        };
        serde_json::to_string(&out).map_err(js_err)
    }

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

/// The budget spent by a list of receipts (a JSON array, as `privatize` returned them), composed
/// by zCDP and reported at `delta` (see `shared::dp::budget`). Returns JSON `shared::dp::budget::Total`.
#[wasm_bindgen]
pub fn compose_budget(receipts_json: &str, delta: f64) -> Result<String, JsError> {
    let receipts: Vec<Receipt> = serde_json::from_str(receipts_json)
        .map_err(|e| js_err(format!("stored receipts are malformed: {e}")))?;
    let total = shared::dp::budget::compose(&receipts, delta).map_err(js_err)?;
    serde_json::to_string(&total).map_err(js_err)
}

/// A wire enum from its JSON name (`discrete_gaussian`, `proportional`, …).
fn named<T: serde::de::DeserializeOwned>(name: &str, what: &str) -> Result<T, JsError> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| js_err(format!("unknown {what} `{name}`")))
}
