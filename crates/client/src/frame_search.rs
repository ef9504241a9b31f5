//! One search by noisy numbers — the anchor frame ([`paper::frame`]) or the paper's
//! Algorithm 1 ([`paper::privatemail`]) — as a sans-IO driver: it makes the release,
//! says which request to make, takes the answer and picks the real row's matches. The page
//! (through the wasm client) and the CLI only move bytes, so what is sent and when the release
//! is counted exist here once.
//!
//! # The sequence
//! 1. [`FrameSearch::frame`] or [`FrameSearch::paper`]: the release, from the photo's features,
//!    the public configuration and anchors, (ε, δ) and fresh randomness. Nothing is sent;
//!    [`FrameSearch::receipt`] says what sending it will spend (for a budget limit's check).
//! 2. [`FrameSearch::request`]: the receipt is recorded in the caller's [`Ledger`], then the one
//!    request is handed out — `POST /api/v1/search` with the release as its JSON body.
//! 3. [`FrameSearch::answer`] with the answer's bytes (or [`FrameSearch::transport_failed`]):
//!    the real row's matches, the position of which never left the driver.
//!
//! # Guarantee (the ledger rule)
//! *No request carrying a release is handed to the caller unless that release's receipt is
//! recorded in the ledger first*, and each release is handed out at most once. So whatever the
//! server does with the request — answers 5xx, never answers, answers garbage — the spend is
//! already counted, and a release is never counted twice or sent uncounted.
//!
//! Proof sketch: the request body is a private field of [`FrameSearch`], written only by the
//! constructors, and the only function that returns a reference to it is
//! [`FrameSearch::request`]. That function calls [`Ledger::record`] with the release's receipt
//! and returns the body only when `record` returned `Ok`; on an error it returns the error and
//! no body (and the release stays unsent, so a later call may try again). Before returning the
//! body it moves the stage to `Sent`, and from `Sent` or `Over` it returns no body. Hence for
//! every body a caller holds there was exactly one successful `record` of its receipt before
//! it, and by [`Ledger::record`]'s contract that record stands whatever happens after. The
//! release's own privacy is the mechanism's ((ε, δ)-DP: [`paper::frame`],
//! [`paper::privatemail`]); reading the answer is post-processing.

use rand::RngCore;

use crate::ledger::{Ledger, LedgerError};
use dp::mechanism::Receipt;
use paper::frame::{privatize_in_frame, AnchorFrame};
use paper::privatemail::{privatize, Anchors};
use shared::api::{ConfigResponse, Match, Ranking, SearchRequest, SearchResponse};
use shared::params::limits;
use shared::{Params, PrivacyParams};

/// Where a release is sent.
pub const SEARCH_PATH: &str = "/api/v1/search";

/// Why a search by noisy numbers stopped.
#[derive(Debug, thiserror::Error)]
pub enum FrameSearchError {
    #[error("k must be in 1..={max}")]
    K { max: usize },
    /// The release could not be made (parameters, shapes): nothing exists to send.
    #[error("{0}")]
    Release(#[from] shared::Error),
    /// The receipt was not recorded, so the request was not handed out.
    #[error("the privacy spend could not be recorded, so nothing was sent: {0}")]
    Ledger(#[from] LedgerError),
    #[error("this search's request was already handed out (a release is sent once)")]
    AlreadySent,
    #[error("no request of this search was handed out")]
    NotSent,
    #[error("this search is over")]
    Over,
    #[error("the server's answer is malformed: {0}")]
    Malformed(String),
    #[error("the server answered {got} rows, but {sent} were sent")]
    Rows { got: usize, sent: usize },
}

/// The request to make: `POST path` with `body` (`content_type`); read at most
/// `max_answer_bytes` of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Post<'a> {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'a [u8],
    pub max_answer_bytes: u64,
}

/// The real row's answer, for the person's screen only.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Picked {
    pub matches: Vec<Match>,
    /// The real row where the server placed it.
    pub real_row: Vec<f64>,
    /// Every submitted row where the server placed it, in the submitted order.
    pub rows: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Made, not handed out: nothing recorded, nothing sent.
    Released,
    /// Recorded and handed out; the answer is awaited.
    Sent,
    Over,
}

/// One search by noisy numbers (module docs).
pub struct FrameSearch {
    body: Vec<u8>,
    receipt: Receipt,
    sensitivity: f64,
    /// Where the real row is among the rows sent: never leaves the driver.
    real: usize,
    rows: usize,
    stage: Stage,
}

impl std::fmt::Debug for FrameSearch {
    // The real row's position stays out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameSearch")
            .field("receipt", &self.receipt)
            .field("rows", &self.rows)
            .field("stage", &self.stage)
            .finish()
    }
}

fn check_k(config: &ConfigResponse, k: usize) -> Result<(), FrameSearchError> {
    let max = config.limits.max_k;
    if k == 0 || k > max {
        return Err(FrameSearchError::K { max });
    }
    Ok(())
}

impl FrameSearch {
    /// The anchor frame: the photo's `features` placed in `frame` (built from the served
    /// anchors, its sensitivity computed here) with one dummy row per other class of `config`,
    /// released under `privacy`, asking for `k` results ranked by `ranking`. `rng` must be a
    /// CSPRNG seeded from the operating system ([`dp::rng::secure_rng`]).
    pub fn frame(
        config: &ConfigResponse,
        frame: &AnchorFrame,
        features: &[f64],
        privacy: &PrivacyParams,
        (k, ranking): (usize, Ranking),
        rng: &mut impl RngCore,
    ) -> Result<FrameSearch, FrameSearchError> {
        check_k(config, k)?;
        let dummies = (config.smlq.num_classes as usize).saturating_sub(1);
        let r = privatize_in_frame(features, frame, dummies, privacy, rng)?;
        let req = paper::frame::search_request(&r, k, ranking);
        FrameSearch::held(&req, r.real_position(), r.receipt, r.sensitivity.value)
    }

    /// Algorithm 1: the photo's `features` with its `label`, one anchor of every other class
    /// as decoys and every anchor, released under `privacy` with `config`'s SMLQ parameters,
    /// asking for `k` matches for every row. `rng` as for [`FrameSearch::frame`].
    pub fn paper(
        config: &ConfigResponse,
        anchors: &Anchors,
        (features, label): (&[f64], u32),
        privacy: &PrivacyParams,
        k: usize,
        rng: &mut impl RngCore,
    ) -> Result<FrameSearch, FrameSearchError> {
        check_k(config, k)?;
        let params = Params {
            smlq: config.smlq,
            privacy: *privacy,
            post_bandwidth: Default::default(),
        };
        let r = privatize(features, label, anchors, &params, rng)?;
        let req = paper::privatemail::search_request(&r, k);
        FrameSearch::held(&req, r.real_position(), r.receipt, r.sensitivity.value)
    }

    fn held(
        req: &SearchRequest,
        real: usize,
        receipt: Receipt,
        sensitivity: f64,
    ) -> Result<FrameSearch, FrameSearchError> {
        let body = serde_json::to_vec(req).map_err(|e| shared::Error::InvalidParameter {
            name: "search request",
            reason: e.to_string(),
        })?;
        Ok(FrameSearch {
            body,
            receipt,
            sensitivity,
            real,
            rows: req.query_rows.len(),
            stage: Stage::Released,
        })
    }

    /// What sending the release will spend (nothing is recorded by asking).
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }

    /// The L2 sensitivity the noise was calibrated to.
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// Whether the request was handed out (and so its receipt recorded).
    pub fn sent(&self) -> bool {
        self.stage != Stage::Released
    }

    /// Records the receipt in `ledger`, then hands out the request (the guarantee in the module
    /// docs). A ledger error hands out nothing and leaves the release unsent.
    pub fn request(&mut self, ledger: &mut dyn Ledger) -> Result<Post<'_>, FrameSearchError> {
        match self.stage {
            Stage::Released => {}
            Stage::Sent => return Err(FrameSearchError::AlreadySent),
            Stage::Over => return Err(FrameSearchError::Over),
        }
        ledger.record(&self.receipt)?;
        self.stage = Stage::Sent;
        Ok(Post {
            path: SEARCH_PATH,
            content_type: "application/json",
            body: &self.body,
            max_answer_bytes: limits::MAX_JSON_BYTES,
        })
    }

    /// The answer's bytes (a successful answer, uncompressed): the real row's matches. The
    /// search is over either way; its spend stays recorded.
    pub fn answer(&mut self, bytes: &[u8]) -> Result<Picked, FrameSearchError> {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Sent => {}
            Stage::Released => {
                self.stage = Stage::Released;
                return Err(FrameSearchError::NotSent);
            }
            Stage::Over => return Err(FrameSearchError::Over),
        }
        if bytes.len() as u64 > limits::MAX_JSON_BYTES {
            return Err(FrameSearchError::Malformed(format!(
                "larger than {} bytes",
                limits::MAX_JSON_BYTES
            )));
        }
        let resp: SearchResponse = serde_json::from_slice(bytes)
            .map_err(|e| FrameSearchError::Malformed(shared::text::excerpt(&e.to_string(), 200)))?;
        let got = resp.results.len();
        if got != self.rows || resp.rows_in_frame.len() != self.rows {
            return Err(FrameSearchError::Rows {
                got,
                sent: self.rows,
            });
        }
        let (mut results, rows) = (resp.results, resp.rows_in_frame);
        // In range: both lists hold `self.rows` entries and `real < self.rows`.
        let (Some(matches), Some(real_row)) = (
            results.get_mut(self.real).map(std::mem::take),
            rows.get(self.real).cloned(),
        ) else {
            return Err(FrameSearchError::Rows {
                got,
                sent: self.rows,
            });
        };
        Ok(Picked {
            matches,
            real_row,
            rows,
        })
    }

    /// The request failed in transport or was refused (an HTTP error, a timeout): the search
    /// is over. A release that was handed out stays recorded — the server may have it.
    pub fn transport_failed(&mut self) {
        self.stage = Stage::Over;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ledger::{Full, Receipts};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use shared::{DMatrix, Mechanism};

    /// A ledger that notes, at the moment of each record, whether a request was out.
    struct Watch<'a>(&'a mut Vec<Receipt>);
    impl Ledger for Watch<'_> {
        fn record(&mut self, r: &Receipt) -> Result<(), LedgerError> {
            self.0.push(*r);
            Ok(())
        }
    }

    pub(crate) fn config() -> ConfigResponse {
        ConfigResponse {
            smlq: shared::SmlqParams::default(),
            privacy_defaults: PrivacyParams::default(),
            class_names: (0..10).map(|c| format!("class {c}")).collect(),
            feature_dim: 64,
            frame_dim: 10,
            frame_kernel_scale: 0.02,
            anchor_count: 60,
            anchors_sha256: "ab".repeat(32),
            model_version: "test".into(),
            query_model_version: "test-query".into(),
            limits: shared::api::ApiLimits {
                max_k: 50,
                max_query_rows: 64,
                max_body_bytes: 1 << 20,
            },
        }
    }

    /// 60 unit anchors in 64 dimensions, their frame rows the vertices of their class.
    fn frame() -> (AnchorFrame, DMatrix<f64>, Vec<u32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 60;
        let mut feats = DMatrix::from_fn(n, 64, |_, _| (rng.next_u32() as f64 / 4e9) - 0.5);
        for mut r in feats.row_iter_mut() {
            let norm = r.norm();
            r /= norm;
        }
        let labels: Vec<u32> = (0..n as u32).map(|i| i % 10).collect();
        let rows = DMatrix::from_fn(n, 10, |i, j| f64::from(labels[i] as usize == j));
        (
            AnchorFrame::new(&feats, &rows, 0.02).expect("a valid frame"),
            feats,
            labels,
        )
    }

    fn privacy() -> PrivacyParams {
        PrivacyParams {
            epsilon: 4.0,
            delta: 1e-5,
            mechanism: Mechanism::DiscreteGaussian,
        }
    }

    fn query() -> Vec<f64> {
        let mut q: Vec<f64> = (0..64).map(|i| (i as f64 * 0.37).sin()).collect();
        let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
        q.iter_mut().for_each(|v| *v /= n);
        q
    }

    fn answer(rows: usize) -> Vec<u8> {
        let results: Vec<serde_json::Value> = (0..rows)
            .map(|i| {
                serde_json::json!([{ "id": i, "label": 0, "distance": 0.0, "thumbnail_png_base64": "" }])
            })
            .collect();
        let placed: Vec<Vec<f64>> = (0..rows).map(|i| vec![i as f64; 10]).collect();
        serde_json::to_vec(&serde_json::json!({ "results": results, "rows_in_frame": placed }))
            .expect("JSON")
    }

    #[test]
    fn the_receipt_is_recorded_before_the_request_is_handed_out_and_once() {
        let (frame, _, _) = frame();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let config = config();
        let mut s = FrameSearch::frame(
            &config,
            &frame,
            &query(),
            &privacy(),
            (8, Ranking::Proportional),
            &mut rng,
        )
        .expect("a release");
        assert!(!s.sent());
        // A ledger that cannot record: no request, nothing counted, the release still unsent.
        assert!(matches!(
            s.request(&mut Full),
            Err(FrameSearchError::Ledger(_))
        ));
        assert!(!s.sent());
        // An answer before any request is refused and changes nothing.
        assert!(matches!(
            s.answer(&answer(10)),
            Err(FrameSearchError::NotSent)
        ));
        let mut seen = Vec::new();
        let receipt = *s.receipt();
        {
            let mut watch = Watch(&mut seen);
            let post = s.request(&mut watch).expect("recorded, then handed out");
            assert_eq!(post.path, "/api/v1/search");
            assert_eq!(post.content_type, "application/json");
            let req: SearchRequest = serde_json::from_slice(post.body).expect("the body");
            assert_eq!(req.query_rows.len(), 10);
            assert_eq!(req.k, 8);
            assert_eq!(req.noise_std, Some(receipt.noise_scale));
        }
        assert_eq!(
            seen,
            vec![receipt],
            "recorded exactly once, before the request"
        );
        // Sent once: a second request is refused and records nothing more.
        let mut more = Receipts::default();
        assert!(matches!(
            s.request(&mut more),
            Err(FrameSearchError::AlreadySent)
        ));
        assert!(more.0.is_empty());
        let picked = s.answer(&answer(10)).expect("the real row");
        assert_eq!(picked.rows.len(), 10);
        assert_eq!(picked.matches[0].id as usize, s.real);
        assert!(matches!(s.answer(&answer(10)), Err(FrameSearchError::Over)));
    }

    /// A refused or failed answer (HTTP 500, a timeout, a body that does not parse) ends the
    /// search and leaves the spend recorded.
    #[test]
    fn a_failed_answer_leaves_the_spend_recorded() {
        let (frame, _, _) = frame();
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let config = config();
        let mut ledger = Receipts::default();
        for bad in [None, Some(b"{\"error\":{}}".to_vec()), Some(answer(9))] {
            let mut s = FrameSearch::frame(
                &config,
                &frame,
                &query(),
                &privacy(),
                (8, Ranking::Posterior),
                &mut rng,
            )
            .expect("a release");
            s.request(&mut ledger).expect("handed out");
            match bad {
                None => s.transport_failed(),
                Some(b) => assert!(s.answer(&b).is_err()),
            }
            assert!(matches!(
                s.request(&mut ledger),
                Err(FrameSearchError::Over)
            ));
        }
        assert_eq!(ledger.0.len(), 3, "every release that left is counted");
    }

    #[test]
    fn the_paper_release_takes_the_same_round_trip() {
        let (_, feats, labels) = frame();
        let config = config();
        let anchors = Anchors::new(&feats, &labels, &config.smlq).expect("anchors");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut s = FrameSearch::paper(&config, &anchors, (&query(), 3), &privacy(), 8, &mut rng)
            .expect("a release");
        let mut ledger = Receipts::default();
        let rows = {
            let post = s.request(&mut ledger).expect("handed out");
            let req: SearchRequest = serde_json::from_slice(post.body).expect("the body");
            assert!(req.anchor_rows.is_some() && req.noise_std.is_none());
            req.query_rows.len()
        };
        assert_eq!(ledger.0, vec![*s.receipt()]);
        assert!(s.answer(&answer(rows)).is_ok());
        // k is checked before anything is released.
        for k in [0, config.limits.max_k + 1] {
            assert!(matches!(
                FrameSearch::paper(&config, &anchors, (&query(), 3), &privacy(), k, &mut rng),
                Err(FrameSearchError::K { .. })
            ));
        }
    }
}
