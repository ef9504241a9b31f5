//! A refusal a server cannot dodge by renaming itself (`client::identity`, `cli/src/identity.rs`).
//! The real server binary behind fakes (`fake`) that forward to it and, per mode, damage every
//! PIR thumbnail answer (a failed check, then a refusal), present another key, or forge the
//! identity's signature. The `privatemail` CLI must then refuse every spelling of the refused
//! server, a new name on another port that serves the same gallery (the old name redirecting
//! to it), a new key at a known name until the person accepts it, and a forged signature —
//! sending no search request in each case.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use ed25519_dalek::{Signer, SigningKey};
use privatemail_e2e::browser::{self, js, load_photo, wait_for};
use privatemail_e2e::demo_server;
use privatemail_e2e::fake::{self, Body, Reply, Request};
use privatemail_e2e::photo_png as photo;
use serde_json::{json, Value};
use shared::identity::{signed_message, IdentityDoc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Everything forwarded.
    Honest,
    /// Every PIR thumbnail answer with ten bytes inverted.
    Damaged,
    /// The identity signed by another key (over the real configuration).
    NewKey,
    /// The real key with another key's signature.
    Forged,
    /// Every request answered `301` to `moved_to`.
    Moved,
}

struct Front {
    real: String,
    http: reqwest::Client,
    mode: Mutex<Mode>,
    moved_to: Mutex<String>,
    other_key: SigningKey,
    /// Every request's path, in order.
    log: Mutex<Vec<String>>,
}

impl Front {
    async fn answer(&self, req: Request) -> Reply {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {}", req.method, req.path));
        let mode = *self.mode.lock().unwrap();
        let path = req.path.clone();
        match mode {
            Mode::Moved => {
                let to = format!("{}{path}", self.moved_to.lock().unwrap());
                Reply::bytes(301, "text/plain", Vec::new()).header("location", &to)
            }
            Mode::NewKey | Mode::Forged if path == "/api/v1/identity" => {
                // The whole body, whatever the browser has cached.
                let mut fresh = req.clone();
                fresh.headers.retain(|(n, _)| n != "if-none-match");
                let bytes = fake::identity_body(&self.http, &self.real, &path, &fresh).await;
                let real: IdentityDoc = serde_json::from_slice(&bytes).unwrap();
                let digest: [u8; 32] = hex::decode(&real.config_sha256)
                    .unwrap()
                    .try_into()
                    .unwrap();
                let signature =
                    hex::encode(self.other_key.sign(&signed_message(&digest)).to_bytes());
                let doc = IdentityDoc {
                    key: match mode {
                        Mode::NewKey => hex::encode(self.other_key.verifying_key().as_bytes()),
                        _ => real.key,
                    },
                    signature,
                    ..real
                };
                Reply::bytes(200, "application/json", serde_json::to_vec(&doc).unwrap())
            }
            Mode::Damaged if req.method == "POST" && path.ends_with("/thumbs") => {
                let r = fake::forward(&self.http, &self.real, &path, &req).await;
                let Body::Bytes(mut bytes) = r.body else {
                    unreachable!("forward answers with bytes")
                };
                bytes[100..110].iter_mut().for_each(|b| *b ^= 0xff);
                Reply {
                    status: r.status,
                    headers: r.headers,
                    body: Body::Bytes(bytes),
                }
            }
            _ => fake::forward(&self.http, &self.real, &path, &req).await,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The requests since the last call, other than the identity and the configuration
    /// (what a search sends once the gate has passed).
    fn searched(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
            .into_iter()
            .filter(|p| p != "GET /api/v1/identity" && p != "GET /api/v1/config")
            .collect()
    }

    /// The page's search requests since the last call: PIR's files and queries, blocks, and
    /// every `POST`.
    fn page_searches(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
            .into_iter()
            .filter(|l| {
                l.starts_with("POST ")
                    || l.starts_with("GET /api/v1/pir/")
                    || l.starts_with("GET /api/v1/blocks/")
            })
            .collect()
    }

    fn requests(&self) -> usize {
        std::mem::take(&mut *self.log.lock().unwrap()).len()
    }
}

/// The real server, two fronts to it on their own ports (two names of one gallery), the CLI.
struct Setup {
    a: (String, Arc<Front>),
    b: (String, Arc<Front>),
    bin: PathBuf,
    dir: PathBuf,
    _rt: tokio::runtime::Runtime,
    _real: privatemail_e2e::Server,
}

/// A front to `real` on the current runtime, its other key from `seed`.
async fn front(real: &str, seed: u8) -> (String, Arc<Front>) {
    let f = Arc::new(Front {
        real: real.to_string(),
        http: reqwest::Client::new(),
        mode: Mutex::new(Mode::Honest),
        moved_to: Mutex::new(String::new()),
        other_key: SigningKey::from_bytes(&[seed; 32]),
        log: Mutex::new(Vec::new()),
    });
    let h = f.clone();
    let base = fake::start(fake::handler(move |req: Request| {
        let h = h.clone();
        async move { h.answer(req).await }
    }))
    .await;
    (base, f)
}

fn setup(tag: &str) -> Setup {
    let real = demo_server(tag, &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let front = |seed: u8| rt.block_on(front(&real.base, seed));
    let (a, b) = (front(1), front(2));
    Setup {
        a,
        b,
        bin: cli_bin(),
        dir: std::env::temp_dir().join(format!("pm-identity-{tag}-{}", std::process::id())),
        _rt: rt,
        _real: real,
    }
}

fn cli_bin() -> PathBuf {
    privatemail_e2e::workspace_bin("privatemail")
}

fn run(bin: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("PRIVATEMAIL_STATE_DIR", state)
        .env_remove("PRIVATEMAIL_SERVER")
        .output()
        .expect("run privatemail")
}

fn search(s: &Setup, state: &Path, server: &str, i: usize) -> Output {
    let photo = photo(&s.dir, i);
    run(
        &s.bin,
        state,
        &[
            "search",
            photo.to_str().unwrap(),
            "--server",
            server,
            "--protocol",
            "pir",
        ],
    )
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The port of `http://127.0.0.1:port`.
fn port(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

/// After one answer fails its checks under one name, no spelling of that server gets a
/// request, and a new name on another port that serves the same gallery (its key) gets none
/// past the identity — nor, once caught there, with another key.
#[test]
fn no_spelling_or_new_name_of_a_refused_server_gets_a_search() {
    let s = setup("identity-spellings");
    let state = s.dir.join("state");
    let ((a, fa), (b, fb)) = (&s.a, &s.b);
    fa.set(Mode::Damaged);
    let first = search(&s, &state, a, 0);
    assert_eq!(first.status.code(), Some(10), "{}", text(&first));
    assert!(
        !fa.searched().is_empty(),
        "the first search sent its queries"
    );
    let book: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("identities.json")).unwrap()).unwrap();
    let refused = &book["refusals"][0];
    assert_eq!(refused["keys"].as_array().unwrap().len(), 1, "{book}");
    assert!(
        !refused["addresses"].as_array().unwrap().is_empty(),
        "{book}"
    );
    fa.set(Mode::Honest);
    let p = port(a);
    // Each spelling is refused before any request reaches the server: by the normalised
    // origin, or (localhost) by the resolved address.
    let spellings = [
        format!("http://127.0.0.1:{p}/"),
        format!("http://127.0.0.1.:{p}"),
        format!("http://127.0.0.1:{p}/./"),
        format!("http://127.0.0.1:{p}/gallery/"),
        format!("https://127.0.0.1:{p}"),
        format!("http://2130706433:{p}"),
        format!("http://[::ffff:127.0.0.1]:{p}"),
        format!("http://localhost:{p}"),
        format!("http://www.localhost:{p}"),
        format!("http://LOCALHOST.:{p}"),
    ];
    for (i, spelling) in spellings.iter().enumerate() {
        let r = search(&s, &state, spelling, i + 1);
        let err = text(&r);
        assert_eq!(r.status.code(), Some(11), "{spelling}: {err}");
        assert!(err.contains("stopped"), "{spelling}: {err}");
        assert_eq!(fa.requests(), 0, "{spelling}: a request was sent");
    }
    // The old name redirects to a new one (another port: another origin and address) that
    // serves the same gallery. The old name gets no request; the new one, its identity and
    // configuration only: its key is the refused one.
    *fa.moved_to.lock().unwrap() = b.clone();
    fa.set(Mode::Moved);
    let r = search(&s, &state, a, 20);
    assert_eq!(r.status.code(), Some(11), "{}", text(&r));
    assert_eq!(fa.requests(), 0);
    let r = search(&s, &state, b, 21);
    assert_eq!(r.status.code(), Some(11), "{}", text(&r));
    assert_eq!(
        fb.searched(),
        Vec::<String>::new(),
        "a search request reached the new name"
    );
    // Caught under the new name, it is refused there by name even with another key.
    fb.set(Mode::NewKey);
    let r = search(&s, &state, b, 22);
    assert_eq!(r.status.code(), Some(11), "{}", text(&r));
    assert_eq!(fb.requests(), 0, "refused by its name, before any request");
    // Cleared by the person under any of its names, the old name searches again.
    fb.set(Mode::Honest);
    fa.set(Mode::Honest);
    let clear = run(&s.bin, &state, &["clear-refusal", "--server", b]);
    assert_eq!(clear.status.code(), Some(0), "{}", text(&clear));
    let r = search(&s, &state, a, 23);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// A known name presenting a key other than the one pinned on first use is refused, with
/// nothing sent past the identity, until the person accepts the new key; a forged signature
/// is refused and pins nothing.
#[test]
fn a_new_key_waits_for_the_person_and_a_forged_signature_is_refused() {
    let s = setup("identity-keys");
    let state = s.dir.join("state");
    let ((a, fa), (b, fb)) = (&s.a, &s.b);
    // A forged signature on first contact: refused (a malformed answer), no search request.
    fb.set(Mode::Forged);
    let r = search(&s, &state, b, 0);
    let err = text(&r);
    assert_eq!(r.status.code(), Some(7), "{err}");
    assert!(err.contains("signature"), "{err}");
    assert_eq!(fb.searched(), Vec::<String>::new());
    // Pinned on first use.
    let r = search(&s, &state, a, 1);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    fa.requests();
    // Another key at the known name: stopped, naming the key presented.
    fa.set(Mode::NewKey);
    let presented = hex::encode(fa.other_key.verifying_key().as_bytes());
    for i in [2, 3] {
        let r = search(&s, &state, a, i);
        let err = text(&r);
        assert_eq!(r.status.code(), Some(11), "{err}");
        assert!(
            err.contains(&presented) && err.contains("accept-key"),
            "{err}"
        );
        assert_eq!(
            fa.searched(),
            Vec::<String>::new(),
            "a search request was sent"
        );
    }
    // A forged signature at the known name: refused as well.
    fa.set(Mode::Forged);
    let r = search(&s, &state, a, 4);
    assert_eq!(r.status.code(), Some(7), "{}", text(&r));
    assert_eq!(fa.searched(), Vec::<String>::new());
    // The person accepts the new key (by another spelling of the name): searches run.
    fa.set(Mode::NewKey);
    let spelled = format!("http://127.0.0.1.:{}/./", port(a));
    let accept = run(
        &s.bin,
        &state,
        &["accept-key", "--server", &spelled, "--key", &presented],
    );
    assert_eq!(accept.status.code(), Some(0), "{}", text(&accept));
    let r = search(&s, &state, a, 5);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    // And the old key is now the unknown one.
    fa.set(Mode::Honest);
    let r = search(&s, &state, a, 6);
    assert_eq!(r.status.code(), Some(11), "{}", text(&r));
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The page keys its refusal the same way (the wasm client's rules): its gallery's key is
/// pinned on first use; a new key at its origin stops every search, with nothing sent, until the
/// person presses "Accept the gallery's new key"; a forged signature stops the page before
/// it is ready; and after a failed check the refusal stands by origin whatever key the server
/// then presents, and is cleared only by hand.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_pins_the_gallery_key_and_keeps_the_refusal_by_key_and_origin() {
    let real = browser::server();
    let (base, f) = front(&real.base, 3).await;
    let (_driver, c) = browser::browser().await;
    browser::open_page(&c, &base).await;
    let origin = base.trim_start_matches("http://").to_string();
    let book = |c: &fantoccini::Client| {
        let c = c.clone();
        async move {
            let v = js(&c, "return localStorage.getItem('privatemail.identities');").await;
            serde_json::from_str::<Value>(v.as_str().unwrap_or("{}")).unwrap()
        }
    };
    let pinned = book(&c).await["pins"][&origin].clone();
    assert!(
        pinned.as_str().is_some_and(|k| k.len() == 64),
        "{}",
        book(&c).await
    );
    let (file, _) = browser::image_file(0);
    load_photo(&c, &file).await;
    assert_eq!(browser::search(&c).await.len(), 8);
    // A new key at the known origin: stopped, naming the key; no search request.
    f.set(Mode::NewKey);
    browser::open_page(&c, &base).await;
    let presented = hex::encode(f.other_key.verifying_key().as_bytes());
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the new-key stop",
    )
    .await;
    let text = browser::text(&c, "stopped-text").await;
    assert!(text.contains(&presented), "{text}");
    assert_eq!(
        js(&c, "return document.getElementById('accept-key').hidden;").await,
        json!(false)
    );
    assert_eq!(
        js(
            &c,
            "return document.getElementById('clear-refusal').hidden;"
        )
        .await,
        json!(true)
    );
    f.page_searches();
    load_photo(&c, &file).await;
    js(
        &c,
        "document.getElementById('stopped').hidden = true; return 0;",
    )
    .await;
    browser::click(&c, "search").await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the stop again",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        f.page_searches(),
        Vec::<String>::new(),
        "a search request was sent"
    );
    assert_eq!(book(&c).await["pins"][&origin], pinned);
    // Accepted by the person: pinned, and searches run.
    browser::click(&c, "accept-key").await;
    assert_eq!(
        js(&c, "return document.getElementById('stopped').hidden;").await,
        json!(true)
    );
    assert_eq!(book(&c).await["pins"][&origin], json!(presented));
    assert_eq!(browser::search(&c).await.len(), 8);
    // A forged signature: the page does not become ready; no search is possible.
    f.set(Mode::Forged);
    c.goto(&format!("{base}/")).await.unwrap();
    wait_for(
        &c,
        "!document.getElementById('error').hidden",
        "the identity refused",
    )
    .await;
    let err = browser::text(&c, "error").await;
    assert!(err.contains("signature"), "{err}");
    assert_ne!(
        js(&c, "return document.body.dataset.ready || '';").await,
        json!("true")
    );
    // Back to the first key: a new key again, accepted again.
    f.set(Mode::Honest);
    browser::open_page(&c, &base).await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the old key's stop",
    )
    .await;
    browser::click(&c, "accept-key").await;
    assert_eq!(book(&c).await["pins"][&origin], pinned);
    // A failed check, recorded by the key and the origin.
    f.set(Mode::Damaged);
    browser::open_page(&c, &base).await;
    load_photo(&c, &file).await;
    browser::click(&c, "search").await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the refusal",
    )
    .await;
    let refused = book(&c).await["refusals"][0].clone();
    assert_eq!(refused["keys"], json!([pinned]), "{refused}");
    assert_eq!(refused["origins"], json!([origin]), "{refused}");
    // The server changes its key: still refused (by the origin), and the way on is to clear
    // the refusal, not to accept a key.
    f.set(Mode::NewKey);
    browser::open_page(&c, &base).await;
    wait_for(
        &c,
        "!document.getElementById('stopped').hidden",
        "the refusal after a new key",
    )
    .await;
    assert_eq!(
        js(
            &c,
            "return document.getElementById('clear-refusal').hidden;"
        )
        .await,
        json!(false)
    );
    assert_eq!(
        js(&c, "return document.getElementById('accept-key').hidden;").await,
        json!(true)
    );
    f.page_searches();
    load_photo(&c, &file).await;
    browser::click(&c, "search").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        f.page_searches(),
        Vec::<String>::new(),
        "a search request was sent"
    );
    let _ = std::fs::remove_file(&file);
    c.close().await.unwrap();
}
