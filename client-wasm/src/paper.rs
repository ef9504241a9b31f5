//! The paper's Algorithm 1 in the browser (`::paper::privatemail`), for study and
//! comparison: the request goes through the frame protocol's round trip (`frame.rs`).

use ::paper::privatemail::Anchors;
use client::frame_search::FrameSearch;
use shared::{Mechanism, PrivacyParams};
use wasm_bindgen::prelude::*;

use crate::{js_err, named, Client};

#[wasm_bindgen]
impl Client {
    /// Privatize the loaded image with the paper's Algorithm 1 (`::paper::privatemail`):
    /// the photo's features, one public anchor of every other class as decoys, and every
    /// anchor, one SMLQ step released with discrete Gaussian noise calibrated to the proven
    /// sensitivity bound (ε, δ, the named mechanism), then post-processing from the noisy rows
    /// only. Returns JSON `{receipt, sensitivity}`; the request ([`Client::search_request`]) asks
    /// the server to align the anchor rows and return `k` matches for every query row. Guarantee: (ε, δ)-DP for the
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
        if self.paper.is_none() {
            let a = Anchors::new(
                &self.anchor_features,
                &self.anchor_labels,
                &self.config.smlq,
            )
            .map_err(js_err)?;
            self.paper = Some(a);
        }
        let Some(anchors) = self.paper.as_ref() else {
            return Err(js_err("the anchors' kernel could not be built"));
        };
        let privacy = PrivacyParams {
            epsilon,
            delta,
            mechanism,
        };
        let mut rng = dp::rng::secure_rng().map_err(js_err)?;
        let search =
            FrameSearch::paper(&self.config, anchors, (query, label), &privacy, k, &mut rng)
                .map_err(js_err)?;
        self.hold(search)
    }
}
