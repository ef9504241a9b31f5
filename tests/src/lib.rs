//! Helpers for the end-to-end tests: start the real server binary on an ephemeral port.

pub mod browser;
pub mod cdn;
pub mod fake;
pub mod pageload;
pub mod pirsearch;
pub mod raw;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running server process, killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    /// Its output so far (log lines and panics), where it was captured ([`start_server_logged`]).
    log: Option<std::sync::Arc<std::sync::Mutex<String>>>,
}

impl Server {
    /// SIGTERM: what a service manager sends to stop the server gracefully.
    pub fn terminate(&self) {
        // SAFETY: `kill` with a valid signal number on our own child's pid has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Its output so far (empty unless started with [`start_server_logged`]).
    pub fn log_text(&self) -> String {
        self.log
            .as_ref()
            .map(|l| l.lock().unwrap().clone())
            .unwrap_or_default()
    }

    /// SIGKILL: the process dies where it is, nothing flushed or cleaned up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait up to `timeout` for the process to exit on its own; its status if it did.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let t = std::time::Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh store path under the system temp directory, unique per call.
/// The bytes of a gzip body (panics on a malformed one: tests only).
pub fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

pub fn temp_store(tag: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pm-e2e-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("gallery.redb")
}

/// Held-out test image `i` as a PNG file in `dir` (created if missing): a photo for the CLI.
pub fn photo_png(dir: &std::path::Path, i: usize) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let (px, _) = test_image(i);
    let png = publish::png::png_grey(&px, 28, 28).unwrap();
    let path = dir.join(format!("photo-{i}.png"));
    std::fs::write(&path, png).unwrap();
    path
}

/// Build (if needed) and start `server` with the given extra arguments; waits for its
/// "listening on" line.
pub fn start_server(extra: &[&str]) -> Server {
    start_server_env(extra, &[])
}

/// [`start_server`] with extra environment variables.
pub fn start_server_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
    spawn_server(extra, env, false)
}

/// [`start_server_env`] with its output captured — the log lines (stdout) and panics (stderr),
/// read by threads as they come, so no pipe fills — for [`Server::log_text`].
pub fn start_server_logged(extra: &[&str], env: &[(&str, &str)]) -> Server {
    spawn_server(extra, env, true)
}

/// The workspace's binaries the suites run (`server`, `privatemail`, `peak-rss`), built once a
/// test process, and the path of `name`.
///
/// Built with the packages and targets `cargo test --workspace --all-targets` selects
/// (`--workspace --tests`), so their dependencies resolve to the same features and reuse what
/// the suite's own build compiled; `-p privatemail-server` alone would resolve other features
/// (the dev-dependencies' ones left out) and compile most of the graph a second time.
pub fn workspace_bin(name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(&cargo)
            .args(["build", "-q", "--workspace", "--tests"])
            .args([
                "--bin",
                "server",
                "--bin",
                "privatemail",
                "--bin",
                "peak-rss",
            ])
            .current_dir(root)
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the server and the CLI failed");
    });
    std::path::Path::new(root).join("target/debug").join(name)
}

fn spawn_server(extra: &[&str], env: &[(&str, &str)], capture: bool) -> Server {
    let bin = workspace_bin("server");
    let mut child = Command::new(bin)
        .args(["--bind", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(if capture {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .spawn()
        .expect("start server");
    // Logs go to stdout (before and after the "listening on" line) and panics to stderr: a
    // captured log takes both, each read by its own thread as it comes.
    let log = capture.then(|| std::sync::Arc::new(std::sync::Mutex::new(String::new())));
    let keep = |sink: &Option<std::sync::Arc<std::sync::Mutex<String>>>, line: &str| {
        if let Some(s) = sink {
            let mut t = s.lock().unwrap();
            t.push_str(line.trim_end());
            t.push('\n');
        }
    };
    if let Some(err) = child.stderr.take() {
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                keep(&sink, &line);
            }
        });
    }
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let base = loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the server closed stdout before listening");
        if let Some(b) = line.trim().strip_prefix("listening on ") {
            break b.to_string();
        }
        assert!(capture, "unexpected first line from server: {line:?}");
        keep(&log, &line);
    };
    // Read on even when not kept: a closed pipe would make every later log line fail.
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            keep(&sink, &line);
        }
    });
    Server { child, base, log }
}

/// Add test image `i` to the gallery as the operator (bearer `token`); the server accepts it
/// (202) and rebuilds in the background.
pub fn add_test_image(http: &reqwest::blocking::Client, base: &str, token: &str, i: usize) {
    let (pixels, label) = test_image(i);
    let r = http
        .post(format!("{base}/api/v1/gallery"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "items": [{ "label": label, "pixels": pixels }] }))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "adding image {i}");
}

/// `GET {base}{path}` as JSON.
pub fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::blocking::Client,
    base: &str,
    path: &str,
) -> T {
    http.get(format!("{base}{path}"))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// A level's centroids (a public file, fetched once per version), verified against the
/// partition document.
pub fn level_centroids(
    http: &reqwest::blocking::Client,
    base: &str,
    part: &shared::api::PartitionDoc,
    level: usize,
) -> publish::centroids::Centroids {
    let url = publish::centroids::centroids_url(part, level);
    let r = http.get(format!("{base}{url}")).send().unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    publish::centroids::verify(part, level, &r.bytes().unwrap()).unwrap()
}

/// The server with a 1,000-image gallery and 200 anchors on a fresh store (the API tests'
/// gallery); `extra` flags appended. The store is a copy of one built once a test process
/// ([`stored_gallery_server`]).
pub fn small_server(tag: &str, extra: &[&str]) -> Server {
    stored_gallery_server(tag, 1000, 200, extra)
}

/// The server with a 1,000-image gallery and the demo's 1,000 anchors (the frame's class vote
/// needs enough anchors near each image), on a fresh store; `extra` flags appended. The store
/// is a copy of one built once a test process ([`stored_gallery_server`]).
pub fn demo_server(tag: &str, extra: &[&str]) -> Server {
    stored_gallery_server(tag, 1000, 1000, extra)
}

/// Flags that change what a start builds into the store (the seeded gallery, its features, the
/// embedding, the partition's fingerprint) or where it is kept: with any of them a server
/// builds its own store, never a copy of a template built without them.
const BUILD_FLAGS: &[&str] = &[
    "--gallery-size",
    "--anchors",
    "--seed",
    "--data-dir",
    "--max-share",
    "--allow-full-download",
    "--blocks-store",
    "--blocks-public-url",
    "--store",
];

/// The server on a fresh store of `gallery_size` images and `anchors` anchors.
///
/// Tests that start a server to test what it serves, not how it builds a gallery, share the
/// build: the first such start in a test process builds a template store (gallery, features,
/// embedding, partition and its blocks), stops that server gracefully, and every start copies
/// the template into its own fresh store path and opens it. Opening a copy serves the same
/// state a build would: the features, the embedding and the partition are reused only when
/// they match the gallery, the anchors, the seed and the partition settings (their
/// fingerprint), which the template was built with; the PIR databases are rebuilt by the
/// opening server from the same blocks and items, and this waits for them (`GET /api/v1/pir`
/// answers 503 until then), so the server is returned as ready as a fresh build returns it.
/// Left out of the copy: the identity key (each server makes its own, as on a fresh store)
/// and the PIR directory (rebuilt). `tests/tests/e2e/template.rs` checks the equivalence.
///
/// With a flag of [`BUILD_FLAGS`] in `extra`, or `PM_E2E_FRESH_STORES=1`, the server builds
/// its own store instead.
pub fn stored_gallery_server(
    tag: &str,
    gallery_size: usize,
    anchors: usize,
    extra: &[&str],
) -> Server {
    let store = temp_store(tag);
    let (size, count) = (gallery_size.to_string(), anchors.to_string());
    let mut args = vec![
        "--gallery-size",
        size.as_str(),
        "--anchors",
        count.as_str(),
        "--store",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let fresh = std::env::var("PM_E2E_FRESH_STORES").is_ok_and(|v| v == "1")
        || extra.iter().any(|a| {
            BUILD_FLAGS
                .iter()
                .any(|f| a == f || a.starts_with(&format!("{f}=")))
        });
    if fresh {
        return start_server(&args);
    }
    stored_copy(&args, gallery_size, anchors)
}

/// The server with `args` (its `--store` a fresh path) opened on a copy of the template store
/// of `gallery_size` images and `anchors` anchors, returned once its PIR databases are served.
fn stored_copy(args: &[&str], gallery_size: usize, anchors: usize) -> Server {
    let at = args
        .iter()
        .position(|a| *a == "--store")
        .expect("a --store argument");
    let store = std::path::Path::new(args[at + 1]);
    let template = template_store(gallery_size, anchors);
    copy_store(&template, store);
    let srv = start_server(args);
    wait_for_pir(&srv);
    srv
}

/// The server on a fresh store of `gallery_size` images and `anchors` anchors that it builds
/// itself (the start [`stored_gallery_server`] shares); `extra` flags appended.
pub fn building_server(tag: &str, gallery_size: usize, anchors: usize, extra: &[&str]) -> Server {
    let store = temp_store(tag);
    let (size, count) = (gallery_size.to_string(), anchors.to_string());
    let mut args = vec![
        "--gallery-size",
        size.as_str(),
        "--anchors",
        count.as_str(),
        "--store",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    start_server(&args)
}

/// Copy the store at `from` (its `.redb` file and the files beside it of the same stem) to
/// `to`, leaving out the identity key and the PIR directory.
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    fn copy_dir(a: &std::path::Path, b: &std::path::Path) {
        std::fs::create_dir_all(b).unwrap();
        for e in std::fs::read_dir(a).unwrap() {
            let e = e.unwrap();
            let dst = b.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &dst);
            } else {
                std::fs::copy(e.path(), dst).unwrap();
            }
        }
    }
    let (src_dir, dst_dir) = (from.parent().unwrap(), to.parent().unwrap());
    std::fs::create_dir_all(dst_dir).unwrap();
    let stem = from.file_stem().unwrap().to_str().unwrap();
    let new_stem = to.file_stem().unwrap().to_str().unwrap();
    for e in std::fs::read_dir(src_dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let Some(ext) = name.strip_prefix(stem).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        if ext == "key" || ext == "pir" {
            continue;
        }
        let dst = dst_dir.join(format!("{new_stem}.{ext}"));
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The template store of `gallery_size` images and `anchors` anchors, built (once a test
/// process) by a server that is then stopped with SIGTERM, so the store is closed as a
/// service manager's stop leaves it.
fn template_store(gallery_size: usize, anchors: usize) -> std::path::PathBuf {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Templates = Mutex<HashMap<(usize, usize), Arc<OnceLock<std::path::PathBuf>>>>;
    static TEMPLATES: OnceLock<Templates> = OnceLock::new();
    let cell = Arc::clone(
        TEMPLATES
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .entry((gallery_size, anchors))
            .or_default(),
    );
    cell.get_or_init(|| {
        let store = temp_store(&format!("template-{gallery_size}-{anchors}"));
        let (size, count) = (gallery_size.to_string(), anchors.to_string());
        let mut srv = start_server(&[
            "--gallery-size",
            &size,
            "--anchors",
            &count,
            "--store",
            store.to_str().unwrap(),
        ]);
        // The packed catalogue is written beside serving: wait for it, so that every copy
        // opens the gallery from one file as a restarted server does.
        let packed = store.with_extension("packed");
        let t = std::time::Instant::now();
        while !packed.exists() && t.elapsed() < std::time::Duration::from_secs(120) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Answering requests: its serving loop, and with it the SIGTERM handler, is running
        // (a SIGTERM before that would kill it unclosed).
        wait_for_pir(&srv);
        srv.terminate();
        let status = srv.wait_exit(std::time::Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.success()),
            "the template server did not stop cleanly: {status:?}"
        );
        store
    })
    .clone()
}

/// Wait until `srv` serves its PIR document (503 while the databases are being built); panics
/// past 600 s.
fn wait_for_pir(srv: &Server) {
    let url = format!("{}/api/v1/pir", srv.base);
    // On a thread of its own: callers may be inside a Tokio runtime (the browser suites),
    // where a blocking client can be neither built nor dropped.
    std::thread::scope(|s| {
        s.spawn(|| {
            let http = reqwest::blocking::Client::new();
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_secs(600) {
                match http.get(&url).send() {
                    Ok(r) if r.status().as_u16() != 503 => return,
                    _ => std::thread::sleep(std::time::Duration::from_millis(100)),
                }
            }
            panic!("{url} still answered 503 (or nothing) after 600 s");
        })
        .join()
        .expect("waiting for the PIR databases")
    })
}

/// The public configuration and anchors, fetched as a client would, with the anchor kernel
/// cache built.
pub fn fetch_client(
    http: &reqwest::blocking::Client,
    base: &str,
) -> Result<(shared::api::ConfigResponse, paper::privatemail::Anchors), Box<dyn std::error::Error>>
{
    let config: shared::api::ConfigResponse =
        http.get(format!("{base}/api/v1/config")).send()?.json()?;
    let anchors: shared::api::AnchorsResponse =
        http.get(format!("{base}/api/v1/anchors")).send()?.json()?;
    let feats = shared::DMatrix::from_row_iterator(
        anchors.features.len(),
        config.feature_dim,
        anchors.features.iter().flatten().map(|&v| v as f64),
    );
    let a = paper::privatemail::Anchors::new(&feats, &anchors.labels, &config.smlq)?;
    Ok((config, a))
}

/// The search request carrying a client release.
pub fn search_request(
    r: &paper::privatemail::ClientRelease,
    k: usize,
) -> shared::api::SearchRequest {
    paper::privatemail::search_request(r, k)
}

/// `GET {base}/api/v1/status` as JSON (panics on failure: for tests).
pub fn status_json(http: &reqwest::blocking::Client, base: &str) -> serde_json::Value {
    http.get(format!("{base}/api/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Test image `i` of Fashion-MNIST (pixels, label).
pub fn test_image(i: usize) -> (Vec<u8>, u32) {
    let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
    let test = data::fashion::load_split(dir, "t10k").expect("Fashion-MNIST");
    (test.images.image(i).to_vec(), test.labels[i] as u32)
}

/// The page's ten samples (`web/samples.js`, written by `crates/data/tests/models/wasm_parity_fixture.rs`):
/// sample `c` is the last training image of class `c`.
pub fn sample_images() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
    let train = data::fashion::load_split(dir, "train").expect("Fashion-MNIST");
    (0..10u8)
        .map(|class| {
            let i = (0..train.labels.len())
                .rev()
                .find(|&j| train.labels[j] == class)
                .expect("a training image of every class");
            train.images.image(i).to_vec()
        })
        .collect()
}

/// What a real client computes on-device for test image `i`: the retrieval model's features
/// and the class model's label (`embed::classify`).
pub fn client_query(i: usize) -> (Vec<f64>, u32) {
    let model = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).expect("weights");
    let classifier =
        embed::classify::Classifier::from_bytes(data::assets::CLASS_WEIGHTS).expect("class model");
    let (px, _) = test_image(i);
    let features = model.search_features(&px).expect("28×28");
    let class = classifier.classify(&px).expect("28×28");
    (features.iter().map(|&v| v as f64).collect(), class.label)
}

/// `POST /api/v1/search`, decoded as `T` (a `SearchResponse`, or raw JSON to inspect its shape).
pub fn post_search<T: serde::de::DeserializeOwned>(
    http: &reqwest::blocking::Client,
    base: &str,
    req: &shared::api::SearchRequest,
) -> T {
    http.post(format!("{base}/api/v1/search"))
        .json(req)
        .send()
        .expect("search request")
        .json()
        .expect("search response")
}

/// The exact top 8 of `block` for the photo `q` by integer score `T = 2⟨q, f⟩ − ‖f‖²` over the
/// quantised photo and features, highest first, ties to the lower id: what the hintless ranking
/// (`publish::pir::hintless::rank`) must return for the photo's block.
pub fn block_top8_by_scores(q: &[f32], block: &publish::blocks::Block) -> Vec<u64> {
    use publish::blocks::quantise;
    let qi: Vec<i16> = q.iter().map(|&v| quantise(v)).collect();
    let fi: Vec<i16> = block.features.iter().map(|&v| quantise(v)).collect();
    let t = ::pir::scores::plaintext_scores(&qi, &fi, block.dim);
    let mut order: Vec<usize> = (0..block.ids.len()).collect();
    order.sort_by(|&a, &b| t[b].cmp(&t[a]).then(block.ids[a].cmp(&block.ids[b])));
    order.iter().take(8).map(|&r| block.ids[r]).collect()
}
