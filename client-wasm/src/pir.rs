//! Private information retrieval in the browser: `client::pir_search::driver` behind
//! four calls. The driver decides every request of a search (order, sizes, what follows a
//! failure); the page only moves bytes: [`Client::pir_start`] gives the first request,
//! [`Client::pir_answer`] takes each answer and gives the next, [`Client::pir_body`] is a
//! `POST`'s body, and [`Client::pir_transport_failed`] ends a search whose request failed.
//!
//! Each call returns JSON: `{"send": Request}` (the driver's `Request`, tagged by `method`:
//! `get` with `url`, `bytes`, `wire_bytes`; `post` with `url`, `body_bytes`, `answer_bytes`) or
//! `{"done": …}` — `{"ok": true, "results", "thumb_side", "traffic"}`, or `{"ok": false,
//! "kind", "message", "refusal"}`. A `refusal` (after an answer failed a check that involved
//! the photo's secret) must be stored by the page and passed to every later `pir_start`.

use client::pir_search::driver::{Failure, PirCache, PirSearch, Prepared, Refusal, Step, Traffic};
use client::pir_search::{self, PirPlan};
use publish::pir::doc::PirDoc;
use wasm_bindgen::prelude::*;

use crate::blocks::BlockHit;
use crate::{js_err, Client};

/// The PIR state of a session.
#[derive(Default)]
pub(crate) struct PirSession {
    doc: Option<PirDoc>,
    /// Checked public files (hints, the table, the scores' public file, centroids).
    cache: PirCache,
    search: Option<PirSearch>,
    /// The next search's photo-independent work, done ahead ([`Client::pir_prepare`]).
    prepared: Option<Prepared>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum StepJson {
    Send(client::pir_search::driver::Request),
    Done(DoneJson),
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum DoneJson {
    Found {
        ok: bool,
        results: Vec<BlockHit>,
        thumb_side: usize,
        traffic: Traffic,
    },
    Failed {
        ok: bool,
        #[serde(flatten)]
        failure: Failure,
        traffic: Traffic,
    },
}

#[wasm_bindgen]
impl Client {
    /// Load the body of `GET /api/v1/pir` (after the partition): validated against the
    /// partition (same version, sizes bounded, our scheme's constants, every seed the one
    /// this client derives). Sends nothing.
    pub fn load_pir(&mut self, pir_json: &str) -> Result<(), JsError> {
        let doc: PirDoc = serde_json::from_str(pir_json)
            .map_err(|e| js_err(format!("the server's PIR document is malformed: {e}")))?;
        pir_search::check_docs(self.partition()?, &doc).map_err(js_err)?;
        self.pir = PirSession {
            doc: Some(doc),
            ..Default::default()
        };
        Ok(())
    }

    /// The plan for `k` results within `max_bytes` per search (JSON `PirPlan`), of the ranking
    /// kind a person chose (`table`, `level`, `scores`; none: the plan's own choice). Public:
    /// reads no photo. Sends nothing.
    pub fn pir_plan(
        &self,
        k: usize,
        max_bytes: f64,
        ranking: Option<String>,
    ) -> Result<String, JsError> {
        let kind = ranking
            .map(|r| r.parse::<pir_search::RankingKind>())
            .transpose()
            .map_err(js_err)?;
        let plan = pir_search::plan_of(self.partition()?, self.pir_doc()?, k, max_bytes, kind)
            .map_err(js_err)?;
        serde_json::to_string(&plan).map_err(js_err)
    }

    /// Do the next search's photo-independent work now (fresh secrets, their masks and key
    /// bodies for `plan_json`, from [`Client::pir_plan`]), so that the search itself is about
    /// the server's time: call it when the plan is known and after each search, while the
    /// person chooses a photo. Reads no photo; sends nothing. Returns the milliseconds it took.
    /// A preparation is used by one search only, and dropped when the plan or version changes.
    pub fn pir_prepare(&mut self, plan_json: &str) -> Result<f64, JsError> {
        let plan: PirPlan = serde_json::from_str(plan_json).map_err(js_err)?;
        let t = js_sys::Date::now();
        let rng = dp::rng::secure_rng().map_err(js_err)?;
        let prepared = Prepared::new(self.partition()?, self.pir_doc()?, &plan, rng);
        self.pir.prepared = Some(prepared);
        Ok(js_sys::Date::now() - t)
    }

    /// Start a search of the loaded photo under `plan_json` (from [`Client::pir_plan`]);
    /// `refusal_json` is the stored refusal against this server, if any (then the search is
    /// refused and nothing is sent). Returns the first step (module docs).
    pub fn pir_start(
        &mut self,
        plan_json: &str,
        refusal_json: Option<String>,
    ) -> Result<String, JsError> {
        let plan: PirPlan = serde_json::from_str(plan_json).map_err(js_err)?;
        let refusal: Option<Refusal> =
            refusal_json
                .map(|r| serde_json::from_str(&r))
                .transpose()
                .map_err(|e| js_err(format!("the stored refusal is unreadable: {e}")))?;
        let features = self
            .query_f32
            .clone()
            .ok_or_else(|| js_err("load an image before searching"))?;
        // One use only: taken whether or not it fits (then the search prepares afresh).
        let held = self.pir.prepared.take();
        let part = self.partition()?;
        let doc = self.pir_doc()?;
        let prepared = match held {
            Some(p) => p,
            None => Prepared::new(part, doc, &plan, dp::rng::secure_rng().map_err(js_err)?),
        };
        let (search, step) = PirSearch::start_prepared(
            part,
            doc,
            &plan,
            &features,
            &self.pir.cache,
            refusal.as_ref(),
            prepared,
        );
        self.pir.search = Some(search);
        self.step_json(step)
    }

    /// The words for a stored refusal (`refusal_json` as [`Client::pir_start`] takes it): why
    /// searches against this server are stopped and what to do. One text with the CLI's.
    pub fn refusal_message(&self, refusal_json: &str) -> Result<String, JsError> {
        let r: Refusal = serde_json::from_str(refusal_json)
            .map_err(|e| js_err(format!("the stored refusal is unreadable: {e}")))?;
        Ok(r.failure().message)
    }

    /// The body of the current `post` request.
    pub fn pir_body(&self) -> Result<Vec<u8>, JsError> {
        Ok(self.current()?.body().to_vec())
    }

    /// The answer to the current request (its bytes, uncompressed); returns the next step.
    pub fn pir_answer(&mut self, answer: &[u8]) -> Result<String, JsError> {
        let mut search = self
            .pir
            .search
            .take()
            .ok_or_else(|| js_err("no PIR search is under way"))?;
        let step = search.answer(&mut self.pir.cache, answer);
        self.pir.search = Some(search);
        self.step_json(step)
    }

    /// The current request failed in transport (an HTTP error, a timeout, a wrong size):
    /// ends the search (no refusal: the failure came before any secret met the answer).
    pub fn pir_transport_failed(&mut self, reason: &str) -> Result<String, JsError> {
        let mut search = self
            .pir
            .search
            .take()
            .ok_or_else(|| js_err("no PIR search is under way"))?;
        let step = search.transport_failed(reason);
        self.pir.search = Some(search);
        self.step_json(step)
    }
}

impl Client {
    fn pir_doc(&self) -> Result<&PirDoc, JsError> {
        self.pir
            .doc
            .as_ref()
            .ok_or_else(|| js_err("the gallery's PIR document is not loaded yet"))
    }

    fn current(&self) -> Result<&PirSearch, JsError> {
        self.pir
            .search
            .as_ref()
            .ok_or_else(|| js_err("no PIR search is under way"))
    }

    fn step_json(&mut self, step: Step) -> Result<String, JsError> {
        let traffic = self.current()?.traffic();
        let out = match step {
            Step::Send(req) => StepJson::Send(req),
            Step::Done(done) => {
                self.pir.search = None;
                StepJson::Done(match done {
                    Ok(found) => DoneJson::Found {
                        ok: true,
                        results: found
                            .ranked
                            .hits
                            .iter()
                            .zip(found.thumbnails)
                            .map(|(h, thumbnail)| BlockHit {
                                id: h.id,
                                label: h.label,
                                class_name: self.class_name(h.label as u32),
                                distance: h.distance,
                                thumbnail,
                            })
                            .collect(),
                        thumb_side: self.partition()?.thumb_side,
                        traffic,
                    },
                    Err(failure) => DoneJson::Failed {
                        ok: false,
                        failure,
                        traffic,
                    },
                })
            }
        };
        serde_json::to_string(&out).map_err(js_err)
    }
}
