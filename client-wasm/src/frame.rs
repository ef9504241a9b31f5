//! The anchor-frame protocol in the browser (`::paper::frame`): place the photo in
//! the server's public frame with one dummy row per other class, release the rows with noise,
//! and pick the real row's answer out of `POST /api/v1/search`. The paper's Algorithm 1
//! (`paper.rs`) sends its rows through the same round trip ([`Client::pick`]).
//!
//! What leaves the browser: the JSON body [`Client::privatize`] returns — noisy rows in a random
//! order. The real row's position stays in the `Client`.

use ::paper::frame::privatize_in_frame;
use dp::mechanism::Receipt;
use shared::api::{Ranking, SearchRequest, SearchResponse};
use shared::{Mechanism, PrivacyParams};
use wasm_bindgen::prelude::*;

use crate::{js_err, named, Client};

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

/// The last search request: where its real row is (never sent) and how many rows were sent.
pub(crate) struct Pending {
    real_position: usize,
    rows: usize,
}

#[wasm_bindgen]
impl Client {
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
        let mut rng = dp::rng::secure_rng().map_err(js_err)?;
        let dummies = self.config.smlq.num_classes as usize - 1;
        let r =
            privatize_in_frame(query, &self.frame, dummies, &privacy, &mut rng).map_err(js_err)?;
        let req = ::paper::frame::search_request(&r, k, ranking);
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
    pub(crate) fn hold(
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
}
