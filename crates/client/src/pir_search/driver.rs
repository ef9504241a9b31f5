//! One PIR search as a sans-IO state machine: it says which request to make next and takes
//! the answer; the page (through the wasm client) and the CLI only move bytes. The order and
//! sizes of a search's requests are the privacy rule, so they exist here once.
//!
//! # The sequence (the same for every photo)
//! 1. `GET`s of the public files the plan needs and the client does not hold yet: the
//!    thumbnail hint, then the ranking table (`Table`), the level's hint and centroids
//!    (`Level`) or the scores' public file and the level's centroids (`Scores`). Each is the
//!    same for every client and is checked (size, SHA-256, structure) before it is kept.
//! 2. `Level`/`Scores`: one `POST` of the ranking query (fixed size from the public shape).
//! 3. One `POST` of exactly `k` thumbnail queries, for the ranked items — or for uniformly
//!    random records when the ranking failed its checks, so the request is the same.
//!
//! # Guarantee (against a server that does not follow the protocol)
//! *No server-chosen input touches a secret*: every seed is derived by the client
//! ([`publish::pir::seeds`]; a document with any other seed is refused at [`PirSearch::start`],
//! before a query exists). *Failures say nothing within a search*: what the client sends —
//! requests, their count, sizes and order — is a function of the public documents, the plan
//! and fresh randomness only, whether or not an answer passes its checks; the checks of a
//! secret-dependent answer do the same work whether they fail or not (no early return; a dummy
//! ranking after a failure). *At most one failure is ever observed*: a failed check of an answer
//! the client decrypted ([`FailureKind::Hostile`]) returns a [`Refusal`] that the caller must
//! persist, and [`PirSearch::start`] refuses every later search against that server until the
//! person clears it. A server that damages answers on purpose can therefore learn, from whether
//! the client comes back, one bit about one photo — and never a second. Transport failures
//! (an HTTP error, a timeout, an answer of the wrong size) happen before the client touches
//! the answer with its secret, so they cannot depend on the photo; they end the search with a
//! plain error and no refusal.
//!
//! Proof sketch: the server's view of a search is the sequence of requests. Step 1 depends on
//! the plan and the cache (public). Step 2's body is (R)LWE ciphertexts under a fresh secret
//! (indistinguishable from uniform under (R)LWE, with masks the server did not choose). Step
//! 3's body is LWE ciphertexts for records chosen from the ranking, under fresh secrets — the
//! same distribution whatever the records. Its timing follows the work of step 2's checks and
//! ranking, which is independent of their outcome. Nothing is sent after step 3's answer.
//!
//! The queries' photo-independent parts — fresh secrets, their masks, the packing-key bodies —
//! may be drawn ahead ([`Prepared`], before the photo is known): the same distribution, from
//! the same derived seeds, each used by one search only; drawing them earlier moves work out of
//! the search and changes nothing the server sees but when.

use rand_chacha::ChaCha20Rng;

use ::pir::client::{self, Hint, Pending, PirError};
use publish::blocks::{hash_hex, max_transfer_len};
use publish::centroids::{self, centroids_url, Centroids};
use publish::pir::doc::PirDoc;
use publish::pir::hintless::{self, ScoresKeys, ScoresPending, ScoresPrepared, ScoresPublic};
use publish::pir::records::RankRecord;
use publish::thumbcode::Codebook;
use shared::api::PartitionDoc;
use shared::error::{Error, Result};

use super::{
    check_docs, load_table, rank_level, rank_query, ranked, record_features, thumbs_decode_records,
    thumbs_prepare, thumbs_query_prepared, verify_scores, PirPlan, PirRanking, Ranked, ThumbCode,
};

/// Public files kept at most per kind (one version's thumbnail hint and a level's).
const MAX_HINTS: usize = 4;
const MAX_CENTROIDS: usize = 8;

/// What a client keeps between searches: checked public files, by their SHA-256 (the same for
/// every client, so holding them reveals nothing).
#[derive(Default)]
pub struct PirCache {
    hints: Vec<(String, Hint)>,
    table: Option<(String, RankRecord)>,
    scores: Option<(String, ScoresPublic, ScoresKeys)>,
    centroids: Vec<(String, Centroids)>,
    code: Option<(String, Codebook)>,
}

impl PirCache {
    fn hint(&self, sha: &str) -> Option<&Hint> {
        self.hints
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(sha))
            .map(|(_, v)| v)
    }

    fn centroids(&self, sha: &str) -> Option<&Centroids> {
        self.centroids
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(sha))
            .map(|(_, v)| v)
    }

    fn code(&self, sha: &str) -> Option<&Codebook> {
        self.code
            .as_ref()
            .filter(|(h, _)| h.eq_ignore_ascii_case(sha))
            .map(|(_, v)| v)
    }

    /// Whether the file a `GET` names is already checked and held.
    fn holds(&self, req: &Request) -> bool {
        let Request::Get {
            file, sha256: sha, ..
        } = req
        else {
            return false;
        };
        match file {
            PublicFile::Hint { .. } => self.hint(sha).is_some(),
            PublicFile::Table => self
                .table
                .as_ref()
                .is_some_and(|(h, _)| h.eq_ignore_ascii_case(sha)),
            PublicFile::Scores => self
                .scores
                .as_ref()
                .is_some_and(|(h, _, _)| h.eq_ignore_ascii_case(sha)),
            PublicFile::Centroids { .. } => self.centroids(sha).is_some(),
            PublicFile::ThumbCode => self.code(sha).is_some(),
        }
    }
}

/// Which public file a `GET` is for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PublicFile {
    /// A SimplePIR database's hint (`thumbs` or a level).
    Hint {
        db: String,
    },
    Table,
    Scores,
    Centroids {
        level: usize,
    },
    /// The thumbnails' codebook, where the document publishes one.
    ThumbCode,
}

/// The next request of a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "method")]
pub enum Request {
    /// A public, immutable file: `GET url`; at most `bytes` uncompressed and `wire_bytes` on
    /// the wire; checked against `sha256` by the driver.
    Get {
        url: String,
        bytes: u64,
        wire_bytes: u64,
        sha256: String,
        file: PublicFile,
    },
    /// A query: `POST url` with the body from [`PirSearch::body`]
    /// (`application/octet-stream`); the answer must be exactly `answer_bytes`.
    Post {
        url: String,
        body_bytes: u64,
        answer_bytes: u64,
    },
}

/// Why a search ended without results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The documents were refused before anything secret existed (a derived seed differs, a
    /// shape is wrong): nothing about the photo was used.
    Refused,
    /// A public file did not match the document (same for every client; photo not used).
    PublicFile,
    /// The transport failed (HTTP error, timeout, wrong size): before the answer met a secret.
    Transport,
    /// An answer the client decrypted failed its checks. A malicious server can cause this on
    /// purpose to learn about one bit of the photo; the caller must persist the refusal.
    Hostile,
    /// An earlier hostile failure stopped private searches against this server.
    Locked,
}

/// A search that ended without results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    /// What happened, in plain words (with the advice where it matters).
    pub message: String,
    /// Set for [`FailureKind::Hostile`]: store it (page: localStorage; CLI: its state
    /// directory) and pass it to every later [`PirSearch::start`] against this server.
    pub refusal: Option<Refusal>,
}

/// The persisted refusal after a hostile failure: private searches against this server stop
/// until the person clears it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    /// The gallery version the failure happened on (for the person's reference).
    pub version: String,
    /// What failed (the check, not the record: the message names no item).
    pub what: String,
}

/// The advice shown with a hostile failure and with every refused search after it. One text
/// for the page and the CLI; it claims no more than the guarantee above.
pub const REFUSAL_ADVICE: &str = "A malicious server can cause such a failure on purpose to \
learn about one bit of your photo (for example, whether it lies in one part of the gallery), so \
searches against this server are stopped until you allow them again. Do not search the same \
photo here again.";

impl Refusal {
    /// The failure a later search gets while this refusal stands.
    pub fn failure(&self) -> Failure {
        Failure {
            kind: FailureKind::Locked,
            message: format!(
                "Searches against this server are stopped: on gallery version {} it sent an \
                 answer that failed a check ({}). {REFUSAL_ADVICE}",
                shared::text::excerpt(&self.version, 16),
                self.what
            ),
            refusal: Some(self.clone()),
        }
    }
}

/// What a finished search found: the exact top k of what was retrieved, with their checked
/// thumbnails (`thumb_side²` grey bytes each).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub ranked: Ranked,
    pub thumbnails: Vec<Vec<u8>>,
}

/// What crossed the wire in one search.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// Query bodies sent and answers received.
    pub up: u64,
    pub down: u64,
    /// Public files downloaded by this search (0 when all were held).
    pub once: u64,
}

/// What [`PirSearch::start`] and [`PirSearch::answer`] return.
#[derive(Debug)]
pub enum Step {
    /// Make this request and hand its answer to [`PirSearch::answer`] (or, if the transport
    /// fails, call [`PirSearch::transport_failed`]).
    Send(Request),
    /// The search is over; make no further request for it.
    Done(std::result::Result<Found, Failure>),
}

enum Stage {
    /// Public files still to fetch (`GET`s; the first is in flight).
    Files(Vec<Request>),
    Rank(RankPending),
    Thumbs {
        pending: Pending,
        ranked: std::result::Result<Ranked, Error>,
    },
    Over,
}

enum RankPending {
    Level(usize, Pending),
    Scores(Box<ScoresPending>),
}

/// One PIR search of the photo's `features` under a plan (see the module docs).
pub struct PirSearch {
    part: PartitionDoc,
    pir: PirDoc,
    plan: PirPlan,
    features: zeroize::Zeroizing<Vec<f32>>,
    rng: ChaCha20Rng,
    /// This search's prepared queries, taken when each is sent.
    thumbs_prep: Option<client::Prepared>,
    scores_prep: Option<ScoresPrepared>,
    stage: Stage,
    body: Vec<u8>,
    traffic: Traffic,
}

/// The work of one search that does not depend on the photo, done ahead — while the person
/// is still choosing a photo, or after the previous search — so that a search's requests leave
/// without it: the `k` thumbnail queries' secrets and masks and, for a `Scores` plan, the
/// ranking query's secret, key bodies and masks (at a million images most of a client's time).
/// Made from the public documents, the plan and fresh randomness only: holding one reveals
/// nothing, and it is consumed by the one search that uses it ([`PirSearch::start_prepared`]),
/// never reused (every secret in it is fresh; the parts zeroise themselves when dropped).
pub struct Prepared {
    version: String,
    plan: PirPlan,
    /// `None` when the documents did not check out (the search started with it refuses them).
    material: Option<Result<(client::Prepared, Option<ScoresPrepared>)>>,
    rng: ChaCha20Rng,
}

impl Prepared {
    /// Prepares a search under `plan` (from these documents) with `rng`, a CSPRNG freshly
    /// seeded from the operating system's source, which the search then goes on using.
    pub fn new(
        part: &PartitionDoc,
        pir: &PirDoc,
        plan: &PirPlan,
        mut rng: ChaCha20Rng,
    ) -> Prepared {
        let material = check_docs(part, pir).is_ok().then(|| {
            let thumbs = thumbs_prepare(part, pir, plan.k, &mut rng)?;
            let scores = match plan.ranking {
                PirRanking::Scores { .. } => {
                    let doc = hintless::entry(part, pir)?;
                    let keys = ScoresKeys::new(part, doc)?;
                    Some(hintless::prepare(part, doc, &keys, &mut rng)?)
                }
                _ => None,
            };
            Ok((thumbs, scores))
        });
        Prepared {
            version: part.version.clone(),
            plan: plan.clone(),
            material,
            rng,
        }
    }

    /// Whether it was made for this version of the gallery and this plan.
    pub fn fits(&self, part: &PartitionDoc, plan: &PirPlan) -> bool {
        self.version == part.version && &self.plan == plan
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("version", &self.version)
            .field("plan", &self.plan)
            .finish()
    }
}

fn hostile(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure {
        kind: FailureKind::Hostile,
        message: format!(
            "{} The server sent data that failed the checks this search makes. \
             {REFUSAL_ADVICE}",
            shared::text::excerpt(&format!("{what}: {e}."), 300)
        ),
        refusal: None,
    }
}

impl PirSearch {
    /// Starts a search, or refuses: while `refusal` stands (a hostile failure earlier against
    /// this server), or when the documents do not check out (shapes, versions, every seed the
    /// derived one). `rng` must be a CSPRNG freshly seeded from the operating system's source
    /// ([`dp::rng::secure_rng`]); a fixed seed is for the cross-target transcript tests
    /// only. The documents are the ones the plan was made from. The same as
    /// [`PirSearch::start_prepared`] with a [`Prepared`] made now.
    pub fn start(
        part: &PartitionDoc,
        pir: &PirDoc,
        plan: &PirPlan,
        features: &[f32],
        cache: &PirCache,
        refusal: Option<&Refusal>,
        rng: ChaCha20Rng,
    ) -> (PirSearch, Step) {
        let prepared = Prepared::new(part, pir, plan, rng);
        PirSearch::start_prepared(part, pir, plan, features, cache, refusal, prepared)
    }

    /// [`PirSearch::start`] with the photo-independent work done ahead. A preparation made for
    /// another version or plan is not used: the search prepares afresh, with its randomness.
    pub fn start_prepared(
        part: &PartitionDoc,
        pir: &PirDoc,
        plan: &PirPlan,
        features: &[f32],
        cache: &PirCache,
        refusal: Option<&Refusal>,
        prepared: Prepared,
    ) -> (PirSearch, Step) {
        let prepared = if prepared.fits(part, plan) {
            prepared
        } else {
            Prepared::new(part, pir, plan, prepared.rng)
        };
        let Prepared { material, rng, .. } = prepared;
        let mut s = PirSearch {
            part: part.clone(),
            pir: pir.clone(),
            plan: plan.clone(),
            features: zeroize::Zeroizing::new(features.to_vec()),
            rng,
            thumbs_prep: None,
            scores_prep: None,
            stage: Stage::Over,
            body: Vec::new(),
            traffic: Traffic::default(),
        };
        if let Some(r) = refusal {
            return (s, Step::Done(Err(r.failure())));
        }
        let refused = |e: Error| Failure {
            kind: FailureKind::Refused,
            message: format!(
                "This server's search documents were refused, so nothing about your photo was \
                 sent: {}",
                shared::text::excerpt(&e.to_string(), 300)
            ),
            refusal: None,
        };
        let checked = check_docs(part, pir)
            .and_then(|()| shared::error::ensure_query_f32(features, part.feature_dim))
            .and_then(|()| s.check_plan());
        if let Err(e) = checked {
            return (s, Step::Done(Err(refused(e))));
        }
        match material {
            Some(Ok((thumbs, scores))) => {
                s.thumbs_prep = Some(thumbs);
                s.scores_prep = scores;
            }
            Some(Err(e)) => return (s, Step::Done(Err(refused(e)))),
            None => {
                return (
                    s,
                    Step::Done(Err(refused(Error::InvalidParameter {
                        name: "pir",
                        reason: "the documents did not check out".into(),
                    }))),
                )
            }
        }
        let files = s.files().into_iter().filter(|r| !cache.holds(r)).collect();
        s.stage = Stage::Files(files);
        let step = s.advance(cache);
        (s, step)
    }

    /// The body of the last [`Request::Post`].
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// What crossed the wire so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// The plan must be one [`super::plan_of`] could make from these documents (the level
    /// or table it names is offered, `k` within bounds, every ranking block at least `k` items).
    fn check_plan(&self) -> Result<()> {
        let bad = |reason: &str| Error::InvalidParameter {
            name: "pir plan",
            reason: reason.into(),
        };
        let k = self.plan.k;
        if k == 0 || k > super::MAX_THUMB_QUERIES || k > self.part.gallery_size {
            return Err(bad("k is out of range"));
        }
        // Every block a ranking may fetch holds k items (the ranking's work then depends on no
        // size the server chose).
        super::check_blocks(&self.part, &self.pir, k)?;
        match self.plan.ranking {
            PirRanking::Table if self.pir.rank_table.is_none() => Err(bad("no table is offered")),
            PirRanking::Level { level } => {
                match self.pir.levels.get(level).and_then(Option::as_ref) {
                    None => Err(bad("the level has no PIR database")),
                    // As `plan_of`: a record no request can carry is not a plan.
                    Some(db) if !db.shape.record_fits_one_request() => Err(bad(
                        "the level's record needs more queries than a request carries",
                    )),
                    Some(_) => Ok(()),
                }
            }
            PirRanking::Scores { level } => {
                let sd = hintless::entry(&self.part, &self.pir)?;
                if sd.level != level {
                    return Err(bad("the scores' level is not the plan's"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Every public file the plan needs (`GET`s), in the order they are fetched.
    fn files(&self) -> Vec<Request> {
        let (pir, part) = (&self.pir, &self.part);
        let url = |tail: &str| format!("{}/{tail}", pir.answer_url);
        let get = |file: PublicFile, url: String, bytes: u64, wire: u64, sha: &str| Request::Get {
            url,
            bytes,
            wire_bytes: wire,
            sha256: sha.to_ascii_lowercase(),
            file,
        };
        let hint = |name: String, db: &publish::pir::doc::PirDbDoc| {
            let b = db.shape.hint_bytes() as u64;
            get(
                PublicFile::Hint { db: name.clone() },
                url(&format!("{name}/hint")),
                b,
                max_transfer_len(b),
                &db.hint_sha256,
            )
        };
        let cents = |level: usize| {
            let l = &part.levels[level];
            get(
                PublicFile::Centroids { level },
                centroids_url(part, level),
                l.centroids_bytes,
                max_transfer_len(l.centroids_bytes),
                &l.centroids_hash,
            )
        };
        let mut out = vec![hint("thumbs".into(), &pir.thumbs)];
        if let Some(c) = &pir.thumbs_code {
            out.push(get(
                PublicFile::ThumbCode,
                url("thumbs/code"),
                c.bytes,
                max_transfer_len(c.bytes),
                &c.sha256,
            ));
        }
        match self.plan.ranking {
            PirRanking::Table => {
                let t = pir.rank_table.as_ref().expect("checked by check_plan");
                out.push(get(
                    PublicFile::Table,
                    url("rank"),
                    t.bytes,
                    max_transfer_len(t.bytes),
                    &t.sha256,
                ));
            }
            PirRanking::Level { level } => {
                let db = pir.levels[level].as_ref().expect("checked by check_plan");
                out.push(hint(level.to_string(), db));
                out.push(cents(level));
            }
            PirRanking::Scores { level } => {
                let sd = pir.scores.as_ref().expect("checked by check_plan");
                let b = sd.public.bytes;
                out.push(get(
                    PublicFile::Scores,
                    url("scores/hint"),
                    b,
                    max_transfer_len(b),
                    &sd.public.sha256,
                ));
                out.push(cents(level));
            }
        }
        out
    }

    /// The answer to the last request: `bytes` as received (uncompressed).
    pub fn answer(&mut self, cache: &mut PirCache, bytes: &[u8]) -> Step {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Files(mut files) => {
                if files.is_empty() {
                    return self.end_transport("no request was pending");
                }
                let Request::Get { file, .. } = files.remove(0) else {
                    unreachable!("the files stage holds GETs only")
                };
                self.traffic.once += bytes.len() as u64;
                if let Err(e) = self.keep(cache, &file, bytes) {
                    return Step::Done(Err(Failure {
                        kind: FailureKind::PublicFile,
                        message: format!(
                            "A public search file did not match what the gallery published \
                             (the server sent different data, or the gallery changed), so \
                             nothing about your photo was sent: {}",
                            shared::text::excerpt(&e.to_string(), 300)
                        ),
                        refusal: None,
                    }));
                }
                self.stage = Stage::Files(files);
                self.advance(cache)
            }
            Stage::Rank(pending) => {
                self.traffic.down += bytes.len() as u64;
                let ranked = self.rank_answer(cache, pending, bytes);
                self.thumbs(ranked)
            }
            Stage::Thumbs { pending, ranked } => {
                self.traffic.down += bytes.len() as u64;
                self.finish(cache, pending, ranked, bytes)
            }
            Stage::Over => self.end_transport("the search is over"),
        }
    }

    /// The last request failed in transport (HTTP error, timeout, wrong size). Ends the
    /// search with a plain error; no refusal (the failure cannot depend on the photo).
    pub fn transport_failed(&mut self, reason: &str) -> Step {
        self.stage = Stage::Over;
        self.end_transport(reason)
    }

    fn end_transport(&mut self, reason: &str) -> Step {
        self.stage = Stage::Over;
        Step::Done(Err(Failure {
            kind: FailureKind::Transport,
            message: format!(
                "The search did not complete ({}). Nothing about your photo was revealed; \
                 you can search again.",
                shared::text::excerpt(reason, 200)
            ),
            refusal: None,
        }))
    }

    /// Checks a public file and keeps it.
    fn keep(&self, cache: &mut PirCache, file: &PublicFile, bytes: &[u8]) -> Result<()> {
        let (part, pir) = (&self.part, &self.pir);
        match file {
            PublicFile::Hint { db: name } => {
                let db = if name == "thumbs" {
                    &pir.thumbs
                } else {
                    name.parse::<usize>()
                        .ok()
                        .and_then(|l| pir.levels.get(l))
                        .and_then(Option::as_ref)
                        .expect("the driver names offered databases")
                };
                let hint = Hint::from_bytes(&db.shape, bytes, &db.hint_sha256)
                    .map_err(publish::pir::from_lattice)?;
                if cache.hints.len() >= MAX_HINTS {
                    // Room for this search's files: drop those it does not need.
                    let needed = self.needed();
                    cache.hints.retain(|(h, _)| needed.contains(h));
                }
                cache
                    .hints
                    .push((db.hint_sha256.to_ascii_lowercase(), hint));
            }
            PublicFile::Table => {
                let record = load_table(pir, bytes)?;
                let sha = pir.rank_table.as_ref().expect("offered").sha256.clone();
                cache.table = Some((sha.to_ascii_lowercase(), record));
            }
            PublicFile::Scores => {
                let sd = hintless::entry(part, pir)?;
                let public = ScoresPublic::decode(sd, part, bytes)?;
                let keys = ScoresKeys::new(part, sd)?;
                cache.scores = Some((sd.public.sha256.to_ascii_lowercase(), public, keys));
            }
            PublicFile::Centroids { level } => {
                let c = centroids::verify(part, *level, bytes)?;
                if cache.centroids.len() >= MAX_CENTROIDS {
                    let needed = self.needed();
                    cache.centroids.retain(|(h, _)| needed.contains(h));
                }
                cache.centroids.push((c.hash.to_ascii_lowercase(), c));
            }
            PublicFile::ThumbCode => {
                let doc = pir
                    .thumbs_code
                    .as_ref()
                    .expect("the driver names offered files");
                let got = hash_hex(bytes);
                if !got.eq_ignore_ascii_case(&doc.sha256) {
                    return Err(publish::pir::refused(PirError::HashMismatch {
                        what: "thumbnail codebook",
                        expected: doc.sha256.clone(),
                        got,
                    }));
                }
                let book = Codebook::from_bytes(bytes)?;
                if book.side() != part.thumb_side
                    || book.record_len() + 2 * record_features(part, pir)
                        != pir.thumbs.shape.record_len
                {
                    return Err(Error::InvalidParameter {
                        name: "thumbnail codebook",
                        reason: "its pictures are not the thumbnail database's".into(),
                    });
                }
                cache.code = Some((doc.sha256.to_ascii_lowercase(), book));
            }
        }
        Ok(())
    }

    /// The SHA-256 (lower-case) of every public file this search uses.
    fn needed(&self) -> Vec<String> {
        self.files()
            .into_iter()
            .filter_map(|r| match r {
                Request::Get { sha256, .. } => Some(sha256),
                Request::Post { .. } => None,
            })
            .collect()
    }

    /// The next public file, or — once all are held — the ranking step.
    fn advance(&mut self, cache: &PirCache) -> Step {
        if let Stage::Files(files) = &self.stage {
            if let Some(req) = files.first() {
                return Step::Send(req.clone());
            }
        }
        let (part, pir) = (&self.part, &self.pir);
        let features: &[f32] = &self.features;
        let cents = |level: usize| {
            cache
                .centroids(&part.levels[level].centroids_hash)
                .ok_or(Error::InvalidParameter {
                    name: "centroids",
                    reason: "not held".into(),
                })
        };
        let query = match self.plan.ranking {
            PirRanking::Table => {
                let r = match &cache.table {
                    Some((_, t)) => ranked(t, features, self.plan.k),
                    None => Err(Error::InvalidParameter {
                        name: "pir table",
                        reason: "not held".into(),
                    }),
                };
                return self.thumbs(r);
            }
            PirRanking::Level { level } => cents(level)
                .and_then(|c| rank_query(part, pir, level, c, features, &mut self.rng))
                .map(|(body, p)| (format!("{level}"), body, RankPending::Level(level, p))),
            PirRanking::Scores { level } => cents(level)
                .and_then(|c| {
                    let prepared = self.scores_prep.take().ok_or(Error::InvalidParameter {
                        name: "pir scores",
                        reason: "no prepared query".into(),
                    })?;
                    let sd = hintless::entry(part, pir)?;
                    hintless::query_prepared(part, sd, prepared, c, features)
                })
                .map(|(body, p)| ("scores".into(), body, RankPending::Scores(Box::new(p)))),
        };
        match query {
            Ok((tail, body, pending)) => {
                let answer_bytes = match &pending {
                    RankPending::Level(_, p) => p.answer_bytes() as u64,
                    RankPending::Scores(_) => pir.scores.as_ref().expect("offered").answer_bytes,
                };
                self.stage = Stage::Rank(pending);
                self.post(format!("{}/{tail}", pir.answer_url), body, answer_bytes)
            }
            // Every check that does not depend on the photo ran before anything secret
            // existed (`start_prepared`), so this cannot happen with documents that passed
            // them. If it does, whether a query leaves may depend on the photo's block, and
            // the server sees that it did not: treated as an answer that failed its check.
            Err(e) => {
                self.stage = Stage::Over;
                Step::Done(Err(Failure {
                    refusal: Some(Refusal {
                        version: self.part.version.clone(),
                        what: "the ranking query could not be made".into(),
                    }),
                    ..hostile(
                        "The ranking query could not be made from this server's documents",
                        e,
                    )
                }))
            }
        }
    }

    fn post(&mut self, url: String, body: Vec<u8>, answer_bytes: u64) -> Step {
        self.traffic.up += body.len() as u64;
        let body_bytes = body.len() as u64;
        self.body = body;
        Step::Send(Request::Post {
            url,
            body_bytes,
            answer_bytes,
        })
    }

    /// Decodes, checks and ranks the ranking answer with the same work whatever the outcome.
    fn rank_answer(
        &mut self,
        cache: &PirCache,
        pending: RankPending,
        bytes: &[u8],
    ) -> std::result::Result<Ranked, Error> {
        let (pir, k) = (&self.pir, self.plan.k);
        match pending {
            RankPending::Level(level, p) => {
                let db = pir.levels[level].as_ref().expect("offered");
                let hint = cache.hint(&db.hint_sha256).ok_or(Error::InvalidParameter {
                    name: "pir hint",
                    reason: "not held".into(),
                })?;
                rank_level(pir, level, &p, hint, bytes, &self.features, k)
            }
            RankPending::Scores(p) => {
                let sd = hintless::entry(&self.part, pir)?;
                let (_, public, keys) = cache.scores.as_ref().ok_or(Error::InvalidParameter {
                    name: "pir scores",
                    reason: "not held".into(),
                })?;
                hintless::rank(sd, &pir.thumbs.shape, keys, public, &p, bytes, k)
            }
        }
    }

    /// Step 3: exactly `k` thumbnail queries, for the ranking or (after a failure) random
    /// records.
    fn thumbs(&mut self, ranked: std::result::Result<Ranked, Error>) -> Step {
        let (pir, k) = (&self.pir, self.plan.k);
        let query = match self.thumbs_prep.take() {
            Some(p) => thumbs_query_prepared(pir, p, ranked.as_ref().ok(), k, &mut self.rng),
            None => Err(Error::InvalidParameter {
                name: "pir thumbnails",
                reason: "no prepared queries".into(),
            }),
        };
        match query {
            Ok((body, pending)) => {
                let answer_bytes = pending.answer_bytes() as u64;
                self.stage = Stage::Thumbs { pending, ranked };
                self.post(format!("{}/thumbs", pir.answer_url), body, answer_bytes)
            }
            Err(e) => self.end_transport(&e.to_string()),
        }
    }

    fn finish(
        &mut self,
        cache: &PirCache,
        pending: Pending,
        ranked: std::result::Result<Ranked, Error>,
        bytes: &[u8],
    ) -> Step {
        let hint = match cache.hint(&self.pir.thumbs.hint_sha256) {
            Some(h) => h,
            None => return self.end_transport("the thumbnail hint is not held"),
        };
        let code = match &self.pir.thumbs_code {
            None => ThumbCode::Raw {
                side: self.part.thumb_side,
            },
            Some(c) => match cache.code(&c.sha256) {
                Some(book) => ThumbCode::Coded(book),
                None => return self.end_transport("the thumbnail codebook is not held"),
            },
        };
        let refusal = |what: &str| Refusal {
            version: self.part.version.clone(),
            what: what.into(),
        };
        let dim = record_features(&self.part, &self.pir);
        let verify =
            self.pir.thumb_features && matches!(self.plan.ranking, PirRanking::Scores { .. });
        let out = match ranked {
            Ok(r) => {
                // Both checks run whatever the first says.
                let thumbs = thumbs_decode_records(&pending, hint, bytes, &r, &code, dim);
                let scores = match (&thumbs, verify) {
                    (Ok(t), true) => verify_scores(&r, t, &self.features),
                    _ => Ok(()),
                };
                match (thumbs, scores) {
                    (Ok(t), Ok(())) => Ok(Found {
                        ranked: r,
                        thumbnails: t.pixels,
                    }),
                    (Err(e), _) => Err(Failure {
                        refusal: Some(refusal("a thumbnail did not match its published digest")),
                        ..hostile(
                            "A picture did not match the fingerprint the gallery published",
                            e,
                        )
                    }),
                    (_, Err(e)) => Err(Failure {
                        refusal: Some(refusal("a returned item's score was not its own")),
                        ..hostile(
                            "The server's encrypted scores do not match the items it returned",
                            e,
                        )
                    }),
                }
            }
            Err(e) => Err(Failure {
                refusal: Some(refusal("the ranking answer did not check out")),
                ..hostile("The server's ranking answer did not check out", e)
            }),
        };
        Step::Done(out)
    }
}

impl std::fmt::Debug for PirSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PirSearch")
            .field("plan", &self.plan)
            .field("traffic", &self.traffic)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page reads every step as JSON: each request kind and a failure with its refusal
    /// serialise.
    #[test]
    fn requests_and_failures_serialise_for_the_page() {
        let files = [
            PublicFile::Hint {
                db: "thumbs".into(),
            },
            PublicFile::Table,
            PublicFile::Scores,
            PublicFile::Centroids { level: 3 },
        ];
        for file in files {
            let req = Request::Get {
                url: "/x".into(),
                bytes: 1,
                wire_bytes: 2,
                sha256: "ab".into(),
                file,
            };
            let json = serde_json::to_string(&req).unwrap();
            assert!(json.contains("\"method\":\"get\""), "{json}");
        }
        let post = Request::Post {
            url: "/y".into(),
            body_bytes: 3,
            answer_bytes: 4,
        };
        assert!(serde_json::to_string(&post)
            .unwrap()
            .contains("\"answer_bytes\":4"));
        let refusal = Refusal {
            version: "v1".into(),
            what: "a thumbnail did not match its published digest".into(),
        };
        let locked = refusal.failure();
        assert_eq!(locked.kind, FailureKind::Locked);
        assert!(locked.message.contains(REFUSAL_ADVICE));
        let json = serde_json::to_string(&locked).unwrap();
        assert!(json.contains("\"kind\":\"locked\""), "{json}");
        let back: Refusal =
            serde_json::from_str(&serde_json::to_string(&refusal).unwrap()).unwrap();
        assert_eq!(back, refusal);
    }
}
