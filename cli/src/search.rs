//! One search with each protocol. Everything private (the photo's features, its label, the
//! true block, the real row's position) stays in this process; what is sent is only what the
//! protocol's mechanism releases, after the budget guard has accepted its receipt.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use client::block_driver::{BlockGet, BlockSearch, BlockSearchError};
use client::frame_search::{FrameSearch, FrameSearchError};
use dp::mechanism::Receipt;
use embed::classify::Classifier;
use embed::model::Model;
use embed::photo::Framing;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use paper::frame::AnchorFrame;
use paper::privatemail::Anchors;
use publish::blocks::max_transfer_len;
use publish::centroids::{self, centroids_url, Centroids};
use publish::plan::{choose, validate_doc, Choice};
use rand::RngCore;
use serde::Serialize;
use shared::api::{AnchorsResponse, ConfigResponse, PartitionDoc, Ranking};
use shared::params::limits;
use shared::{DMatrix, Mechanism, PrivacyParams};

use crate::budget;
use crate::error::{CliError, Result};
use crate::http::{BodyLimit, Server};

/// Concurrent block downloads at most.
const FETCH_THREADS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Private block retrieval: exact results, privacy costs bytes.
    Blocks,
    /// The anchor frame: one noisy 10-number row among decoys; the server ranks.
    Frame,
    /// The paper's Algorithm 1: one noisy SMLQ step, aligned on the server.
    Paper,
    /// Private information retrieval: the server learns nothing about the photo (LWE); exact
    /// results; no ε spent.
    Pir,
}

/// What a search asks for.
pub struct Query {
    pub protocol: Protocol,
    pub epsilon: f64,
    pub delta: f64,
    pub k: usize,
    pub max_bytes: f64,
    /// PIR: the ranking kind a person chose.
    pub pir_ranking: Option<client::pir_search::RankingKind>,
    pub whole: bool,
    pub max_epsilon: Option<f64>,
    /// Frame and paper: how the Gaussian noise is calibrated.
    pub mechanism: Mechanism,
    pub progress: bool,
}

#[derive(Debug, Serialize)]
pub struct Hit {
    pub id: u64,
    pub label: u32,
    pub class_name: String,
    pub distance: f64,
}

#[derive(Debug, Serialize)]
pub struct Timings {
    pub model_ms: f64,
    pub total_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub protocol: Protocol,
    pub predicted_class: String,
    /// The photo's out-of-distribution score against the anchors' reference, and whether it is
    /// above the calibrated threshold (`embed::ood`): then it does not look like
    /// clothing. `None` for an input with almost no ink (an infinite score).
    pub unfamiliar_score: Option<f32>,
    pub unfamiliar: bool,
    /// The garment is cut off by the photo's edge (`embed::cut`): then the CLI says
    /// `embed::cut::CUT_OFF_MESSAGE`.
    pub cut_off: bool,
    /// This search's release (none when the whole gallery was downloaded).
    pub receipt: Option<Receipt>,
    /// A block search's plan, why it was chosen and the budget (a ceiling) it was chosen in.
    pub plan: Option<Choice>,
    /// A PIR search's plan and bytes up, down and one-time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pir: Option<crate::pir::PirCosts>,
    /// Bytes on the wire, counted as they arrived (not as the server declared them).
    pub bytes_downloaded: u64,
    /// Of those, a block search's blocks (within the plan's `max_bytes`, hence the budget)…
    pub block_bytes_downloaded: u64,
    /// …and its level's centroids (0 when this client held them: once a gallery version).
    pub centroids_bytes_downloaded: u64,
    /// The public anchors' bytes this search downloaded (0 when this client held their copy).
    pub anchors_bytes_downloaded: u64,
    pub results: Vec<Hit>,
    pub budget: dp::budget::Total,
    pub timings: Timings,
}

/// The public anchors, kept by content: read from the cache when the configuration names a
/// copy this client holds (nothing is sent), else downloaded, checked against the
/// configuration's SHA-256 and kept. Then checked whole, here, against the configuration
/// and the model (`AnchorsResponse::check`, the browser client's check too): anchors that
/// do not fit are refused before any search request, whatever the protocol (a server that
/// sends them is not following the protocol), and every later use may rely on their shape.
/// Returns them and the bytes downloaded.
fn anchors(server: &Server, config: &ConfigResponse) -> Result<(AnchorsResponse, u64)> {
    let limit = crate::http::BodyLimit::both(limits::MAX_JSON_BYTES);
    let (bytes, n) =
        crate::pir::public_file(server, "/api/v1/anchors", &config.anchors_sha256, limit)?;
    AnchorsResponse::check_named(&bytes, config).map_err(|e| CliError::Malformed(e.to_string()))?;
    let anchors: AnchorsResponse = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Malformed(format!("the anchors are not valid JSON: {e}")))?;
    anchors
        .check(config, embed::ood::FAMILIARITY_LAYER_DIM)
        .map_err(|e| CliError::Malformed(format!("the anchors: {e}")))?;
    Ok((anchors, n))
}

/// Does the photo look like something the gallery holds? The familiarity model's score
/// against the anchors' public reference (`embed::ood`; checked with the anchors in
/// [`anchors`]) and the photo's own statistics (`embed::photo::Scene`), computed here; the
/// anchors are the same public file for every client, so fetching them reveals nothing about
/// the photo.
fn familiarity(anchors: &AnchorsResponse, framing: &Framing) -> Result<embed::ood::Familiarity> {
    embed::ood::assess(
        framing,
        &anchors.familiarity,
        embed::ood::FamiliarityModel::compiled(),
    )
    .map_err(|e| CliError::Malformed(format!("the anchors' reference: {e}")))
}

/// A class name for the terminal: the server's text, cut and without control characters.
fn class_name(config: &ConfigResponse, label: u32) -> String {
    config
        .class_names
        .get(label as usize)
        .map(|n| shared::text::excerpt(n, 64))
        .unwrap_or_else(|| format!("class {label}"))
}

/// One search with the photo (`framing`: the pipeline's two inputs): `models` are the retrieval
/// model (the features, from `framing.pixels`) and the class model (the class printed and
/// Algorithm 1's label, from `framing.class_pixels`).
pub fn run(
    server: &Server,
    models: (&Model, &Classifier),
    framing: &Framing,
    q: &Query,
) -> Result<Outcome> {
    let pixels = &framing.pixels[..];
    let (model, classifier) = models;
    // After a failed check against this server — under any of its names, addresses or its
    // key — nothing is sent, whatever the protocol (no fallback to a less private one), until
    // `privatemail clear-refusal`; nor to a known name presenting a new key until
    // `privatemail accept-key`. The configuration is the one the gallery's key signed.
    let start = Instant::now();
    let gallery = crate::identity::gate(server)?;
    let config: ConfigResponse = serde_json::from_slice(&gallery.config_body).map_err(|e| {
        CliError::Malformed(format!(
            "{}/api/v1/config: {}",
            server.base,
            shared::text::excerpt(&e.to_string(), 200)
        ))
    })?;
    // Refused alike for every photo (`client::config`).
    client::config::check(&config, crate::QUERY_WEIGHTS)
        .map_err(|e| CliError::Malformed(format!("{e}: update the client")))?;
    let t = Instant::now();
    // The search features over the half-pixel views (`embed::views`).
    let photo = model
        .infer_photo(pixels)
        .map_err(|e| CliError::Malformed(e.to_string()))?;
    let class = classifier
        .classify(&framing.class_pixels)
        .map_err(|e| CliError::Malformed(e.to_string()))?;
    let model_ms = t.elapsed().as_secs_f64() * 1e3;
    let (public_anchors, anchor_bytes) = anchors(server, &config)?;
    let ood = familiarity(&public_anchors, framing)?;
    let mut rng = dp::rng::secure_rng()?;
    let mut pir = None;
    let mut block_bytes = (0, 0);
    let (receipt, plan, bytes, results) = match q.protocol {
        Protocol::Blocks => {
            let (r, p, moved, hits) = blocks(server, &config, &photo.search, q, &mut rng)?;
            block_bytes = moved;
            (r, p, moved.0 + moved.1, hits)
        }
        Protocol::Pir => {
            let (ranked, costs) = crate::pir::search(
                server,
                &gallery,
                &photo.search,
                q.k,
                q.max_bytes,
                q.pir_ranking,
                dp::rng::secure_rng()?,
            )?;
            let hits = ranked
                .hits
                .iter()
                .map(|h| Hit {
                    id: h.id,
                    label: h.label as u32,
                    class_name: class_name(&config, h.label as u32),
                    distance: h.distance as f64,
                })
                .collect();
            let bytes = costs.bytes_down + costs.one_time_bytes_downloaded;
            pir = Some(costs);
            (None, None, bytes, hits)
        }
        Protocol::Frame | Protocol::Paper => {
            let query = (&photo.search[..], class.label);
            let (r, hits) = ranked_by_server(server, &config, &public_anchors, query, q, &mut rng)?;
            (Some(r), None, 0, hits)
        }
    };
    let total = budget::total(&budget::load()?, q.delta)?;
    Ok(Outcome {
        protocol: q.protocol,
        predicted_class: class_name(&config, class.label),
        unfamiliar_score: ood.score.is_finite().then_some(ood.score),
        unfamiliar: ood.unfamiliar,
        cut_off: framing.cut_off,
        receipt,
        plan,
        pir,
        bytes_downloaded: bytes,
        block_bytes_downloaded: block_bytes.0,
        centroids_bytes_downloaded: block_bytes.1,
        anchors_bytes_downloaded: anchor_bytes,
        results,
        budget: total,
        timings: Timings {
            model_ms,
            total_ms: start.elapsed().as_secs_f64() * 1e3,
        },
    })
}

/// The partition document, read within its limit and checked before anything is planned
/// from it: an invalid one is an unusable answer (exit 7).
pub fn partition(server: &Server) -> Result<PartitionDoc> {
    let doc: PartitionDoc =
        server.get_json_within("/api/v1/partition", limits::MAX_PARTITION_DOC_BYTES)?;
    validate_doc(&doc).map_err(|e| CliError::Malformed(e.to_string()))?;
    Ok(doc)
}

/// The plan for `q`: the whole gallery when asked (and allowed), else the plan
/// `publish::plan::choose` takes within the byte budget, a ceiling. Public: reads no feature.
pub fn choose_plan(doc: &PartitionDoc, q: &Query) -> Result<Choice> {
    if q.whole {
        return Choice::asked(doc).map_err(|e| CliError::Usage(e.to_string()));
    }
    Ok(choose(doc, q.epsilon, q.max_bytes)?)
}

/// The centroids of a (public) level: fetched once per version (kept on disk by SHA-256, like
/// PIR's public files), read within the size the document declares (on the wire and
/// decompressed), checked against its hash and decoded by `publish::centroids`. A
/// wrong size, hash or header is an unusable answer (exit 7), like a damaged block. Returns
/// them and the bytes downloaded (0 when cached).
pub fn level_centroids(
    server: &Server,
    doc: &PartitionDoc,
    level: usize,
) -> Result<(Centroids, u64)> {
    let l = doc
        .levels
        .get(level)
        .ok_or_else(|| CliError::Malformed(format!("level {level} is not in the partition")))?;
    let limit = BodyLimit {
        wire: max_transfer_len(l.centroids_bytes),
        decoded: l.centroids_bytes,
    };
    let (bytes, n) =
        crate::pir::public_file(server, &centroids_url(doc, level), &l.centroids_hash, limit)?;
    let c =
        centroids::verify(doc, level, &bytes).map_err(|e| CliError::Malformed(e.to_string()))?;
    Ok((c, n))
}

/// A block search's receipt, plan, bytes on the wire (blocks, centroids) and results.
type Found = (Option<Receipt>, Option<Choice>, (u64, u64), Vec<Hit>);

/// A block search through the shared driver (`client::block_driver`): the driver
/// checks the plan, names the centroids, makes the release, records its receipt in the
/// receipts file (after the `--max-epsilon` guard) and only then hands out the block requests;
/// this function moves the bytes.
fn blocks(
    server: &Server,
    config: &ConfigResponse,
    features: &[f32],
    q: &Query,
    rng: &mut impl RngCore,
) -> Result<Found> {
    let doc = partition(server)?;
    let choice = choose_plan(&doc, q)?;
    let mut search =
        BlockSearch::start(&doc, &choice.plan, features, choice.budget).map_err(block_error)?;
    // The plan's level is public; its centroids are needed only when blocks are released.
    let (cents, cent_bytes) = match search.centroids() {
        Some(c) => {
            let (c, n) = level_centroids(server, &doc, c.level)?;
            (Some(c), n)
        }
        None => (None, 0),
    };
    let receipt = search.release(cents.as_ref(), rng).map_err(block_error)?;
    let mut ledger = budget::Spend::new(q.max_epsilon, q.delta);
    let gets = match search.requests(&mut ledger) {
        Ok(gets) => gets,
        Err(e) => return Err(ledger.error_or(block_error(e))),
    };
    let (fetched, bytes) = match fetch_all(server, &gets, q.progress) {
        Ok(got) => got,
        Err(e) => {
            // Nothing is retried; a release that left stays recorded.
            search.transport_failed();
            return Err(e);
        }
    };
    let refs: Vec<&[u8]> = fetched.iter().map(Vec::as_slice).collect();
    let ranked = search.answer(&refs, q.k).map_err(block_error)?;
    let results = ranked
        .hits
        .iter()
        .map(|h| Hit {
            id: h.id,
            label: h.label as u32,
            class_name: class_name(config, h.label as u32),
            distance: h.distance as f64,
        })
        .collect();
    Ok((receipt, Some(choice), (bytes, cent_bytes), results))
}

/// A block driver's error as the CLI's (its exit code): a plan or release the parameters
/// cannot make is a usage or privacy error (9), the rest the server's (7).
fn block_error(e: BlockSearchError) -> CliError {
    match e {
        BlockSearchError::Plan(_)
        | BlockSearchError::WholeNotAllowed
        | BlockSearchError::OverBudget { .. } => CliError::Usage(e.to_string()),
        BlockSearchError::Release(e) => CliError::Privacy(e),
        BlockSearchError::Ledger(e) => CliError::State {
            path: budget::path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            reason: e.to_string(),
        },
        e => CliError::Malformed(e.to_string()),
    }
}

/// The fetched blocks' bytes in request order, and the bytes counted on the wire.
type Fetched = (Vec<Vec<u8>>, u64);

/// Fetch every released block at once (a few threads over the list, in its random order), by
/// one code path; no retries (a retry could reveal which block mattered). Each block is read
/// within the sizes the document declares for it (on the wire and decompressed) and by the
/// command's deadline; the first failure abandons the whole search (requests not yet sent are
/// dropped, whichever block failed: the order is random and public). Returns the blocks and
/// the bytes counted on the wire.
fn fetch_all(server: &Server, fetch: &[BlockGet], progress: bool) -> Result<Fetched> {
    let total: u64 = fetch.iter().map(|g| g.max_wire_bytes).sum();
    let bar = if progress {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {elapsed}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("{} blocks", fetch.len()));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let out: Mutex<Vec<Option<Result<crate::http::Body>>>> =
        Mutex::new((0..fetch.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..FETCH_THREADS.min(fetch.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(g) = fetch.get(i) else { break };
                if failed.load(Ordering::SeqCst) {
                    break;
                }
                let limit = BodyLimit {
                    wire: g.max_wire_bytes,
                    decoded: g.max_bytes,
                };
                let r = server.get_bounded(&g.url, limit);
                match &r {
                    Ok(body) => bar.inc(body.wire),
                    Err(_) => failed.store(true, Ordering::SeqCst),
                }
                out.lock().expect("no panics while held")[i] = Some(r);
            });
        }
    });
    bar.finish_and_clear();
    let mut wire = 0;
    let mut blocks = Vec::with_capacity(fetch.len());
    let mut first_error = None;
    for r in out.into_inner().expect("threads joined") {
        match r {
            Some(Ok(body)) => {
                wire += body.wire;
                blocks.push(body.bytes);
            }
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            // Not requested: an earlier failure abandoned the search.
            None => {}
        }
    }
    match first_error {
        Some(e) => Err(e),
        None if blocks.len() == fetch.len() => Ok((blocks, wire)),
        None => Err(CliError::Malformed(
            "the block downloads were abandoned".into(),
        )),
    }
}

/// A search by noisy numbers (the frame or Algorithm 1) through the shared driver
/// (`client::frame_search`): the driver makes the release, records its receipt in the
/// receipts file (after the `--max-epsilon` guard) and only then hands out the request; this
/// function moves the bytes.
fn ranked_by_server(
    server: &Server,
    config: &ConfigResponse,
    anchors: &AnchorsResponse,
    (features, label): (&[f32], u32),
    q: &Query,
    rng: &mut impl RngCore,
) -> Result<(Receipt, Vec<Hit>)> {
    // Shapes checked where the anchors were loaded ([`anchors`]); `-k` by the driver.
    let n = anchors.features.len();
    let feats = DMatrix::from_row_iterator(
        n,
        config.feature_dim,
        anchors.features.iter().flatten().map(|&v| v as f64),
    );
    let query: Vec<f64> = features.iter().map(|&v| v as f64).collect();
    let privacy = PrivacyParams {
        epsilon: q.epsilon,
        delta: q.delta,
        mechanism: q.mechanism,
    };
    let mut search = if q.protocol == Protocol::Frame {
        let rows = DMatrix::from_row_iterator(
            n,
            config.frame_dim,
            anchors.frame_rows.iter().flatten().copied(),
        );
        let frame = AnchorFrame::new(&feats, &rows, config.frame_kernel_scale)?;
        FrameSearch::frame(
            config,
            &frame,
            &query,
            &privacy,
            (q.k, Ranking::Proportional),
            rng,
        )
    } else {
        let a = Anchors::new(&feats, &anchors.labels, &config.smlq)?;
        FrameSearch::paper(config, &a, (&query, label), &privacy, q.k, rng)
    }
    .map_err(frame_error)?;
    let receipt = *search.receipt();
    let mut ledger = budget::Spend::new(q.max_epsilon, q.delta);
    let post = match search.request(&mut ledger) {
        Ok(post) => post,
        Err(e) => return Err(ledger.error_or(frame_error(e))),
    };
    let (path, content_type, body, max) = (
        post.path,
        post.content_type,
        post.body.to_vec(),
        post.max_answer_bytes,
    );
    let answer = match server.post_body(path, content_type, body, max) {
        Ok(bytes) => bytes,
        Err(e) => {
            // The release left (or may have): it stays recorded.
            search.transport_failed();
            return Err(e);
        }
    };
    let picked = search.answer(&answer).map_err(frame_error)?;
    let hits = picked
        .matches
        .iter()
        .map(|m| Hit {
            id: m.id,
            label: m.label,
            class_name: class_name(config, m.label),
            distance: m.distance,
        })
        .collect();
    Ok((receipt, hits))
}

/// A driver's error as the CLI's (its exit code): a release that cannot be made is a privacy
/// parameter's fault (9), an answer that cannot be read the server's (7).
fn frame_error(e: FrameSearchError) -> CliError {
    match e {
        FrameSearchError::Release(e) => CliError::Privacy(e),
        FrameSearchError::K { max } => CliError::Usage(format!("-k must be in 1..={max}")),
        FrameSearchError::Ledger(e) => CliError::State {
            path: budget::path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            reason: e.to_string(),
        },
        e => CliError::Malformed(e.to_string()),
    }
}
