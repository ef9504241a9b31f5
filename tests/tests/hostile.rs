//! Clients that a hostile server cannot hurt. A fake server in this process (`fake`) forwards
//! to the real server binary but answers, per case, with what a hostile server would send: a
//! gzip bomb, oversized or inconsistent partition documents, a huge declared item count, a
//! block cut short and then held open, a partition dripped a byte at a time, a redirect to
//! another port, a 10 MB error message with terminal escapes, and a document whose planning
//! used to take minutes, and a level's centroids file damaged (one byte flipped: its hash is
//! wrong) or one byte longer than declared, and a configuration naming a query model the client
//! does not run. The `privatemail` CLI must exit with its documented code, on its own,
//! within 60 s and with a peak RSS ≤ 256 MB in every case (measured with `wait4` by the `peak-rss`
//! launcher); the page
//! must show a plain error in headless Chromium and stay alive. A well-formed query model of
//! other widths, served consistently, must change only what the page's search finds.
//!
//! `PM_HOSTILE_CLI=/path/to/privatemail` runs the CLI cases against another binary (e.g. an
//! older one, to see them fail); a watchdog kills a run past 1 GiB or 75 s.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use embed::model::{weights_version, Model};
use embed::weights::{Arch, Weights};
use privatemail_e2e::browser::{self, js, load_photo, wait_for, ROOT};
use privatemail_e2e::fake::{self, Body, Reply, Request};
use privatemail_e2e::photo_png as photo;
use privatemail_e2e::{demo_server, test_image};
use publish::blocks::file_len;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use shared::api::PartitionDoc;

const LIMIT_SECS: f64 = 60.0;
const LIMIT_RSS_MB: f64 = 256.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Honest,
    GzipBomb,
    HugeDocument,
    InconsistentSizes,
    HugeItemCount,
    StalledBlock,
    SlowDrip,
    SlowDripShortTimeout,
    OtherPort,
    RedirectOnce,
    RedirectLoop,
    HugeError,
    SlowPlanning,
    DamagedCentroids,
    LongCentroids,
    /// The public anchors (the out-of-distribution check's input) of another feature width.
    MismatchedAnchors,
    /// The public anchors with one value changed, the configuration still naming the real
    /// ones' SHA-256.
    MisnamedAnchors,
    /// The anchors' out-of-distribution reference of the wrong shape (a 3-value precision for
    /// the layer means), named in the configuration.
    MalformedReference,
    /// The configuration names the anchors' SHA-256 as a path out of the cache
    /// (`../../../../../../dev/zero`).
    TraversingAnchorsName,
    /// Not in `CASES` (its own tests): every PIR thumbnail answer with ten bytes inverted.
    DamagedPirThumbs,
    /// Not in `CASES`: a PIR document whose packing seed is its query seed.
    RelatedSeeds,
    /// Not in `CASES`: a configuration naming a query model the client does not run.
    OtherQueryModel,
    /// Not in `CASES`: a configuration naming nine classes (the class model has ten), with the
    /// real anchors.
    NineClasses,
    /// Not in `CASES`: a configuration whose frame kernel scale is 0.00537 (its least weight
    /// subnormal, where no rounding bound holds), with the real anchors.
    TinyKernelScale,
    /// Not in `CASES`: a configuration whose suggested δ is 0.999 (less noise for the same ε,
    /// were a client to take it).
    GenerousDelta,
    /// Not in `CASES`: the page's samples (`samples.js`) with malformed published features.
    MalformedSamples,
    /// Not in `CASES`: the page's samples published as another gallery model's features.
    OtherSamplesModel,
    /// Not in `CASES`: a well-formed query model of other widths (`pkg/query.bin`), named in
    /// the configuration, with the real anchors; the page's familiarity model
    /// (`pkg/familiarity.bin`) as [`Hostile::familiarity`] says.
    OtherWidthQueryModel,
    /// Not in `CASES` (its own tests): every release answered 500 — a noisy-numbers search
    /// (`POST /api/v1/search`) and every block — after the server has received it.
    RefusedRelease,
}

const CASES: [Case; 19] = [
    Case::Honest,
    Case::GzipBomb,
    Case::HugeDocument,
    Case::InconsistentSizes,
    Case::HugeItemCount,
    Case::StalledBlock,
    Case::SlowDrip,
    Case::SlowDripShortTimeout,
    Case::OtherPort,
    Case::RedirectOnce,
    Case::RedirectLoop,
    Case::HugeError,
    Case::SlowPlanning,
    Case::DamagedCentroids,
    Case::LongCentroids,
    Case::MismatchedAnchors,
    Case::MisnamedAnchors,
    Case::MalformedReference,
    Case::TraversingAnchorsName,
];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Honest => "honest",
            Case::GzipBomb => "gzip-bomb",
            Case::HugeDocument => "huge-document",
            Case::InconsistentSizes => "inconsistent-sizes",
            Case::HugeItemCount => "huge-item-count",
            Case::StalledBlock => "stalled-block",
            Case::SlowDrip => "slow-drip",
            Case::SlowDripShortTimeout => "slow-drip-timeout-5",
            Case::OtherPort => "other-port",
            Case::RedirectOnce => "redirect-once",
            Case::RedirectLoop => "redirect-loop",
            Case::HugeError => "huge-error",
            Case::SlowPlanning => "slow-planning",
            Case::DamagedCentroids => "damaged-centroids",
            Case::LongCentroids => "long-centroids",
            Case::MismatchedAnchors => "mismatched-anchors",
            Case::MisnamedAnchors => "misnamed-anchors",
            Case::MalformedReference => "malformed-reference",
            Case::TraversingAnchorsName => "traversing-anchors-name",
            Case::DamagedPirThumbs => "damaged-pir-thumbs",
            Case::RelatedSeeds => "related-seeds",
            Case::OtherQueryModel => "other-query-model",
            Case::NineClasses => "nine-classes",
            Case::TinyKernelScale => "tiny-kernel-scale",
            Case::GenerousDelta => "generous-delta",
            Case::MalformedSamples => "malformed-samples",
            Case::OtherSamplesModel => "other-samples-model",
            Case::OtherWidthQueryModel => "other-width-query-model",
            Case::RefusedRelease => "refused-release",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Case::Honest => "honest answers, forwarded",
            Case::GzipBomb => "every block a gzip bomb (1 GiB of zeros, ~1 MB on the wire)",
            Case::HugeDocument => "a 400 MB partition document (chunked, no length)",
            Case::InconsistentSizes => "every block declared as 1 byte (would bypass --max-kib)",
            Case::HugeItemCount => "blocks declaring 4·10⁹ items and 2⁶³ bytes",
            Case::StalledBlock => "blocks cut at half their Content-Length, connection held open",
            Case::SlowDrip => "the partition sent one byte a second (default deadline)",
            Case::SlowDripShortTimeout => "the same with --timeout 5",
            Case::OtherPort => "blocks redirected to another port",
            Case::RedirectOnce => "blocks redirected once within the origin (allowed)",
            Case::RedirectLoop => "blocks redirected to themselves, endlessly (same origin)",
            Case::HugeError => "a 10 MB error message with terminal escapes",
            Case::SlowPlanning => "16 levels × 8,192 blocks, 8,193 multiplicities (O(B³) planning)",
            Case::DamagedCentroids => "a level's centroids file with one byte flipped (wrong hash)",
            Case::LongCentroids => "a level's centroids file one byte longer than declared",
            Case::MismatchedAnchors => {
                "public anchors of 3 features (the photo check's input), named in the configuration: refused before any search request"
            }
            Case::MisnamedAnchors => {
                "public anchors with one value changed, not the SHA-256 the configuration names: refused before any search request"
            }
            Case::MalformedReference => {
                "the anchors' out-of-distribution reference of the wrong shape, named in the configuration: refused before any search request"
            }
            Case::TraversingAnchorsName => {
                "the anchors' SHA-256 named as ../../../../../../dev/zero (a path out of the cache): refused before it is read or any search request"
            }
            Case::DamagedPirThumbs => "every PIR thumbnail answer with ten bytes inverted",
            Case::RelatedSeeds => "a PIR document whose packing seed is its query seed",
            Case::OtherQueryModel => "a configuration naming another query model",
            Case::NineClasses => "a configuration naming nine classes",
            Case::TinyKernelScale => "a configuration whose frame kernel scale is 0.00537",
            Case::GenerousDelta => "a configuration suggesting δ = 0.999",
            Case::MalformedSamples => "samples with malformed published features",
            Case::OtherSamplesModel => "samples published as another gallery model's features",
            Case::OtherWidthQueryModel => {
                "a query model of other widths (16 and 24), named in the configuration, with the real anchors; the familiarity model withheld, altered, then served"
            }
            Case::RefusedRelease => "every release received, then answered 500",
        }
    }

    /// The documented exit code (`cli/src/main.rs`).
    fn exit_code(self) -> i32 {
        match self {
            Case::Honest | Case::RedirectOnce => 0,
            Case::StalledBlock | Case::SlowDrip | Case::SlowDripShortTimeout => 3,
            Case::HugeError | Case::SlowPlanning => 6,
            _ => 7,
        }
    }

    fn from_name(n: &str) -> Option<Case> {
        CASES
            .iter()
            .copied()
            .chain([
                Case::DamagedPirThumbs,
                Case::RelatedSeeds,
                Case::OtherQueryModel,
                Case::NineClasses,
                Case::TinyKernelScale,
                Case::GenerousDelta,
                Case::OtherWidthQueryModel,
                Case::RefusedRelease,
            ])
            .find(|c| c.name() == n)
    }
}

/// What the fake server needs: where the real one is, and the answers prepared from it.
struct Hostile {
    real: String,
    other: String,
    http: reqwest::Client,
    doc: PartitionDoc,
    bomb: Vec<u8>,
    other_hits: Arc<AtomicUsize>,
    /// Requests answered in `Case::DamagedPirThumbs`, and PIR queries (`POST`) among them.
    damaged_hits: AtomicUsize,
    damaged_posts: AtomicUsize,
    /// Search requests (partition, blocks, PIR) sent after mismatched anchors: must be none.
    after_bad_anchors: AtomicUsize,
    /// API requests other than the configuration, the anchors and the gallery map (which the
    /// page reads beside it, before it can check it) in `Case::OtherQueryModel`.
    after_other_model: AtomicUsize,
    /// Every PIR request (`METHOD path body-bytes`, the case prefix removed), in order.
    pir_log: Mutex<Vec<String>>,
    /// Releases received and answered 500 in `Case::RefusedRelease`: search bodies (`POST
    /// /api/v1/search`) and block requests.
    refused_searches: AtomicUsize,
    refused_blocks: AtomicUsize,
    /// The case for requests without a `/case/{name}` prefix (the page's).
    page_case: Mutex<Case>,
    /// What `Case::OtherWidthQueryModel` serves, prepared by its test
    /// ([`other_width_query_model`]).
    other_width: OnceLock<OtherWidth>,
    /// How `Case::OtherWidthQueryModel` answers for the page's familiarity model, and the
    /// requests for it.
    familiarity: Mutex<Familiarity>,
    familiarity_fetches: AtomicUsize,
}

/// The page's familiarity model (`pkg/familiarity.bin`) as the server answers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Familiarity {
    /// Not found (404).
    Withheld,
    /// The real file with one byte changed.
    Altered,
    /// The real file followed by 4 MiB more.
    Oversized,
    /// The real file, a byte a second (past the page's deadline).
    Dripped,
    /// Redirected to the same path on another origin (which would serve the real file).
    Elsewhere,
    /// The real file.
    Served,
}

/// A query model of other widths and the answers consistent with it
/// (`Case::OtherWidthQueryModel`).
struct OtherWidth {
    /// `pkg/query.bin`: the model's file (8 bits).
    model: Vec<u8>,
    /// `GET /api/v1/anchors`: the real anchors (their familiarity reference is the
    /// familiarity model's, which every client pins, whatever the query model).
    anchors: Vec<u8>,
}

/// A well-formed query model of other widths (16 and 24 channels, seeded He-uniform weights,
/// small biases: well within the file's bounds), written in 8 bits, and the real server's
/// anchors (at `real`) as they are: the familiarity reference is fitted with the familiarity
/// model (`embed::ood::FamiliarityModel`), never the query model. Also the model as the page
/// parses the file.
fn other_width_query_model(real: &str) -> (OtherWidth, Model) {
    let arch = Arch { c1: 16, c2: 24 };
    let mut rng = ChaCha8Rng::seed_from_u64(16_24);
    let mut w = Weights::zeros(arch);
    let fans = arch.fans();
    for (k, t) in w.tensors_mut().into_iter().enumerate() {
        // Weights (even tensors) He-uniform for their fan-in, biases (odd) within ±0.01.
        let bound = if k % 2 == 0 {
            (6.0 / fans[k / 2] as f32).sqrt()
        } else {
            0.01
        };
        for v in t.iter_mut() {
            *v = (rng.random::<f32>() * 2.0 - 1.0) * bound;
        }
    }
    let bytes = w.to_bytes_8bit();
    let model = Model::from_bytes(&bytes).expect("a well-formed model file");
    assert_eq!(model.w.arch, arch);
    let url = format!("{real}/api/v1/anchors");
    let anchors = reqwest::blocking::get(&url)
        .unwrap()
        .bytes()
        .unwrap()
        .to_vec();
    let other = OtherWidth {
        model: bytes,
        anchors,
    };
    (other, model)
}

/// 1 GiB of zeros, gzip: about 1 MB.
fn gzip_bomb() -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..1024 {
        e.write_all(&zeros).unwrap();
    }
    e.finish().unwrap()
}

/// A document whose levels each have `MAX_BLOCKS` one-item blocks and as many multiplicities plus one (one item
/// in every block, the rest in none): valid, and O(B³) for the planner this replaced.
fn slow_planning_doc(real: &PartitionDoc) -> PartitionDoc {
    let b = shared::params::limits::MAX_BLOCKS;
    let dim = real.feature_dim;
    let bytes = file_len(1, dim as u64, real.thumb_side as u64).unwrap();
    let mut multiplicity = vec![0; b + 1];
    multiplicity[0] = real.gallery_size as u64 - 1;
    multiplicity[b] = 1;
    let level = shared::api::LevelDoc {
        blocks: b as u32,
        overlap: real.levels[1].overlap,
        whole: false,
        centroids_bytes: publish::centroids::file_len(b as u64, dim as u64).unwrap(),
        centroids_hash: "cd".repeat(32),
        sizes: vec![1; b],
        bytes: vec![bytes; b],
        transfer_bytes: vec![bytes; b],
        hashes: vec!["ab".repeat(32); b],
        multiplicity,
        coverage: real.levels[1].coverage,
    };
    PartitionDoc {
        version: "slow".into(),
        max_share: 1.0,
        allow_full_download: false,
        levels: vec![level; shared::params::limits::MAX_LEVELS],
        ..real.clone()
    }
}

/// `samples.js` with each sample's published features replaced, in turn, by a vector of the
/// wrong length, a zero vector and one twice unit length (`Case::MalformedSamples`).
fn malformed_samples(js: &[u8]) -> Vec<u8> {
    let js = String::from_utf8(js.to_vec()).unwrap();
    let mut out = String::new();
    let mut rest = js.as_str();
    let mut k = 0;
    while let Some(at) = rest.find("features: [") {
        let open = at + "features: [".len();
        let close = open + rest[open..].find(']').unwrap();
        let values: Vec<&str> = rest[open..close].split(',').collect();
        let bad = match k % 3 {
            0 => values[..values.len() - 1].join(","),
            1 => vec!["0"; values.len()].join(","),
            _ => values
                .iter()
                .map(|v| (2.0 * v.trim().parse::<f64>().unwrap()).to_string())
                .collect::<Vec<_>>()
                .join(","),
        };
        out.push_str(&rest[..open]);
        out.push_str(&bad);
        rest = &rest[close..];
        k += 1;
    }
    assert_eq!(k, 10, "ten samples");
    out.push_str(rest);
    out.into_bytes()
}

/// `samples.js` naming another gallery model as its features' (`Case::OtherSamplesModel`):
/// the features themselves are well-formed.
fn other_samples_model(js: &[u8]) -> Vec<u8> {
    let js = String::from_utf8(js.to_vec()).unwrap();
    let at = js.find("SAMPLES_MODEL = \"").unwrap() + "SAMPLES_MODEL = \"".len();
    let end = at + js[at..].find('"').unwrap();
    format!("{}{OTHER_QUERY_MODEL}{}", &js[..at], &js[end..]).into_bytes()
}

/// The query model a hostile configuration names in `Case::OtherQueryModel`.
const OTHER_QUERY_MODEL: &str = "cnn-v2-0123456789abcdef";

fn json_reply(v: &impl serde::Serialize) -> Reply {
    Reply::bytes(200, "application/json", serde_json::to_vec(v).unwrap())
}

impl Hostile {
    /// The gallery's identity as a consistent liar serves it: this fake's own key, signing the
    /// configuration this case serves (so what each case tests is its own lie, not the
    /// signature; `tests/tests/e2e/identity.rs` tests the signature).
    async fn identity(&self, case: Case) -> Reply {
        let get = Request {
            method: "GET".into(),
            path: "/api/v1/config".into(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let config = Box::pin(self.answer(case, "/api/v1/config", &get)).await;
        let Body::Bytes(bytes) = config.body else {
            return fake::forward(&self.http, &self.real, "/api/v1/identity", &get).await;
        };
        use ed25519_dalek::Signer;
        use sha2::Digest;
        let key = ed25519_dalek::SigningKey::from_bytes(&[42; 32]);
        let digest: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        json_reply(&shared::identity::IdentityDoc {
            key: hex::encode(key.verifying_key().as_bytes()),
            config_sha256: hex::encode(digest),
            signature: hex::encode(
                key.sign(&shared::identity::signed_message(&digest))
                    .to_bytes(),
            ),
        })
    }

    /// The real server's uncompressed centroids file at `path`.
    async fn real_centroids(&self, path: &str) -> Vec<u8> {
        let r = self
            .http
            .get(format!("{}{path}", self.real))
            .header("accept-encoding", "identity")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.bytes().await.unwrap().to_vec()
    }

    /// The real anchors, altered for `case`: 3 features each (mismatched), or one value
    /// changed (misnamed).
    async fn altered_anchors(&self, case: Case, req: &Request) -> Vec<u8> {
        let bytes = fake::identity_body(&self.http, &self.real, "/api/v1/anchors", req).await;
        let mut a: Value = serde_json::from_slice(&bytes).unwrap();
        if case == Case::MalformedReference {
            a["familiarity"]["layers"]["precision"] = json!([1.0, 0.0, 1.0]);
            return serde_json::to_vec(&a).unwrap();
        }
        let features = a["features"].as_array_mut().unwrap();
        if case == Case::MismatchedAnchors {
            for f in features {
                f.as_array_mut().unwrap().truncate(3);
            }
        } else {
            features[0][0] = json!(features[0][0].as_f64().unwrap() + 0.25);
        }
        serde_json::to_vec(&a).unwrap()
    }

    async fn answer(&self, case: Case, path: &str, req: &Request) -> Reply {
        let partition = path == "/api/v1/partition";
        let block = path.starts_with("/api/v1/blocks/");
        let centroids = block && path.ends_with("/centroids");
        // The retrieval's requests (hints, ranking files, queries), not the public PIR
        // document: the CLI reads it by version (`/api/v1/pir/{version}`, so its two document
        // reads cannot straddle a switch), the page still at `/api/v1/pir`.
        let document = path
            .strip_prefix("/api/v1/pir/")
            .is_some_and(|rest| !rest.contains('/'));
        if path.starts_with("/api/v1/pir/") && !document {
            let line = format!("{} {path} {}", req.method, req.body.len());
            self.pir_log.lock().unwrap().push(line);
        }
        if case == Case::DamagedPirThumbs {
            self.damaged_hits.fetch_add(1, Ordering::SeqCst);
            if req.method == "POST" && path.starts_with("/api/v1/pir/") {
                self.damaged_posts.fetch_add(1, Ordering::SeqCst);
            }
        }
        if path == "/api/v1/identity" {
            return self.identity(case).await;
        }
        match case {
            Case::MismatchedAnchors | Case::MisnamedAnchors | Case::MalformedReference
                if path == "/api/v1/anchors" =>
            {
                let bytes = self.altered_anchors(case, req).await;
                Reply::bytes(200, "application/json", bytes)
            }
            Case::TraversingAnchorsName if path == "/api/v1/config" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["anchors_sha256"] = json!("../../../../../../dev/zero");
                json_reply(&config)
            }
            Case::MismatchedAnchors | Case::MalformedReference if path == "/api/v1/config" => {
                // A consistent liar: the configuration names the altered anchors.
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                let altered = self.altered_anchors(case, req).await;
                config["anchors_sha256"] = json!(publish::blocks::hash_hex(&altered));
                json_reply(&config)
            }
            Case::MismatchedAnchors
            | Case::MisnamedAnchors
            | Case::MalformedReference
            | Case::TraversingAnchorsName
                if partition || block || path.starts_with("/api/v1/pir") =>
            {
                self.after_bad_anchors.fetch_add(1, Ordering::SeqCst);
                fake::forward(&self.http, &self.real, path, req).await
            }
            Case::OtherQueryModel if path == "/api/v1/config" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["query_model_version"] = json!(OTHER_QUERY_MODEL);
                json_reply(&config)
            }
            Case::NineClasses if path == "/api/v1/config" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["smlq"]["num_classes"] = json!(9);
                json_reply(&config)
            }
            Case::TinyKernelScale if path == "/api/v1/config" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["frame_kernel_scale"] = json!(0.00537);
                json_reply(&config)
            }
            Case::GenerousDelta if path == "/api/v1/config" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["privacy_defaults"]["delta"] = json!(0.999);
                json_reply(&config)
            }
            Case::OtherQueryModel | Case::NineClasses | Case::TinyKernelScale
                if path.starts_with("/api/v1/")
                    && !matches!(path, "/api/v1/anchors" | "/api/v1/gallery-map") =>
            {
                self.after_other_model.fetch_add(1, Ordering::SeqCst);
                fake::forward(&self.http, &self.real, path, req).await
            }
            Case::MalformedSamples | Case::OtherSamplesModel if path == "/samples.js" => {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let rewritten = if case == Case::MalformedSamples {
                    malformed_samples(&bytes)
                } else {
                    other_samples_model(&bytes)
                };
                Reply::bytes(200, "text/javascript", rewritten)
            }
            Case::OtherWidthQueryModel if path == "/pkg/query.bin" => {
                let other = self.other_width.get().expect("the other model, prepared");
                Reply::bytes(200, "application/octet-stream", other.model.clone())
            }
            Case::OtherWidthQueryModel if path == "/pkg/familiarity.bin" => {
                self.familiarity_fetches.fetch_add(1, Ordering::SeqCst);
                let how = *self.familiarity.lock().unwrap();
                let real = || fake::identity_body(&self.http, &self.real, path, req);
                match how {
                    Familiarity::Withheld => Reply::bytes(404, "text/plain", b"not found".to_vec()),
                    Familiarity::Served => fake::forward(&self.http, &self.real, path, req).await,
                    Familiarity::Altered => {
                        let mut bytes = real().await;
                        // A weight in the middle of the file: it still parses as a model.
                        let mid = bytes.len() / 2;
                        bytes[mid] ^= 1;
                        Reply::bytes(200, "application/octet-stream", bytes)
                    }
                    Familiarity::Oversized => {
                        let mut bytes = real().await;
                        bytes.extend(std::iter::repeat_n(7u8, 4 << 20));
                        Reply::bytes(200, "application/octet-stream", bytes)
                    }
                    Familiarity::Dripped => Reply {
                        body: Body::Drip {
                            bytes: real().await,
                            every: Duration::from_secs(1),
                        },
                        ..Reply::bytes(200, "application/octet-stream", Vec::new())
                    },
                    Familiarity::Elsewhere => Reply::bytes(302, "text/plain", Vec::new())
                        .header("location", &format!("{}{path}", self.other)),
                }
            }
            Case::OtherWidthQueryModel if path == "/api/v1/anchors" => {
                let other = self.other_width.get().expect("the other model, prepared");
                Reply::bytes(200, "application/json", other.anchors.clone())
            }
            Case::OtherWidthQueryModel if path == "/api/v1/config" => {
                // A consistent liar: the configuration names the model it serves and the
                // anchors fitted with it.
                let other = self.other_width.get().expect("the other model, prepared");
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut config: Value = serde_json::from_slice(&bytes).unwrap();
                config["query_model_version"] = json!(weights_version(&other.model));
                config["anchors_sha256"] = json!(publish::blocks::hash_hex(&other.anchors));
                json_reply(&config)
            }
            Case::RelatedSeeds if req.method == "POST" && path.starts_with("/api/v1/pir/") => {
                self.damaged_posts.fetch_add(1, Ordering::SeqCst);
                fake::forward(&self.http, &self.real, path, req).await
            }
            // The current version's document, or the one of a named version (the CLI asks for
            // the partition's).
            Case::RelatedSeeds
                if req.method == "GET"
                    && (path == "/api/v1/pir"
                        || path
                            .strip_prefix("/api/v1/pir/")
                            .is_some_and(|v| !v.contains('/'))) =>
            {
                let bytes = fake::identity_body(&self.http, &self.real, path, req).await;
                let mut doc: publish::pir::doc::PirDoc = serde_json::from_slice(&bytes).unwrap();
                let sd = doc
                    .scores
                    .as_mut()
                    .expect("the hintless ranking is offered");
                sd.packing_seed = sd.query_seed.clone();
                doc.rank_table = None; // steer every client to the hintless ranking
                json_reply(&doc)
            }
            Case::DamagedPirThumbs if req.method == "POST" && path.ends_with("/thumbs") => {
                let r = fake::forward(&self.http, &self.real, path, req).await;
                let Body::Bytes(mut bytes) = r.body else {
                    unreachable!("forward answers with bytes")
                };
                // Every bit of ten bytes inverted: whatever the entries' width on the wire
                // (`Shape::answer_bits`, packed end to end), whole entries flip, and the
                // records they carry decode wrong.
                bytes[100..110].iter_mut().for_each(|b| *b ^= 0xff);
                Reply {
                    status: r.status,
                    headers: r.headers,
                    body: Body::Bytes(bytes),
                }
            }
            Case::RefusedRelease if req.method == "POST" && path == "/api/v1/search" => {
                // The release arrived whole: the server holds it, whatever it answers.
                assert!(!req.body.is_empty());
                self.refused_searches.fetch_add(1, Ordering::SeqCst);
                let body =
                    json!({"error": {"code": "internal", "message": "refused after reading"}});
                Reply::bytes(500, "application/json", serde_json::to_vec(&body).unwrap())
            }
            Case::RefusedRelease if block && !centroids => {
                self.refused_blocks.fetch_add(1, Ordering::SeqCst);
                let body =
                    json!({"error": {"code": "internal", "message": "refused after reading"}});
                Reply::bytes(500, "application/json", serde_json::to_vec(&body).unwrap())
            }
            Case::DamagedCentroids if centroids => {
                let mut bytes = self.real_centroids(path).await;
                *bytes.last_mut().unwrap() ^= 1;
                Reply::bytes(200, "application/octet-stream", bytes)
            }
            Case::LongCentroids if centroids => {
                let mut bytes = self.real_centroids(path).await;
                bytes.push(0);
                Reply::bytes(200, "application/octet-stream", bytes)
            }
            Case::GzipBomb if block => {
                Reply::bytes(200, "application/octet-stream", self.bomb.clone())
                    .header("content-encoding", "gzip")
            }
            Case::HugeDocument if partition => {
                let head = r#"{"version":"v","gallery_size":1000,"feature_dim":64,"thumb_side":28,"blocks_url":"/b","max_share":1,"allow_full_download":true,"coverage_k":8,"levels":[{"blocks":1,"overlap":"none","hashes":["#;
                let unit = format!("\"{}\",", "ab".repeat(32));
                Reply {
                    status: 200,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: Body::Generated {
                        head: head.as_bytes().to_vec(),
                        unit: unit.into_bytes(),
                        total: 400 << 20,
                    },
                }
            }
            Case::InconsistentSizes if partition => {
                let mut d = self.doc.clone();
                for l in &mut d.levels {
                    l.bytes.iter_mut().for_each(|b| *b = 1);
                    l.transfer_bytes.iter_mut().for_each(|b| *b = 1);
                }
                json_reply(&d)
            }
            Case::HugeItemCount if partition => {
                let mut d = self.doc.clone();
                for l in &mut d.levels {
                    l.sizes.iter_mut().for_each(|n| *n = 4_000_000_000);
                    l.bytes.iter_mut().for_each(|b| *b = u64::MAX / 2);
                    l.transfer_bytes.iter_mut().for_each(|b| *b = u64::MAX / 2);
                }
                json_reply(&d)
            }
            Case::StalledBlock if block => {
                // The block as the real server sends it (gzip when asked), cut and held open.
                let r = fake::forward(&self.http, &self.real, path, req).await;
                let Body::Bytes(bytes) = r.body else {
                    unreachable!("forward answers with bytes")
                };
                Reply {
                    status: r.status,
                    headers: r.headers,
                    body: Body::HalfThenStall(bytes),
                }
            }
            Case::SlowDrip | Case::SlowDripShortTimeout if partition => Reply {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: Body::Drip {
                    bytes: serde_json::to_vec(&self.doc).unwrap(),
                    every: Duration::from_secs(1),
                },
            },
            Case::OtherPort if block => Reply::bytes(302, "text/plain", Vec::new())
                .header("location", &format!("{}{path}", self.other)),
            Case::RedirectOnce if block => Reply::bytes(302, "text/plain", Vec::new())
                .header("location", &format!("/case/honest{path}")),
            Case::RedirectLoop if block => Reply::bytes(302, "text/plain", Vec::new())
                .header("location", &format!("/case/redirect-loop{path}")),
            Case::HugeError if partition => {
                let message = format!("\u{1b}[2J\u{1b}]0;pwned\u{7}{}", "A".repeat(10 << 20));
                let body = json!({"error": {"code": "internal", "message": message}});
                Reply::bytes(500, "application/json", serde_json::to_vec(&body).unwrap())
            }
            Case::SlowPlanning if partition => json_reply(&slow_planning_doc(&self.doc)),
            // Its blocks do not exist: the search ends on a refusal once planned.
            Case::SlowPlanning if block => {
                let body = json!({"error": {"code": "not_found", "message": "no such block"}});
                Reply::bytes(404, "application/json", serde_json::to_vec(&body).unwrap())
            }
            _ => fake::forward(&self.http, &self.real, path, req).await,
        }
    }
}

/// The fake server (and the other port it redirects to) in front of `real`.
async fn hostile(real: &str) -> (String, Arc<Hostile>) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let doc: PartitionDoc = http
        .get(format!("{real}/api/v1/partition"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    publish::plan::validate_doc(&doc).expect("the real document is valid");
    let other_hits = Arc::new(AtomicUsize::new(0));
    let (hits, fwd_http, fwd_real) = (other_hits.clone(), http.clone(), real.to_string());
    let other = fake::start(fake::handler(move |req: Request| {
        hits.fetch_add(1, Ordering::SeqCst);
        let (http, real) = (fwd_http.clone(), fwd_real.clone());
        async move { fake::forward(&http, &real, &req.path.clone(), &req).await }
    }))
    .await;
    let bomb = tokio::task::spawn_blocking(gzip_bomb).await.unwrap();
    let state = Arc::new(Hostile {
        real: real.to_string(),
        other,
        http,
        doc,
        bomb,
        other_hits,
        damaged_hits: AtomicUsize::new(0),
        damaged_posts: AtomicUsize::new(0),
        after_bad_anchors: AtomicUsize::new(0),
        after_other_model: AtomicUsize::new(0),
        pir_log: Mutex::new(Vec::new()),
        refused_searches: AtomicUsize::new(0),
        refused_blocks: AtomicUsize::new(0),
        page_case: Mutex::new(Case::Honest),
        other_width: OnceLock::new(),
        familiarity: Mutex::new(Familiarity::Served),
        familiarity_fetches: AtomicUsize::new(0),
    });
    let s = state.clone();
    let base = fake::start(fake::handler(move |req: Request| {
        let s = s.clone();
        async move {
            // `/case/{name}/…` picks the case; anything else is the page's current case.
            let (case, path) = match req.path.strip_prefix("/case/") {
                Some(rest) => {
                    let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
                    (
                        Case::from_name(name).unwrap_or(Case::Honest),
                        format!("/{path}"),
                    )
                }
                None => (*s.page_case.lock().unwrap(), req.path.clone()),
            };
            s.answer(case, &path, &req).await
        }
    }))
    .await;
    (base, state)
}

/// The demo server, the hostile server in front of it (on a runtime kept alive with it), the
/// CLI binary and a folder for a test's photos and state.
struct HostileCli {
    base: String,
    hostile: Arc<Hostile>,
    bin: PathBuf,
    dir: PathBuf,
    _rt: tokio::runtime::Runtime,
    _real: privatemail_e2e::Server,
}

impl HostileCli {
    fn start(store_tag: &str, dir_tag: &str) -> HostileCli {
        let real = demo_server(store_tag, &[]);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (base, hostile) = rt.block_on(hostile(&real.base));
        HostileCli {
            base,
            hostile,
            bin: cli_bin(),
            dir: std::env::temp_dir().join(format!("{dir_tag}-{}", std::process::id())),
            _rt: rt,
            _real: real,
        }
    }
}

fn cli_bin() -> PathBuf {
    if let Ok(p) = std::env::var("PM_HOSTILE_CLI") {
        return PathBuf::from(p);
    }
    privatemail_e2e::workspace_bin("privatemail")
}

/// One CLI run: how it ended, its peak RSS (`wait4`), its time and what it printed.
#[derive(Debug)]
struct Run {
    code: i32,
    rss_mb: f64,
    secs: f64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    killed: Option<&'static str>,
}

/// Run `bin args…` to its end, or kill it past 75 s or 1 GiB resident (so a failing client
/// cannot take the machine down). It runs under the `peak-rss` launcher, whose `wait4` gives the
/// client's own peak RSS: measured from this process, the peak would include the test's pages.
fn run_measured(bin: &Path, args: &[String], state: &Path, tag: &str) -> Run {
    let out = std::env::temp_dir().join(format!("pm-hostile-{}-{tag}", std::process::id()));
    let (o, e, r) = (
        out.with_extension("out"),
        out.with_extension("err"),
        out.with_extension("report"),
    );
    let t = Instant::now();
    let status = Command::new(privatemail_e2e::workspace_bin("peak-rss"))
        .arg(&r)
        .args(["75", &(1u64 << 20).to_string(), "--"])
        .arg(bin)
        .args(args)
        .env("PRIVATEMAIL_STATE_DIR", state)
        .env_remove("PRIVATEMAIL_SERVER")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .status()
        .expect("run peak-rss");
    let stderr = std::fs::read(&e).unwrap_or_default();
    assert!(
        status.success(),
        "peak-rss failed: {}",
        String::from_utf8_lossy(&stderr)
    );
    let report = std::fs::read_to_string(&r).expect("peak-rss report");
    let fields: Vec<&str> = report.split_whitespace().collect();
    let [code, kib, killed] = fields[..] else {
        panic!("peak-rss report: {report:?}")
    };
    let run = Run {
        code: code.parse().expect("exit code"),
        rss_mb: kib.parse::<f64>().expect("peak KiB") / 1024.0,
        secs: t.elapsed().as_secs_f64(),
        stdout: std::fs::read(&o).unwrap_or_default(),
        stderr,
        killed: match killed {
            "rss" => Some("killed at 1 GiB"),
            "time" => Some("killed at 75 s"),
            _ => None,
        },
    };
    for f in [&o, &e, &r] {
        let _ = std::fs::remove_file(f);
    }
    run
}

/// After one answer fails its checks, the CLI stores a refusal and sends nothing more to that
/// server — no PIR query, no request at all, whatever the protocol — until `clear-refusal`.
#[test]
fn the_cli_stops_searching_a_server_whose_pir_answer_failed_a_check() {
    let cli = HostileCli::start("hostile-pir-cli", "pm-hostile-pir");
    let (base, hostile, bin, dir) = (
        cli.base.clone(),
        cli.hostile.clone(),
        cli.bin.clone(),
        cli.dir.clone(),
    );
    let state = dir.join("state");
    let server = format!("{base}/case/{}", Case::DamagedPirThumbs.name());
    let search = |i: usize, protocol: &str| -> Vec<String> {
        vec![
            "search".into(),
            photo(&dir, i).to_str().unwrap().into(),
            "--server".into(),
            server.clone(),
            "--protocol".into(),
            protocol.into(),
        ]
    };
    let first = run_measured(&bin, &search(0, "pir"), &state, "pir-1");
    let err = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.code, 10, "{err}");
    assert!(
        err.contains("Do not search the same photo here again"),
        "{err}"
    );
    assert!(state.join("identities.json").exists());
    let posts = hostile.damaged_posts.load(Ordering::SeqCst);
    assert!(posts >= 1, "the first search sent its queries");
    // Another photo, another protocol: nothing is sent, and the CLI says why.
    for (i, protocol) in [(1, "pir"), (2, "blocks"), (3, "frame")] {
        let hits = hostile.damaged_hits.load(Ordering::SeqCst);
        let r = run_measured(&bin, &search(i, protocol), &state, "pir-again");
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.code, 11, "{protocol}: {err}");
        assert!(err.contains("stopped"), "{err}");
        assert_eq!(
            hostile.damaged_hits.load(Ordering::SeqCst),
            hits,
            "{protocol}: a request was sent"
        );
    }
    assert_eq!(hostile.damaged_posts.load(Ordering::SeqCst), posts);
    // Cleared by hand, the next search runs (and fails again on this server's answer).
    let clear = run_measured(
        &bin,
        &["clear-refusal".into(), "--server".into(), server.clone()],
        &state,
        "pir-clear",
    );
    assert_eq!(clear.code, 0, "{}", String::from_utf8_lossy(&clear.stderr));
    let again = run_measured(&bin, &search(4, "pir"), &state, "pir-3");
    assert_eq!(again.code, 10, "{}", String::from_utf8_lossy(&again.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that receives a release and answers 500 still has it: the CLI counts the spend
/// of every release it sent — a frame search, an Algorithm 1 search, a block search — whatever
/// the answer (the shared drivers record the receipt before they hand out the request).
#[test]
fn the_cli_counts_a_release_the_server_answered_with_500() {
    let cli = HostileCli::start("hostile-refused-cli", "pm-hostile-refused");
    let (base, hostile, bin, dir) = (
        cli.base.clone(),
        cli.hostile.clone(),
        cli.bin.clone(),
        cli.dir.clone(),
    );
    let state = dir.join("state");
    let server = format!("{base}/case/{}", Case::RefusedRelease.name());
    let releases = |tag: &str| -> u64 {
        let r = run_measured(&bin, &["budget".into(), "--json".into()], &state, tag);
        assert_eq!(r.code, 0, "{}", String::from_utf8_lossy(&r.stderr));
        let v: Value = serde_json::from_slice(&r.stdout).unwrap();
        v["releases"].as_u64().unwrap()
    };
    assert_eq!(releases("refused-budget-0"), 0);
    for (n, protocol) in ["frame", "paper", "blocks"].into_iter().enumerate() {
        let mut args: Vec<String> = vec![
            "search".into(),
            photo(&dir, n).to_str().unwrap().into(),
            "--server".into(),
            server.clone(),
            "--protocol".into(),
            protocol.into(),
            "--epsilon".into(),
            "2".into(),
        ];
        // Below the whole gallery (about 300 KB): the plan releases blocks.
        args.extend(["--max-kib".into(), "128".into()]);
        let r = run_measured(&bin, &args, &state, &format!("refused-{protocol}"));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.code, 6, "{protocol}: {err}");
        assert!(err.contains("500"), "{protocol}: {err}");
        let received = hostile.refused_searches.load(Ordering::SeqCst)
            + hostile.refused_blocks.load(Ordering::SeqCst).min(1);
        assert_eq!(
            received,
            n + 1,
            "{protocol}: the release reached the server"
        );
        assert_eq!(
            releases(&format!("refused-budget-{protocol}")),
            n as u64 + 1,
            "{protocol}: the release the server received is counted"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_gives_up_on_every_hostile_answer_on_its_own_within_60_s_and_256_mb() {
    let cli = HostileCli::start("hostile-cli", "pm-hostile");
    let (base, state, bin, dir) = (
        cli.base.clone(),
        cli.hostile.clone(),
        cli.bin.clone(),
        cli.dir.clone(),
    );
    let photo = photo(&dir, 0);
    let runs: Vec<(Case, Run)> = std::thread::scope(|s| {
        let handles: Vec<_> = CASES
            .iter()
            .map(|&case| {
                let (bin, dir, photo, base) = (&bin, &dir, &photo, &base);
                s.spawn(move || {
                    let mut args: Vec<String> = vec![
                        "search".into(),
                        photo.to_str().unwrap().into(),
                        "--server".into(),
                        format!("{base}/case/{}", case.name()),
                        // These cases attack block download (the CLI's default is PIR).
                        "--protocol".into(),
                        "blocks".into(),
                        "--json".into(),
                    ];
                    if case == Case::SlowDripShortTimeout {
                        args.extend(["--timeout".into(), "5".into()]);
                    }
                    if matches!(case, Case::DamagedCentroids | Case::LongCentroids) {
                        // Below the whole gallery (about 300 KB): the plan releases blocks,
                        // so the client needs the level's centroids.
                        args.extend(["--max-kib".into(), "128".into()]);
                    }
                    let state = dir.join(case.name());
                    (case, run_measured(bin, &args, &state, case.name()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut table =
        String::from("| case | exit (expected) | peak RSS | time |\n|---|---|---|---|\n");
    let mut failures = Vec::new();
    for (case, r) in &runs {
        table.push_str(&format!(
            "| {} | {} ({}) | {:.0} MB | {:.1} s{} |\n",
            case.describe(),
            r.code,
            case.exit_code(),
            r.rss_mb,
            r.secs,
            r.killed.map(|k| format!(", {k}")).unwrap_or_default()
        ));
        let stderr = String::from_utf8_lossy(&r.stderr);
        let mut why = Vec::new();
        if r.code != case.exit_code() {
            why.push(format!("exit {} (expected {})", r.code, case.exit_code()));
        }
        if r.secs > LIMIT_SECS || r.killed.is_some() {
            why.push(format!("{:.1} s {:?}", r.secs, r.killed));
        }
        if r.rss_mb > LIMIT_RSS_MB {
            why.push(format!("peak RSS {:.0} MB", r.rss_mb));
        }
        if r.stderr.len() > 4_000 || r.stderr.iter().any(|&b| b == 0x1b || b == 0x07) {
            why.push(format!(
                "{} bytes on stderr, or control characters",
                r.stderr.len()
            ));
        }
        if !why.is_empty() {
            failures.push(format!(
                "{}: {}; stderr: {}",
                case.name(),
                why.join(", "),
                shared::text::excerpt(&stderr, 300)
            ));
        }
        if *case == Case::Honest && r.code == 0 {
            // Bytes on the wire are counted, not taken from the document.
            let v: Value = serde_json::from_slice(&r.stdout).unwrap();
            let got = v["bytes_downloaded"].as_u64().unwrap();
            assert!(got > 1_000, "{v}");
        }
    }
    assert_eq!(
        state.after_bad_anchors.load(Ordering::SeqCst),
        0,
        "a search request after anchors that do not fit"
    );
    println!("{table}");
    let artifacts = format!("{ROOT}/target/e2e-artifacts");
    let _ = std::fs::create_dir_all(&artifacts);
    let _ = std::fs::write(format!("{artifacts}/hostile-cli.md"), &table);
    assert_eq!(
        state.other_hits.load(Ordering::SeqCst),
        0,
        "a request reached the other port"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_server_quotes_a_bounded_prefix_of_bad_input() {
    let real = demo_server("hostile-echo", &[]);
    let http = reqwest::blocking::Client::new();
    let long = "7".repeat(5_000);
    for path in [
        format!("/api/v1/blocks/{}/0/0", "v".repeat(5_000)),
        format!("/api/v1/blocks/x/{long}/0"),
        format!("/api/v1/blocks/x/0/{long}"),
    ] {
        let r = http.get(format!("{}{path}", real.base)).send().unwrap();
        assert!(r.status().is_client_error(), "{path}: {}", r.status());
        let v: Value = r.json().unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.chars().count() <= shared::params::limits::MAX_SERVER_MESSAGE_CHARS
                && !message.contains(&"7".repeat(100))
                && !message.contains(&"v".repeat(100)),
            "{} characters: {}",
            message.len(),
            shared::text::excerpt(message, 200)
        );
    }
}

/// Search from the page with the fake server in `case`; the plain error it shows.
async fn page_error(
    c: &fantoccini::Client,
    hostile: &Hostile,
    case: Case,
    forget_receipts: bool,
) -> (String, f64) {
    *hostile.page_case.lock().unwrap() = case;
    js(
        c,
        "document.getElementById('error').hidden = true; return 0;",
    )
    .await;
    if forget_receipts {
        js(
            c,
            "localStorage.removeItem('privatemail.receipts'); return 0;",
        )
        .await;
    }
    let t = Instant::now();
    browser::click(c, "search").await;
    let deadline = Instant::now() + Duration::from_secs(70);
    loop {
        let v = js(
            c,
            "const e = document.getElementById('error'); return e.hidden ? null : e.textContent;",
        )
        .await;
        if let Some(text) = v.as_str() {
            return (text.to_string(), t.elapsed().as_secs_f64());
        }
        browser::confirm_warning(c).await;
        assert!(
            Instant::now() < deadline,
            "{case:?}: the page showed no error"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_a_plain_error_for_hostile_answers_and_stays_alive() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    browser::open_page(&c, &base).await;
    // The hostile answers are block answers: search with DP blocks (PIR, the default, has its
    // own bounds and checks, tested in crates/client/tests/hostile_pir.rs and tests/tests/e2e/pir.rs).
    browser::choose(&c, "protocol", "blocks").await;
    let (file, _) = browser::image_file(0);
    load_photo(&c, &file).await;
    let mut table = String::from("| case | what the page showed | time |\n|---|---|---|\n");
    for (case, expect) in [
        (Case::GzipBomb, "larger than"),
        (Case::StalledBlock, "no complete answer within"),
        (Case::OtherPort, "cannot reach"),
    ] {
        let (text, secs) = page_error(&c, &hostile, case, true).await;
        assert!(text.contains(expect), "{case:?}: {text}");
        assert!(secs < LIMIT_SECS, "{case:?}: {secs:.1} s");
        // Alive: scripts run and the page still answers.
        assert_eq!(
            js(&c, "return document.body.dataset.ready;").await,
            json!("true")
        );
        table.push_str(&format!("| {} | {text} | {secs:.1} s |\n", case.describe()));
    }
    assert_eq!(hostile.other_hits.load(Ordering::SeqCst), 0);
    // Documents: refused at load, the page still starts (the frame search remains).
    for (case, expect) in [
        (Case::HugeDocument, "larger than"),
        (Case::InconsistentSizes, "declares"),
        (Case::HugeItemCount, "declares"),
    ] {
        *hostile.page_case.lock().unwrap() = case;
        let t = Instant::now();
        browser::open_page(&c, &base).await;
        wait_for(
            &c,
            "document.getElementById('plan').textContent.includes('unavailable')",
            "the partition refused",
        )
        .await;
        let text = browser::text(&c, "plan").await;
        assert!(text.contains(expect), "{case:?}: {text}");
        let secs = t.elapsed().as_secs_f64();
        assert!(secs < LIMIT_SECS, "{case:?}: {secs:.1} s");
        table.push_str(&format!(
            "| {} | {} | {secs:.1} s |\n",
            case.describe(),
            shared::text::excerpt(&text, 160)
        ));
    }
    println!("{table}");
    let artifacts = format!("{ROOT}/target/e2e-artifacts");
    let _ = std::fs::create_dir_all(&artifacts);
    let _ = std::fs::write(format!("{artifacts}/hostile-page.md"), &table);
    let _ = std::fs::remove_file(&file);
    c.close().await.unwrap();
}

/// The page after a PIR answer fails its checks: it says what happened in plain words, stores
/// the refusal, and sends no further search of any kind to this server — across a reload —
/// until the person clears it.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_stops_searching_a_server_whose_pir_answer_failed_a_check() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    *hostile.page_case.lock().unwrap() = Case::DamagedPirThumbs;
    browser::open_page(&c, &base).await;
    js(
        &c,
        "localStorage.removeItem('privatemail.identities'); return 0;",
    )
    .await;
    assert_eq!(
        js(&c, "return document.getElementById('protocol').value;").await,
        json!("pir")
    );
    let (file, _) = browser::image_file(0);
    load_photo(&c, &file).await;
    browser::click(&c, "search").await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden || !document.getElementById('error').hidden",
        "the stop",
    )
    .await;
    let shown = js(
        &c,
        "return [document.getElementById('error').textContent, document.getElementById('status').textContent];",
    )
    .await;
    assert_eq!(
        js(&c, "return document.getElementById('stopped').hidden;").await,
        json!(false),
        "{shown}"
    );
    let text = js(
        &c,
        "return document.getElementById('stopped-text').textContent;",
    )
    .await;
    let text = text.as_str().unwrap().to_string();
    assert!(
        text.contains("Do not search the same photo here again"),
        "{text}"
    );
    assert_eq!(
        js(
            &c,
            "return document.querySelectorAll('#results li').length;"
        )
        .await,
        json!(0)
    );
    let posts = hostile.damaged_posts.load(Ordering::SeqCst);
    assert!(posts >= 1);
    // Another search, of any protocol: nothing is sent, the stop is shown again.
    for protocol in ["pir", "blocks", "frame"] {
        browser::choose(&c, "protocol", protocol).await;
        js(
            &c,
            "document.getElementById('stopped').hidden = true; return 0;",
        )
        .await;
        let hits = hostile.damaged_hits.load(Ordering::SeqCst);
        browser::click(&c, "search").await;
        wait_for(
            &c,
            "!document.getElementById('stopped').hidden",
            "the stop again",
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            hostile.damaged_hits.load(Ordering::SeqCst),
            hits,
            "{protocol}: a request"
        );
    }
    // A reload keeps it.
    browser::open_page(&c, &base).await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the stop after a reload",
    )
    .await;
    let artifacts = format!("{ROOT}/target/e2e-artifacts");
    let _ = std::fs::create_dir_all(&artifacts);
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(format!("{artifacts}/page-stopped.png"), png);
    }
    // Cleared by hand against an honest server, searches run again.
    browser::click(&c, "clear-refusal").await;
    assert_eq!(
        js(
            &c,
            "return JSON.parse(localStorage.getItem('privatemail.identities')).refusals.length;"
        )
        .await,
        json!(0)
    );
    *hostile.page_case.lock().unwrap() = Case::Honest;
    load_photo(&c, &file).await;
    assert_eq!(browser::search(&c).await.len(), 8);
    assert_eq!(hostile.damaged_posts.load(Ordering::SeqCst), posts);
    let _ = std::fs::remove_file(&file);
    c.close().await.unwrap();
}

/// A server that receives a release and answers 500 still has it: the page counts the spend
/// of every release it sent — a frame search, an Algorithm 1 search, a block search (the wasm
/// drivers record the receipt in `localStorage` before they hand out the requests) — and says
/// the search failed. (The page used to count a noisy-numbers release only after `resp.ok`.)
#[tokio::test(flavor = "multi_thread")]
async fn the_page_counts_a_release_the_server_answered_with_500() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    *hostile.page_case.lock().unwrap() = Case::RefusedRelease;
    browser::open_page(&c, &base).await;
    js(
        &c,
        "localStorage.removeItem('privatemail.receipts'); localStorage.removeItem('privatemail.identities'); return 0;",
    )
    .await;
    let (file, _) = browser::image_file(0);
    load_photo(&c, &file).await;
    for (n, protocol) in ["frame", "paper"].into_iter().enumerate() {
        browser::choose(&c, "protocol", protocol).await;
        let (text, _) = page_error(&c, &hostile, Case::RefusedRelease, false).await;
        assert!(text.contains("refused the search"), "{protocol}: {text}");
        assert_eq!(
            hostile.refused_searches.load(Ordering::SeqCst),
            n + 1,
            "{protocol}: the release reached the server"
        );
        let receipts = js(
            &c,
            "return JSON.parse(localStorage.getItem('privatemail.receipts') || '[]').map(r => r.via);",
        )
        .await;
        let want: Vec<&str> = ["frame", "paper"][..=n].to_vec();
        assert_eq!(
            receipts,
            json!(want),
            "{protocol}: the release the server received is counted"
        );
    }
    // A block release whose blocks are answered 500 is counted too (below the whole gallery's
    // size, so the plan releases blocks).
    browser::choose(&c, "protocol", "blocks").await;
    browser::choose(&c, "budget", "131072").await;
    let (text, _) = page_error(&c, &hostile, Case::RefusedRelease, false).await;
    assert!(text.contains("HTTP 500"), "blocks: {text}");
    assert!(hostile.refused_blocks.load(Ordering::SeqCst) >= 1);
    let receipts = js(
        &c,
        "return JSON.parse(localStorage.getItem('privatemail.receipts') || '[]').map(r => r.via);",
    )
    .await;
    assert_eq!(receipts, json!(["frame", "paper", "blocks"]));
    // The page says so in its budget.
    let spent = browser::text(&c, "spent").await;
    assert!(spent.contains("over 3 searches"), "{spent}");
    let _ = std::fs::remove_file(&file);
    c.close().await.unwrap();
}

/// The page and the CLI run one search driver: for the same plan they make the same PIR
/// requests — the same public files, the same queries of the same sizes, in the same order
/// (the bodies differ only by their fresh randomness).
#[tokio::test(flavor = "multi_thread")]
async fn the_page_and_the_cli_make_the_same_pir_requests_for_the_same_plan() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let take = |h: &Hostile| std::mem::take(&mut *h.pir_log.lock().unwrap());
    // The page: its default plan (PIR, 512 KiB), two searches of different photos.
    let (_driver, c) = browser::browser().await;
    browser::open_page(&c, &base).await;
    assert_eq!(
        js(&c, "return document.getElementById('protocol').value;").await,
        json!("pir")
    );
    let mut page = Vec::new();
    for i in [3usize, 40] {
        let (file, _) = browser::image_file(i);
        load_photo(&c, &file).await;
        take(&hostile);
        assert_eq!(browser::search(&c).await.len(), 8);
        page.push(take(&hostile));
        let _ = std::fs::remove_file(&file);
    }
    c.close().await.unwrap();
    // The CLI: the same plan (`--max-kib 512`, the plan's own ranking), a fresh state
    // directory, two searches of other photos.
    let bin = tokio::task::spawn_blocking(cli_bin).await.unwrap();
    let dir = std::env::temp_dir().join(format!("pm-same-plan-{}", std::process::id()));
    let state = dir.join("state");
    let mut cli = Vec::new();
    for i in [5usize, 77] {
        let args: Vec<String> = vec![
            "search".into(),
            photo(&dir, i).to_str().unwrap().into(),
            "--server".into(),
            format!("{base}/case/honest"),
            "--protocol".into(),
            "pir".into(),
            "--max-kib".into(),
            "512".into(),
        ];
        let (bin, state) = (bin.clone(), state.clone());
        let r = tokio::task::spawn_blocking(move || run_measured(&bin, &args, &state, "same-plan"))
            .await
            .unwrap();
        assert_eq!(r.code, 0, "{}", String::from_utf8_lossy(&r.stderr));
        cli.push(take(&hostile));
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("page: {page:?}\ncli: {cli:?}");
    assert!(
        page[0].iter().any(|l| l.starts_with("GET ")),
        "the first search fetches the public files"
    );
    assert!(
        page[1].iter().all(|l| l.starts_with("POST ")),
        "later ones only query"
    );
    assert_eq!(page, cli, "the page and the CLI differ");
}

/// A PIR document with related seeds (the attack that exposed the secret from one upload):
/// the CLI refuses it before sending any query (exit 7, saying why), and the page says it
/// refused private retrieval rather than quietly offering another way.
#[tokio::test(flavor = "multi_thread")]
async fn related_seeds_are_refused_by_the_cli_and_the_page_before_any_query() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let bin = tokio::task::spawn_blocking(cli_bin).await.unwrap();
    let dir = std::env::temp_dir().join(format!("pm-seeds-{}", std::process::id()));
    let args: Vec<String> = vec![
        "search".into(),
        photo(&dir, 0).to_str().unwrap().into(),
        "--server".into(),
        format!("{base}/case/{}", Case::RelatedSeeds.name()),
        "--protocol".into(),
        "pir".into(),
        "--max-kib".into(),
        "4096".into(),
    ];
    let state = dir.join("state");
    let r = tokio::task::spawn_blocking(move || run_measured(&bin, &args, &state, "seeds"))
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr).to_string();
    assert_eq!(r.code, 7, "{err}");
    assert!(err.contains("seed"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let (_driver, c) = browser::browser().await;
    *hostile.page_case.lock().unwrap() = Case::RelatedSeeds;
    browser::open_page(&c, &base).await;
    let error = browser::text(&c, "error").await;
    assert!(
        error.contains("private information retrieval was refused"),
        "{error}"
    );
    assert!(error.contains("seed"), "{error}");
    assert_eq!(
        js(
            &c,
            "return document.querySelector(\"#protocol option[value='pir']\").disabled;"
        )
        .await,
        json!(true)
    );
    assert_eq!(
        hostile.damaged_posts.load(Ordering::SeqCst),
        0,
        "a PIR query was sent"
    );
    c.close().await.unwrap();
}

/// A configuration that disagrees with the client's own models (`client::config`): naming a
/// query model other than the one the client runs (a photo's features from other weights would
/// rank the gallery's silently), or nine classes where the class model has ten (Algorithm 1
/// would then refuse a photo of the tenth class only, and the server learn it from the search
/// that never came), or a frame kernel scale whose least weight is subnormal (no rounding
/// bound holds there; a far photo's placement was 0/0, refused alone). The CLI refuses right after reading it, whatever the protocol, with
/// nothing sent after it (exit 7, saying why); the page does not start, and a photo chosen on
/// it sends nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_configuration_the_clients_models_disagree_with_is_refused_before_any_search_request() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let bin = tokio::task::spawn_blocking(cli_bin).await.unwrap();
    let dir = std::env::temp_dir().join(format!("pm-other-model-{}", std::process::id()));
    let ours = embed::model::weights_version(data::assets::QUERY_WEIGHTS);
    let (_driver, c) = browser::browser().await;
    let cases = [
        (
            Case::OtherQueryModel,
            vec![OTHER_QUERY_MODEL, ours.as_str()],
        ),
        (
            Case::NineClasses,
            vec!["names 9 classes", "class model has 10"],
        ),
        (Case::TinyKernelScale, vec!["frame_kernel_scale", "2⁻⁶⁰⁰"]),
    ];
    for (case, words) in cases {
        hostile.after_other_model.store(0, Ordering::SeqCst);
        for (i, protocol) in ["pir", "blocks", "frame", "paper"].into_iter().enumerate() {
            let args: Vec<String> = vec![
                "search".into(),
                photo(&dir, i).to_str().unwrap().into(),
                "--server".into(),
                format!("{base}/case/{}", case.name()),
                "--protocol".into(),
                protocol.into(),
            ];
            let (bin, state) = (bin.clone(), dir.join("state"));
            let r = tokio::task::spawn_blocking(move || run_measured(&bin, &args, &state, "model"))
                .await
                .unwrap();
            let err = String::from_utf8_lossy(&r.stderr).to_string();
            assert_eq!(r.code, 7, "{case:?}, {protocol}: {err}");
            assert!(
                words.iter().all(|w| err.contains(w)),
                "{case:?}, {protocol}: {err}"
            );
            assert_eq!(
                hostile.after_other_model.load(Ordering::SeqCst),
                0,
                "{case:?}, {protocol}: a request after the configuration"
            );
        }
        *hostile.page_case.lock().unwrap() = case;
        let error = refused_start(&c, &base).await;
        assert!(words.iter().all(|w| error.contains(w)), "{case:?}: {error}");
        // A photo chosen anyway: nothing is searched, and nothing is sent.
        let (file, _) = browser::image_file(0);
        browser::upload(&c, &file).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            js(&c, "return document.getElementById('search').disabled;").await,
            json!(true),
            "{case:?}"
        );
        js(&c, "document.getElementById('search').click(); return 0;").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            hostile.after_other_model.load(Ordering::SeqCst),
            0,
            "{case:?}: the page sent a request after refusing the configuration"
        );
        let _ = std::fs::remove_file(&file);
    }
    let _ = std::fs::remove_dir_all(&dir);
    c.close().await.unwrap();
}

/// δ is the client's own (`shared::params::DELTA`), never the δ the gallery's configuration
/// suggests: with a configuration suggesting δ = 0.999 (which would calibrate a small fraction
/// of the noise for the same ε), the page states δ = 1e-5, and its anchor-frame and Algorithm 1
/// releases are calibrated, receipted and added to its total at 1e-5 — the frame's noise the
/// same as under an honest configuration. The CLI never read that field.
#[tokio::test(flavor = "multi_thread")]
async fn the_configurations_delta_never_sets_the_noise() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    let mut noise = Vec::new();
    for case in [Case::GenerousDelta, Case::Honest] {
        *hostile.page_case.lock().unwrap() = case;
        browser::open_page(&c, &base).await;
        js(
            &c,
            "localStorage.removeItem('privatemail.receipts'); return 0;",
        )
        .await;
        assert_eq!(browser::text(&c, "delta").await, "1e-5", "{case:?}");
        let (file, _) = browser::image_file(0);
        load_photo(&c, &file).await;
        for protocol in ["frame", "paper"] {
            browser::choose(&c, "protocol", protocol).await;
            assert_eq!(browser::search(&c).await.len(), 8, "{case:?}, {protocol}");
        }
        let receipts = js(
            &c,
            "return JSON.parse(localStorage.getItem('privatemail.receipts') || '[]');",
        )
        .await;
        let receipts = receipts.as_array().unwrap();
        assert_eq!(receipts.len(), 2, "{case:?}");
        for r in receipts {
            assert_eq!(r["delta"], json!(shared::params::DELTA), "{case:?}: {r}");
            assert!(
                r["proven_delta"].as_f64().unwrap() <= shared::params::DELTA,
                "{case:?}: {r}"
            );
        }
        // The frame's noise follows from the frame, ε and δ alone (Algorithm 1's also from its
        // random start).
        noise.push(receipts[0]["noise_scale"].clone());
        let how = browser::text(&c, "spent-how").await;
        assert!(how.contains("δ = 1e-5"), "{case:?}: {how}");
        let _ = std::fs::remove_file(&file);
    }
    assert_eq!(noise[0], noise[1], "the noise the suggested δ left");
    c.close().await.unwrap();
}

/// The page opened at `base`, refusing to start: the error it shows.
async fn refused_start(c: &fantoccini::Client, base: &str) -> String {
    c.goto(&format!("{base}/")).await.unwrap();
    wait_for(
        c,
        "!document.getElementById('error').hidden",
        "the page's refusal",
    )
    .await;
    browser::text(c, "error").await
}

/// Anchors the configuration does not name (one value changed), or named but of the wrong
/// shape (3 features a row; a familiarity reference of the wrong size): the page refuses to
/// start, saying why, as the CLI refuses them (the `CASES` above), and sends no request for
/// the partition, a block or PIR.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_refuses_anchors_the_configuration_does_not_describe() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    for (case, expect) in [
        (Case::MisnamedAnchors, "SHA-256"),
        (Case::MismatchedAnchors, "anchors are malformed"),
        (Case::MalformedReference, "anchors are malformed"),
    ] {
        *hostile.page_case.lock().unwrap() = case;
        // A browser of its own for each case: an empty cache, so the configuration is read
        // whole (not revalidated), as the altered answers need it.
        let (_driver, c) = browser::browser().await;
        let error = refused_start(&c, &base).await;
        assert!(error.contains(expect), "{case:?}: {error}");
        assert_eq!(
            js(&c, "return document.getElementById('search').disabled;").await,
            json!(true),
            "{case:?}"
        );
        c.close().await.unwrap();
    }
    assert_eq!(hostile.after_bad_anchors.load(Ordering::SeqCst), 0);
}

/// Samples whose published features are malformed (the wrong length, zero, twice unit length)
/// are searched all the same, with the query model's features, as a photo: the page says why
/// the published ones were refused, the PIR search goes out and shows the exact top 8 of the
/// query model's features of the sample. A refusal that stopped the search would tell the
/// server which sample was chosen by the search that never came.
#[tokio::test(flavor = "multi_thread")]
async fn samples_with_malformed_published_features_are_searched_with_the_query_model() {
    samples_are_searched_with_the_query_model(Case::MalformedSamples, &["were refused", "sample"])
        .await;
}

/// Samples whose published features are well-formed but named as another gallery model's
/// (`SAMPLES_MODEL`) are searched the same way: with the query model's features, as a photo,
/// the search going out as for any sample.
#[tokio::test(flavor = "multi_thread")]
async fn samples_of_another_gallery_model_are_searched_with_the_query_model() {
    samples_are_searched_with_the_query_model(Case::OtherSamplesModel, &["ready"]).await;
}

/// The first three samples under `case`, each clicked and searched by PIR: the status says
/// each of `said` (and never that the gallery's own features are used), PIR queries go out, and the results are the exact top 8 of the query model's
/// features of the sample.
async fn samples_are_searched_with_the_query_model(case: Case, said: &[&str]) {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    *hostile.page_case.lock().unwrap() = case;
    browser::open_page(&c, &base).await;
    let whole = browser::whole_gallery(&real.base).await;
    let samples = privatemail_e2e::sample_images();
    let model = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    // Under `MalformedSamples`, one sample of each kind of malformed vector.
    for sample in [0u8, 1, 2] {
        js(
            &c,
            &format!(
                "document.getElementById('status').textContent = '';
                 document.querySelectorAll('#samples button')[{sample}].click(); return 0;"
            ),
        )
        .await;
        wait_for(
            &c,
            "document.getElementById('status').textContent.includes('ready')",
            "the sample",
        )
        .await;
        let status = browser::text(&c, "status").await;
        assert!(
            said.iter().all(|s| status.contains(s)) && !status.contains("gallery's own features"),
            "sample {sample}: {status}"
        );
        let posts = pir_posts_of_a_search(&c, &hostile, &format!("sample {sample}")).await;
        assert!(posts > 0, "sample {sample}: no PIR query was sent");
        let px = &samples[usize::from(sample)];
        let input = model_input(px);
        let want = browser::top8(&whole, &model.search_features(&input).unwrap());
        assert_eq!(
            browser::result_ids(&c).await,
            want,
            "sample {sample}: the query model's exact top 8"
        );
    }
    c.close().await.unwrap();
}

/// A server choosing the query model's widths changes only what a search finds (utility),
/// never whether the page works or what it sends: a well-formed query model of other widths
/// (16 and 24 channels instead of 64 and 128, random weights within the file's bounds, 8
/// bits), named in the configuration, with the real anchors (their familiarity reference is
/// the pinned familiarity model's, which the page then fetches with the first photo) — a
/// consistent server. While that server withholds the familiarity model, then serves it with
/// one byte changed, 4 MiB too long, a byte a second, and redirected to another origin (which
/// would serve the real bytes: the page's policy never lets the request leave), each photo is
/// refused with the reason before it is classified (no class shown, the search button disabled, no PIR
/// request; while the file drips in, the status line says what the page is loading, and it
/// stops at the page's deadline), and the page asks again with the next photo. Served as it is, inference is total
/// at every admitted shape (`Model::infer`'s proof), so no photo can make the page fail or
/// hold back its search: the page starts without an error, runs that model on each photo,
/// sends its PIR queries, and shows exactly the native exact top 8 over the whole gallery of
/// that model's search features of the photo — not the honest query model's — and nothing
/// reaches another origin.
#[tokio::test(flavor = "multi_thread")]
async fn a_query_model_of_other_widths_changes_only_what_a_search_finds() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let real_base = real.base.clone();
    let (other, model) = tokio::task::spawn_blocking(move || other_width_query_model(&real_base))
        .await
        .unwrap();
    assert!(hostile.other_width.set(other).is_ok());
    let (_driver, c) = browser::browser().await;
    *hostile.page_case.lock().unwrap() = Case::OtherWidthQueryModel;
    c.goto(&format!("{base}/")).await.unwrap();
    wait_for(
        &c,
        "document.body.dataset.ready === 'true' || !document.getElementById('error').hidden",
        "the page's start",
    )
    .await;
    let error = browser::text(&c, "error").await;
    assert_eq!(
        js(&c, "return document.body.dataset.ready === 'true';").await,
        json!(true),
        "the page did not start: {error}"
    );
    assert!(error.is_empty(), "{error}");
    hostile.pir_log.lock().unwrap().clear();
    let refusals = [
        (Familiarity::Withheld, "HTTP 404"),
        (
            Familiarity::Altered,
            "not the file this client was built with",
        ),
        (Familiarity::Oversized, "larger than"),
        (Familiarity::Dripped, "in time"),
        // The real bytes, but from another origin: never asked for (the page's policy blocks
        // the redirect, asserted with the other origin's hits below).
        (Familiarity::Elsewhere, "could not be loaded"),
    ];
    for (how, why) in refusals {
        *hostile.familiarity.lock().unwrap() = how;
        let fetches = hostile.familiarity_fetches.load(Ordering::SeqCst);
        let (file, _) = browser::image_file(7);
        // The last refusal's words gone, so the wait below sees this photo's.
        js(
            &c,
            "const e = document.getElementById('error'); e.hidden = true; e.textContent = ''; return 0;",
        )
        .await;
        browser::upload(&c, &file).await;
        if how == Familiarity::Dripped {
            // Never in silence while the file drips in.
            wait_for(
                &c,
                "document.getElementById('status').textContent.startsWith('Loading the check that a photo shows clothing')",
                "the status line while the familiarity model loads",
            )
            .await;
        }
        // Past the page's deadline for a dripped file.
        browser::wait_for_within(
            &c,
            "!document.getElementById('error').hidden",
            "the photo's refusal",
            Duration::from_secs(30 + shared::params::limits::TOTAL_TIMEOUT_SECS),
        )
        .await;
        let error = browser::text(&c, "error").await;
        assert!(
            error.contains("check that a photo shows clothing") && error.contains(why),
            "{how:?}: {error}"
        );
        assert!(
            browser::text(&c, "status")
                .await
                .starts_with("No photo loaded"),
            "{how:?}"
        );
        assert_eq!(browser::text(&c, "prediction").await, "", "{how:?}");
        assert_eq!(
            js(&c, "return document.getElementById('search').disabled;").await,
            json!(true),
            "{how:?}"
        );
        assert_eq!(
            hostile.familiarity_fetches.load(Ordering::SeqCst),
            fetches + 1,
            "{how:?}: the familiarity model is asked for again with each photo until it is had"
        );
        let _ = std::fs::remove_file(&file);
    }
    assert!(
        !hostile
            .pir_log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("POST")),
        "a PIR query without the familiarity check"
    );
    *hostile.familiarity.lock().unwrap() = Familiarity::Served;
    let whole = browser::whole_gallery(&real.base).await;
    let honest = Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    let mut differs = false;
    for i in [3usize, 40, 123] {
        let (file, _) = browser::image_file(i);
        load_photo(&c, &file).await;
        let status = browser::text(&c, "status").await;
        assert!(status.contains("ready"), "photo {i}: {status}");
        let posts = pir_posts_of_a_search(&c, &hostile, &format!("photo {i}")).await;
        assert!(posts > 0, "photo {i}: no PIR query was sent");
        let error = browser::text(&c, "error").await;
        assert!(error.is_empty(), "photo {i}: {error}");
        let (px, _) = test_image(i);
        let input = model_input(&px);
        let want = browser::top8(&whole, &model.search_features(&input).unwrap());
        assert_eq!(
            browser::result_ids(&c).await,
            want,
            "photo {i}: the served model's exact top 8"
        );
        differs |= want != browser::top8(&whole, &honest.search_features(&input).unwrap());
        let _ = std::fs::remove_file(&file);
    }
    assert!(
        differs,
        "the served model ranked like the honest one: the case shows nothing"
    );
    assert_eq!(
        hostile.familiarity_fetches.load(Ordering::SeqCst),
        refusals.len() + 1,
        "the familiarity model, once had, is not asked for again"
    );
    assert_eq!(
        hostile.other_hits.load(Ordering::SeqCst),
        0,
        "a request reached another origin"
    );
    c.close().await.unwrap();
}

/// One search on the page (8 results, `what` names it in a failure) and the PIR queries
/// (`POST`s) it sent.
async fn pir_posts_of_a_search(c: &fantoccini::Client, hostile: &Hostile, what: &str) -> usize {
    hostile.pir_log.lock().unwrap().clear();
    assert_eq!(browser::search(c).await.len(), 8, "{what}");
    hostile
        .pir_log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("POST"))
        .count()
}

/// The model input the page makes of a 28×28 grey image (drawn opaque, through the photo
/// pipeline).
fn model_input(px: &[u8]) -> Vec<u8> {
    let rgba: Vec<u8> = px.iter().flat_map(|&v| [v, v, v, 255]).collect();
    embed::photo::to_model_input(&rgba, 28, 28).unwrap()
}

/// The page's Content-Security-Policy lets the browser enforce what the page promises: a
/// script injected into it cannot send anything to another origin — not by `fetch`, an image,
/// a beacon or a form — and the page itself still works under the policy.
#[tokio::test(flavor = "multi_thread")]
async fn an_injected_script_cannot_send_a_request_elsewhere() {
    let real = browser::server();
    let (base, hostile) = hostile(&real.base).await;
    let (_driver, c) = browser::browser().await;
    browser::open_page(&c, &base).await;
    let other = &hostile.other;
    let script = format!(
        "const o = {other:?};
         const tries = [];
         tries.push(fetch(o + '/fetch', {{ mode: 'no-cors' }}).then(() => 'sent', () => 'blocked'));
         tries.push(new Promise((res) => {{ const i = new Image(); i.onload = () => res('sent');
           i.onerror = () => res('blocked'); i.src = o + '/img'; }}));
         let beacon = 'blocked';
         try {{ if (navigator.sendBeacon(o + '/beacon', 'x')) beacon = 'queued'; }} catch {{}}
         const f = document.createElement('form'); f.method = 'POST'; f.action = o + '/form';
         document.body.append(f);
         try {{ f.submit(); }} catch {{}}
         return Promise.all(tries).then((r) => r.concat([beacon]));"
    );
    let results = js(&c, &script).await;
    assert_eq!(results[0], json!("blocked"), "fetch: {results}");
    assert_eq!(results[1], json!("blocked"), "image: {results}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        hostile.other_hits.load(Ordering::SeqCst),
        0,
        "a request reached the other origin: {results}"
    );
    // The page itself works under the policy: a private search end to end.
    browser::open_page(&c, &base).await;
    let (file, _) = browser::image_file(2);
    load_photo(&c, &file).await;
    assert_eq!(browser::search(&c).await.len(), 8);
    let _ = std::fs::remove_file(&file);
    c.close().await.unwrap();
}
