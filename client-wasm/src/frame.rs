//! The anchor-frame protocol in the browser (`::paper::frame`) through the shared
//! driver (`client::frame_search`, the CLI's too): [`Client::privatize`] makes the
//! release (the photo placed in the server's public frame with one dummy row per other class,
//! released with noise), [`Client::search_request`] records its receipt through the page's
//! ledger and only then hands out `POST /api/v1/search`, and [`Client::pick`] picks the real
//! row's answer. The paper's Algorithm 1 (`paper.rs`) takes the same round trip.
//!
//! What leaves the browser: the JSON body [`Client::search_request`] returns — noisy rows in a
//! random order — and only after the page's ledger recorded the release. The real row's
//! position stays in the driver.

use client::frame_search::FrameSearch;
use shared::api::Ranking;
use shared::{Mechanism, PrivacyParams};
use wasm_bindgen::prelude::*;

use crate::budget::JsLedger;
use crate::{js_err, named, Client};

/// What the page learns from one privatization (never the position of the real row, and not
/// yet the request: that comes from [`Client::search_request`], once the spend is recorded).
#[derive(serde::Serialize)]
struct Privatized {
    receipt: dp::mechanism::Receipt,
    sensitivity: f64,
}

/// The request to make, as the driver hands it out.
#[derive(serde::Serialize)]
struct SearchPost<'a> {
    method: &'static str,
    url: &'static str,
    content_type: &'static str,
    /// The JSON body, as text (sent as it is).
    body: &'a str,
    /// Read no more of the answer than this.
    max_bytes: u64,
}

#[wasm_bindgen]
impl Client {
    /// Privatize the loaded image: place it in the frame with one dummy row per other class,
    /// release with (ε, δ) and the named mechanism (`discrete_gaussian`, `analytic_gaussian`,
    /// `classic_gaussian`), asking for the named `ranking` of the `k` results (`proportional`:
    /// shared among the likely categories; `posterior`: the most likely category only). Returns
    /// JSON `{receipt, sensitivity}`; the request comes from [`Client::search_request`]. Noise
    /// comes from the browser's crypto RNG. Sends nothing.
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
        let privacy = PrivacyParams {
            epsilon,
            delta,
            mechanism,
        };
        let mut rng = dp::rng::secure_rng().map_err(js_err)?;
        let search = FrameSearch::frame(
            &self.config,
            &self.frame,
            query,
            &privacy,
            (k, ranking),
            &mut rng,
        )
        .map_err(js_err)?;
        self.hold(search)
    }

    /// Record the held release's receipt with `record` — the page's ledger: called with the
    /// receipt's JSON, it must store it before it returns and throw if it cannot — and only then
    /// return the request, JSON `{method, url, content_type, body, max_bytes}`. If `record`
    /// throws, nothing is returned and the release stays unsent. A release is handed out once.
    pub fn search_request(&mut self, record: &js_sys::Function) -> Result<String, JsError> {
        let search = self
            .pending
            .as_mut()
            .ok_or_else(|| js_err("no search is pending"))?;
        let post = search.request(&mut JsLedger(record)).map_err(js_err)?;
        let body = std::str::from_utf8(post.body).map_err(js_err)?;
        let out = SearchPost {
            method: "POST",
            url: post.path,
            content_type: post.content_type,
            body,
            max_bytes: post.max_answer_bytes,
        };
        serde_json::to_string(&out).map_err(js_err)
    }

    /// Pick the real row's matches out of the server's answer to the request handed out.
    /// Returns JSON `{matches, real_row, rows}` (rows: every submitted row in the frame). The
    /// search is over after it, whether the answer is usable or not.
    pub fn pick(&mut self, response_json: &str) -> Result<String, JsError> {
        let mut search = self
            .pending
            .take()
            .ok_or_else(|| js_err("no search is pending"))?;
        let picked = search.answer(response_json.as_bytes());
        if !search.sent() {
            // Nothing was handed out yet: the release is still the pending one.
            self.pending = Some(search);
        }
        serde_json::to_string(&picked.map_err(js_err)?).map_err(js_err)
    }

    /// The request failed (no answer, an HTTP error): the search is over; its spend stays
    /// recorded.
    pub fn search_failed(&mut self) {
        if let Some(mut s) = self.pending.take() {
            s.transport_failed();
        }
    }

    /// The L2 sensitivity of the placement, computed from the frame the server sent.
    pub fn sensitivity(&self) -> f64 {
        self.frame.sensitivity().value
    }
}

impl Client {
    /// Keep a release (its request and where its real row is stay in the driver) and return
    /// what the page may see now: the receipt and the sensitivity.
    pub(crate) fn hold(&mut self, search: FrameSearch) -> Result<String, JsError> {
        let out = Privatized {
            receipt: *search.receipt(),
            sensitivity: search.sensitivity(),
        };
        self.pending = Some(search);
        serde_json::to_string(&out).map_err(js_err)
    }
}
