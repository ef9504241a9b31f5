//! Private information retrieval in the browser (`shared::protocol::pir_search`): the server
//! learns nothing about the photo, the results are exact, no ε is spent.
//!
//! What leaves the browser per search: the query bodies [`Client::pir_rank_query`] (a `Level`
//! plan), [`Client::pir_scores_query`] (a `Scores` plan) and [`Client::pir_thumbs_query`]
//! return — (R)LWE ciphertexts of the same size for every photo — and `GET`s of public,
//! immutable files (hints, the ranking table, the scores' public file). The page
//! sends both queries for every search, in this order, by one code path: the ranking step never
//! throws on a bad answer (the error is kept and thrown by [`Client::pir_thumbs_answer`], after
//! the thumbnail request has gone out), so what follows a hostile answer looks like what
//! follows a good one.

use std::collections::HashMap;

use shared::pir::client::{Hint, Pending};
use shared::pir::doc::PirDoc;
use shared::pir::hintless::{self, ScoresKeys, ScoresPending, ScoresPublic};
use shared::pir::records::RankRecord;
use shared::protocol::pir_search::{self, Ranked};
use wasm_bindgen::prelude::*;

use crate::blocks::BlockHit;
use crate::{js_err, Client};

/// Parsed hints kept at most (one version's thumbnail and level hints).
const MAX_HINTS: usize = 4;

/// The PIR state of a session.
#[derive(Default)]
pub(crate) struct PirSession {
    doc: Option<PirDoc>,
    /// Checked hints by their SHA-256.
    hints: HashMap<String, Hint>,
    /// The checked, decoded ranking table, by its SHA-256 (kept for the version's searches).
    table: Option<(String, RankRecord)>,
    /// The hintless ranking's checked public file and the keys' masks, by the file's SHA-256.
    scores: Option<(String, ScoresPublic, ScoresKeys)>,
    scores_pending: Option<ScoresPending>,
    rank_pending: Option<(usize, Pending)>,
    ranked: Option<Result<Ranked, String>>,
    thumbs_pending: Option<Pending>,
}

#[derive(serde::Serialize)]
struct PirResults {
    results: Vec<BlockHit>,
    thumb_side: usize,
}

#[wasm_bindgen]
impl Client {
    /// Load the body of `GET /api/v1/pir` (after the partition): validated against the
    /// partition (same version, sizes bounded, our scheme's constants). Sends nothing.
    pub fn load_pir(&mut self, pir_json: &str) -> Result<(), JsError> {
        let doc: PirDoc = serde_json::from_str(pir_json)
            .map_err(|e| js_err(format!("the server's PIR document is malformed: {e}")))?;
        let p = self.partition()?;
        shared::pir::doc::validate(&doc, p.gallery_size, p.levels.len()).map_err(js_err)?;
        if doc.version != p.version {
            return Err(js_err("the PIR document is for another partition version"));
        }
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

    /// Whether the hint with this SHA-256 is already checked and held.
    pub fn pir_has_hint(&self, sha256: &str) -> bool {
        self.pir.hints.contains_key(&sha256.to_ascii_lowercase())
    }

    /// Give the hint file of database `db` (`thumbs` or a level): checked against its SHA-256
    /// and kept. Sends nothing.
    pub fn pir_set_hint(&mut self, db: &str, bytes: &[u8]) -> Result<(), JsError> {
        let d = self.pir_db(db)?;
        let hint = Hint::from_bytes(&d.shape, bytes, &d.hint_sha256).map_err(js_err)?;
        let key = d.hint_sha256.to_ascii_lowercase();
        if self.pir.hints.len() >= MAX_HINTS {
            self.pir.hints.clear();
        }
        self.pir.hints.insert(key, hint);
        Ok(())
    }

    /// Whether the ranking table with this SHA-256 is already checked and held.
    pub fn pir_has_table(&self, sha256: &str) -> bool {
        self.pir
            .table
            .as_ref()
            .is_some_and(|(h, _)| h.eq_ignore_ascii_case(sha256))
    }

    /// Give the ranking table file: checked against its SHA-256, decoded and kept for this
    /// version's searches. Sends nothing.
    pub fn pir_set_table(&mut self, bytes: &[u8]) -> Result<(), JsError> {
        let doc = self.pir_doc()?;
        let record = pir_search::load_table(doc, bytes).map_err(js_err)?;
        let sha = doc
            .rank_table
            .as_ref()
            .map(|t| t.sha256.to_ascii_lowercase())
            .unwrap_or_default();
        self.pir.table = Some((sha, record));
        Ok(())
    }

    /// Rank with the held ranking table (a `Table` plan). Keeps the ranking, or the error
    /// (thrown later by [`Client::pir_thumbs_answer`]). Sends nothing.
    pub fn pir_rank_table(&mut self, k: usize) -> Result<(), JsError> {
        let query = self.query_features()?;
        let r = match &self.pir.table {
            Some((_, record)) => pir_search::ranked(record, &query, k).map_err(|e| e.to_string()),
            None => Err("the ranking table is not loaded".to_string()),
        };
        self.pir.ranked = Some(r);
        Ok(())
    }

    /// The ranking query of a `Level` plan: the body to `POST` to `{answer_url}/{level}` (the
    /// photo's nearest block among the level's centroids, loaded first with
    /// [`Client::set_centroids`], hidden). Its secret stays here.
    pub fn pir_rank_query(&mut self, level: usize) -> Result<Vec<u8>, JsError> {
        let query = self.query_features()?;
        let mut rng = shared::dp::rng::secure_rng().map_err(js_err)?;
        let cents = self.level_centroids(level)?;
        let (body, pending) = pir_search::rank_query(
            self.partition()?,
            self.pir_doc()?,
            level,
            cents,
            &query,
            &mut rng,
        )
        .map_err(js_err)?;
        self.pir.rank_pending = Some((level, pending));
        self.pir.ranked = None;
        Ok(body)
    }

    /// The answer to the ranking query: decoded, checked and ranked — or the error kept for
    /// [`Client::pir_thumbs_answer`]. Never throws for a bad answer. Sends nothing.
    pub fn pir_rank_answer(&mut self, answer: &[u8], k: usize) -> Result<(), JsError> {
        let query = self.query_features()?;
        let (level, pending) = self
            .pir
            .rank_pending
            .take()
            .ok_or_else(|| js_err("no PIR ranking query is pending"))?;
        let doc = self.pir_doc()?;
        let r = match doc.levels.get(level).and_then(Option::as_ref) {
            Some(db) => match self.pir.hints.get(&db.hint_sha256.to_ascii_lowercase()) {
                Some(h) => pir_search::rank_level(doc, level, &pending, h, answer, &query, k)
                    .map_err(|e| e.to_string()),
                None => Err("the level's hint is not loaded".to_string()),
            },
            None => Err("the level has no PIR database".to_string()),
        };
        self.pir.ranked = Some(r);
        Ok(())
    }

    /// Whether the hintless ranking's public file with this SHA-256 is already checked and held.
    pub fn pir_has_scores(&self, sha256: &str) -> bool {
        self.pir
            .scores
            .as_ref()
            .is_some_and(|(h, _, _)| h.eq_ignore_ascii_case(sha256))
    }

    /// Give the hintless ranking's public file: checked against its SHA-256 and the partition,
    /// decoded and kept for this version's searches, with the keys' public masks. Sends
    /// nothing.
    pub fn pir_set_scores(&mut self, bytes: &[u8]) -> Result<(), JsError> {
        let part = self.partition()?;
        let sd = hintless::entry(part, self.pir_doc()?).map_err(js_err)?;
        let public = ScoresPublic::decode(sd, part, bytes).map_err(js_err)?;
        let keys = ScoresKeys::new(sd).map_err(js_err)?;
        self.pir.scores = Some((sd.public.sha256.to_ascii_lowercase(), public, keys));
        Ok(())
    }

    /// The query of a `Scores` plan: the body to `POST` to `{answer_url}/scores` (the photo's
    /// nearest block among the capped level's centroids, loaded first with
    /// [`Client::set_centroids`], and its features, all inside RLWE ciphertexts under a fresh
    /// secret that stays here).
    pub fn pir_scores_query(&mut self) -> Result<Vec<u8>, JsError> {
        let query = self.query_features()?;
        let mut rng = shared::dp::rng::secure_rng().map_err(js_err)?;
        let part = self.partition()?;
        let sd = hintless::entry(part, self.pir_doc()?).map_err(js_err)?;
        let cents = self.level_centroids(sd.level)?;
        let (_, _, keys) = self
            .pir
            .scores
            .as_ref()
            .ok_or_else(|| js_err("the hintless ranking's public file is not loaded"))?;
        let (body, pending) =
            hintless::query(part, sd, keys, cents, &query, &mut rng).map_err(js_err)?;
        self.pir.scores_pending = Some(pending);
        self.pir.ranked = None;
        Ok(body)
    }

    /// The answer to the scores query: decoded within its proven error bound and ranked — or
    /// the error kept for [`Client::pir_thumbs_answer`]. Never throws for a bad answer. Sends
    /// nothing.
    pub fn pir_scores_answer(&mut self, answer: &[u8], k: usize) -> Result<(), JsError> {
        let pending = self
            .pir
            .scores_pending
            .take()
            .ok_or_else(|| js_err("no PIR scores query is pending"))?;
        let part = self.partition()?;
        let sd = hintless::entry(part, self.pir_doc()?).map_err(js_err)?;
        let r = match &self.pir.scores {
            Some((_, public, keys)) => {
                hintless::rank(sd, keys, public, &pending, answer, k).map_err(|e| e.to_string())
            }
            None => Err("the hintless ranking's public file is not loaded".to_string()),
        };
        self.pir.ranked = Some(r);
        Ok(())
    }

    /// Exactly `k` thumbnail queries (for the ranked items, or random ones if the ranking
    /// failed): the body to `POST` to `{answer_url}/thumbs`.
    pub fn pir_thumbs_query(&mut self, k: usize) -> Result<Vec<u8>, JsError> {
        let mut rng = shared::dp::rng::secure_rng().map_err(js_err)?;
        let ranked = self.pir.ranked.as_ref().and_then(|r| r.as_ref().ok());
        let (body, pending) =
            pir_search::thumbs_query(self.pir_doc()?, ranked, k, &mut rng).map_err(js_err)?;
        self.pir.thumbs_pending = Some(pending);
        Ok(body)
    }

    /// The thumbnail answer: returns JSON `{results: [{id, label, class_name, distance,
    /// thumbnail}], thumb_side}`, every thumbnail checked against the ranking record's digest;
    /// throws the ranking's error if it failed. For the user's screen only.
    pub fn pir_thumbs_answer(&mut self, answer: &[u8]) -> Result<String, JsError> {
        let pending = self
            .pir
            .thumbs_pending
            .take()
            .ok_or_else(|| js_err("no PIR thumbnail query is pending"))?;
        let ranked = match self.pir.ranked.take() {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                return Err(js_err(format!(
                    "the server's PIR answer did not check out, so nothing is shown: {e}"
                )))
            }
            None => return Err(js_err("no PIR ranking was made")),
        };
        let doc = self.pir_doc()?;
        let hint = self
            .pir
            .hints
            .get(&doc.thumbs.hint_sha256.to_ascii_lowercase())
            .ok_or_else(|| js_err("the thumbnail hint is not loaded"))?;
        let side = self.partition()?.thumb_side;
        let thumbs =
            pir_search::thumbs_decode(&pending, hint, answer, &ranked, side).map_err(|e| {
                js_err(format!(
                    "a thumbnail did not match the fingerprint the gallery published: {e}"
                ))
            })?;
        let results = ranked
            .hits
            .iter()
            .zip(thumbs)
            .map(|(h, thumbnail)| BlockHit {
                id: h.id,
                label: h.label,
                class_name: self.class_name(h.label as u32),
                distance: h.distance,
                thumbnail,
            })
            .collect();
        let side = self.partition()?.thumb_side;
        serde_json::to_string(&PirResults {
            results,
            thumb_side: side,
        })
        .map_err(js_err)
    }
}

impl Client {
    fn pir_doc(&self) -> Result<&PirDoc, JsError> {
        self.pir
            .doc
            .as_ref()
            .ok_or_else(|| js_err("the gallery's PIR document is not loaded yet"))
    }

    fn pir_db(&self, db: &str) -> Result<&shared::pir::doc::PirDbDoc, JsError> {
        let doc = self.pir_doc()?;
        if db == "thumbs" {
            return Ok(&doc.thumbs);
        }
        db.parse::<usize>()
            .ok()
            .and_then(|l| doc.levels.get(l))
            .and_then(Option::as_ref)
            .ok_or_else(|| js_err(format!("no PIR database {db:?}")))
    }

    fn query_features(&self) -> Result<Vec<f32>, JsError> {
        self.query_f32
            .clone()
            .ok_or_else(|| js_err("load an image before searching"))
    }
}
