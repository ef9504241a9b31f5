//! A page whose code the gallery does not serve (docs/page.md): the release bundle
//! (`web/dist/`, `crates/pagebundle`), served by `privatemail page` from this machine, searching
//! a gallery on another port that answers CORS to the listed page origin only; the gallery's
//! access log holds no HTML, script or wasm; hostile answers execute nothing; a changed file
//! is named by `privatemail verify-page` and refused by the browser's integrity check.
//!
//! Needs `scripts/build-web.sh` (web/pkg and web/dist) and Chromium with chromedriver.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fantoccini::{Client, Locator};
use privatemail_e2e::browser::{
    browser, choose, click, free_port, image_file, js, load_photo, native_features, result_ids,
    search, top8, wait_for, whole_gallery, ROOT,
};
use privatemail_e2e::fake::{self, Reply, Request};
use privatemail_e2e::{demo_server, small_server};
use serde_json::json;

const PROTOCOLS: [&str; 5] = ["pir", "blocks", "whole", "frame", "paper"];

fn dist() -> PathBuf {
    let d = PathBuf::from(format!("{ROOT}/web/dist"));
    assert!(
        d.join("manifest.json").exists(),
        "web/dist is missing: run scripts/build-web.sh first"
    );
    d
}

fn cli_bin() -> PathBuf {
    privatemail_e2e::workspace_bin("privatemail")
}

fn state_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pm-page-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `privatemail page` running; killed when dropped.
struct CliPage {
    child: Child,
    /// The address it printed (with `#gallery=…`).
    url: String,
}

impl Drop for CliPage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cli_page(gallery: &str, port: u16, state: &Path) -> CliPage {
    let mut child = Command::new(cli_bin())
        .args([
            "page",
            "--server",
            gallery,
            "--port",
            &port.to_string(),
            "--no-open",
        ])
        .env("PRIVATEMAIL_STATE_DIR", state)
        .env_remove("PRIVATEMAIL_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run privatemail page");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "privatemail page ended"
        );
        if let Some(u) = line.trim().strip_prefix("serving the page at ") {
            break u.to_string();
        }
    };
    CliPage { child, url }
}

fn verify_page(url: &str) -> std::process::Output {
    Command::new(cli_bin())
        .args(["verify-page", url])
        .env_remove("PRIVATEMAIL_SERVER")
        .output()
        .expect("run privatemail verify-page")
}

/// One request as the gallery's address received it.
#[derive(Debug, Clone)]
struct Logged {
    method: String,
    path: String,
    /// `Sec-Fetch-Dest`: what the browser means to do with the answer ("empty" for `fetch`,
    /// "script", "document", …).
    dest: String,
}

type Log = Arc<Mutex<Vec<Logged>>>;

fn log_of(req: &Request) -> Logged {
    Logged {
        method: req.method.clone(),
        path: req.path.clone(),
        dest: req.header("sec-fetch-dest").unwrap_or("").to_string(),
    }
}

/// `req` passed to `base` with every header, answered with every header of the real answer:
/// the gallery as the browser sees it, CORS included.
async fn forward_all(base: &str, req: &Request) -> Reply {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut r = http.request(
        reqwest::Method::from_bytes(req.method.as_bytes()).unwrap(),
        format!("{base}{}", req.path),
    );
    for (n, v) in &req.headers {
        if !matches!(n.as_str(), "host" | "connection" | "content-length") {
            r = r.header(n.as_str(), v.as_str());
        }
    }
    if !req.body.is_empty() {
        r = r.body(req.body.clone());
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => return Reply::bytes(502, "text/plain", e.to_string().into_bytes()),
    };
    let status = resp.status().as_u16();
    let headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(n, _)| {
            !matches!(
                n.as_str(),
                "connection" | "content-length" | "transfer-encoding"
            )
        })
        .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    let mut reply = Reply::bytes(status, "", body);
    reply.headers = headers;
    reply
}

/// The gallery's address: every request logged, then passed to the real server.
async fn logging_gallery(real: String) -> (String, Log) {
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    let base = fake::start(fake::handler(move |req: Request| {
        let (l, real) = (Arc::clone(&l), real.clone());
        async move {
            l.lock().unwrap().push(log_of(&req));
            forward_all(&real, &req).await
        }
    }))
    .await;
    (base, log)
}

/// A server that counts the requests it gets (where a hostile script would report to).
async fn beacon() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    let base = fake::start(fake::handler(move |_req: Request| {
        let h = Arc::clone(&h);
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            Reply::bytes(200, "text/plain", b"seen".to_vec())
                .header("access-control-allow-origin", "*")
        }
    }))
    .await;
    (base, hits)
}

async fn open(c: &Client, url: &str) {
    c.goto(url).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("body[data-ready='true']"))
        .await
        .expect("the page never became ready");
}

/// Whether a `fetch` from the page to `url` gets through ("ok") or is refused ("blocked").
async fn page_fetch(c: &Client, url: &str) -> String {
    let v = c
        .execute_async(
            "const [u, done] = arguments;
             fetch(u, { mode: 'no-cors' }).then(() => done('ok'), () => done('blocked'));",
            vec![json!(url)],
        )
        .await
        .unwrap();
    v.as_str().unwrap().to_string()
}

#[test]
fn the_api_answers_cors_only_to_the_page_origins_its_operator_lists() {
    let listed = "http://127.0.0.1:9";
    let other = "http://evil.example";
    let dist = dist();
    let srv = small_server(
        "page-cors",
        &["--page-origin", listed, "--web-dir", dist.to_str().unwrap()],
    );
    let http = reqwest::blocking::Client::new();
    let acao = |r: &reqwest::blocking::Response| {
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_string())
    };
    // A simple GET: the listed origin may read the answer, with no credentials; another may not.
    let r = http
        .get(format!("{}/api/v1/config", srv.base))
        .header("origin", listed)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(acao(&r).as_deref(), Some(listed));
    assert!(r
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
    assert_eq!(
        r.headers().get("timing-allow-origin").unwrap(),
        listed,
        "Resource Timing for the listed page"
    );
    let r = http
        .get(format!("{}/api/v1/config", srv.base))
        .header("origin", other)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(acao(&r), None, "an unlisted origin reads nothing");
    assert!(r.headers().get("timing-allow-origin").is_none());
    // A preflight for the POSTs of a search: answered for the listed origin only, with the
    // methods and the one header the page sends — never Authorization (the operator's).
    for path in ["/api/v1/search", "/api/v1/gallery"] {
        let pre = |origin: &str, headers: &str| {
            http.request(reqwest::Method::OPTIONS, format!("{}{path}", srv.base))
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header("access-control-request-headers", headers)
                .send()
                .unwrap()
        };
        let r = pre(listed, "content-type");
        assert!(r.status().is_success(), "{path}: {}", r.status());
        assert_eq!(acao(&r).as_deref(), Some(listed), "{path}");
        let methods = r.headers()["access-control-allow-methods"]
            .to_str()
            .unwrap();
        assert!(
            methods.contains("POST") && methods.contains("GET"),
            "{methods}"
        );
        let allowed = r.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        assert_eq!(allowed, "content-type");
        assert!(r
            .headers()
            .get("access-control-allow-credentials")
            .is_none());
        assert_eq!(acao(&pre(other, "content-type")), None, "{path}");
    }
    // The page's own files are not the API: no CORS for them.
    for path in ["/", "/index.html", "/healthz"] {
        let r = http
            .get(format!("{}{path}", srv.base))
            .header("origin", listed)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(acao(&r), None, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_from_the_cli_searches_a_gallery_on_another_port_that_served_it_no_code() {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    // The real gallery serves no page at all; its address logs every request.
    let real = demo_server(
        "page-origin",
        &[
            "--page-origin",
            &origin,
            "--web-dir",
            "/nonexistent-web-dir",
        ],
    );
    let (gallery, log) = logging_gallery(real.base.clone()).await;
    let page = cli_page(&gallery, port, &state_dir("search"));
    // What the CLI asked before serving (whether the gallery lists its origin) is not the
    // browser's: the log starts here.
    log.lock().unwrap().clear();
    assert!(
        page.url.starts_with(&format!("{origin}/#gallery=")),
        "{}",
        page.url
    );
    // The CLI serves exactly this version's bundle.
    let v = verify_page(&format!("{origin}/"));
    assert!(
        v.status.success(),
        "verify-page of the CLI's own page: {}",
        String::from_utf8_lossy(&v.stdout)
    );

    let (_d, c) = browser().await;
    open(&c, &page.url).await;
    let from = js(
        &c,
        "return document.getElementById('code-origin').dataset.from;",
    )
    .await;
    assert_eq!(from, json!("machine"));
    let words = js(
        &c,
        "return document.getElementById('code-origin').textContent;",
    )
    .await;
    assert!(
        words
            .as_str()
            .unwrap()
            .contains("This page's code came from your machine"),
        "{words}"
    );
    assert_eq!(
        js(&c, "return document.getElementById('run-locally').hidden;").await,
        json!(true)
    );

    // Every way of searching, from the page's origin to the gallery's.
    let i = 3;
    let (photo, _) = image_file(i);
    load_photo(&c, &photo).await;
    let whole = whole_gallery(&real.base).await;
    for p in PROTOCOLS {
        let offered = js(
            &c,
            &format!("const o = document.querySelector('#protocol option[value={p}]'); return !o.hidden && !o.disabled;"),
        )
        .await;
        assert_eq!(offered, json!(true), "{p} is offered");
        choose(&c, "protocol", p).await;
        let labels = search(&c).await;
        assert!(!labels.is_empty(), "{p}: matches");
        if p == "whole" {
            let want = top8(&whole, &native_features(i));
            assert_eq!(
                result_ids(&c).await,
                want,
                "the whole gallery gives the exact top 8"
            );
        }
        let err = js(&c, "return document.getElementById('error').hidden;").await;
        assert_eq!(err, json!(true), "{p}: no error");
    }
    let _ = std::fs::remove_file(&photo);

    // Once started, the page connects to nothing but its own origin and the gallery's.
    let (elsewhere, hits) = beacon().await;
    assert_eq!(page_fetch(&c, &format!("{elsewhere}/x")).await, "blocked");
    assert_eq!(page_fetch(&c, &format!("{origin}/index.html")).await, "ok");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a connection outside the policy"
    );

    // The gallery's access log: API requests made by `fetch` (and their preflights) only —
    // no page, script, style sheet, wasm or model file.
    let log = log.lock().unwrap().clone();
    assert!(!log.is_empty());
    for l in &log {
        assert!(l.path.starts_with("/api/v1/"), "{l:?}");
        assert_eq!(
            l.dest, "empty",
            "requested as something other than data: {l:?}"
        );
        let file = l.path.split('?').next().unwrap();
        for ext in [".html", ".js", ".mjs", ".wasm", ".css", ".bin", ".svg"] {
            assert!(!file.ends_with(ext), "{l:?}");
        }
    }
    let count = |m: &str| log.iter().filter(|l| l.method == m).count();
    assert!(
        count("POST") > 0 && count("OPTIONS") > 0,
        "PIR and frame POSTs, preflighted: {log:?}"
    );
    assert!(
        log.iter().any(|l| l.path.starts_with("/api/v1/blocks/")),
        "block downloads"
    );
}

/// What a hostile gallery answers where JSON or bytes are expected: a document with script, and
/// script, each reporting to `beacon` and marking the window if it ever runs.
fn payload(path: &str, beacon: &str, page_origin: &str) -> Reply {
    let js = format!("window.pwned = 1; fetch('{beacon}/ran{path}');");
    let (kind, body) = if path.len().is_multiple_of(2) {
        (
            "text/html",
            format!(
                "<!doctype html><html><body><script>{js}</script><img src=x onerror=\"{js}\"></body></html>"
            ),
        )
    } else {
        ("text/javascript", js)
    };
    Reply::bytes(200, kind, body.into_bytes()).header("access-control-allow-origin", page_origin)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gallery_that_answers_html_or_script_where_data_is_expected_runs_none_of_it() {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let real = demo_server(
        "page-hostile",
        &[
            "--page-origin",
            &origin,
            "--web-dir",
            "/nonexistent-web-dir",
        ],
    );
    let (beacon_url, hits) = beacon().await;
    // 0: every answer hostile; 1: the public documents honest, every other answer hostile.
    let mode = Arc::new(AtomicU8::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let gallery = {
        let (mode, served, real, beacon_url, origin) = (
            Arc::clone(&mode),
            Arc::clone(&served),
            real.base.clone(),
            beacon_url.clone(),
            origin.clone(),
        );
        fake::start(fake::handler(move |req: Request| {
            let (mode, served, real, beacon_url, origin) = (
                Arc::clone(&mode),
                Arc::clone(&served),
                real.clone(),
                beacon_url.clone(),
                origin.clone(),
            );
            async move {
                let docs = [
                    "/api/v1/config",
                    "/api/v1/identity",
                    "/api/v1/anchors",
                    "/api/v1/gallery-map",
                    "/api/v1/partition",
                    "/api/v1/pir",
                ];
                let honest = req.method == "OPTIONS"
                    || (mode.load(Ordering::SeqCst) == 1 && docs.contains(&req.path.as_str()));
                if honest {
                    forward_all(&real, &req).await
                } else {
                    served.fetch_add(1, Ordering::SeqCst);
                    payload(&req.path, &beacon_url, &origin)
                }
            }
        }))
        .await
    };
    let page = cli_page(&gallery, port, &state_dir("hostile"));
    let (_d, c) = browser().await;

    // Every document hostile: the page does not start, and says so.
    c.goto(&page.url).await.unwrap();
    wait_for(
        &c,
        "!document.getElementById('error').hidden",
        "the start's error",
    )
    .await;
    assert_ne!(
        js(&c, "return document.body.dataset.ready || '';").await,
        json!("true")
    );

    // The documents honest, every other answer hostile: each way of searching fails plainly.
    mode.store(1, Ordering::SeqCst);
    js(&c, "location.reload(); return 0;").await;
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("body[data-ready='true']"))
        .await
        .expect("the page never became ready with honest documents");
    let (photo, _) = image_file(5);
    load_photo(&c, &photo).await;
    for p in ["blocks", "whole", "frame", "paper", "pir"] {
        choose(&c, "protocol", p).await;
        js(&c, "document.getElementById('error').hidden = true; document.getElementById('results').replaceChildren(); return 0;").await;
        click(&c, "search").await;
        wait_for(
            &c,
            "!document.getElementById('error').hidden || !document.getElementById('warning').hidden",
            "an error or the budget warning",
        )
        .await;
        if js(&c, "return !document.getElementById('warning').hidden;").await == json!(true) {
            click(&c, "search-anyway").await;
            wait_for(&c, "!document.getElementById('error').hidden", "an error").await;
        }
        let shown = js(
            &c,
            "return document.querySelectorAll('#results li').length;",
        )
        .await;
        assert_eq!(shown, json!(0), "{p}: no matches from a hostile answer");
    }
    let _ = std::fs::remove_file(&photo);
    assert!(
        served.load(Ordering::SeqCst) >= 5,
        "hostile answers were read"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        js(&c, "return typeof window.pwned;").await,
        json!("undefined")
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a hostile answer's script ran"
    );
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("wasm") => "application/wasm",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// A static host serving the files of `dir`; the paths it was asked for.
async fn static_host(dir: PathBuf) -> (String, Arc<Mutex<Vec<String>>>) {
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let a = Arc::clone(&asked);
    let base = fake::start(fake::handler(move |req: Request| {
        let (dir, a) = (dir.clone(), Arc::clone(&a));
        async move {
            let path = req.path.split(['?', '#']).next().unwrap().to_string();
            a.lock().unwrap().push(path.clone());
            let name = match path.trim_start_matches('/') {
                "" => "index.html".to_string(),
                n => n.to_string(),
            };
            if name.contains("..") {
                return Reply::bytes(400, "text/plain", vec![]);
            }
            match std::fs::read(dir.join(&name)) {
                Ok(b) => Reply::bytes(200, content_type(&name), b),
                Err(_) => Reply::bytes(404, "text/plain", b"not found".to_vec()),
            }
        }
    }))
    .await;
    (base, asked)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_page_names_a_changed_file_and_the_browser_refuses_to_run_it() {
    let dist = dist();
    let manifest =
        pagebundle::Manifest::parse(&std::fs::read(dist.join("manifest.json")).unwrap()).unwrap();
    // A static host with one module changed and one file gone.
    let copy = state_dir("static");
    copy_dir(&dist, &copy);
    let changed = manifest
        .files
        .keys()
        .find(|n| n.starts_with("format.") && n.ends_with(".js"))
        .unwrap()
        .clone();
    let gone = manifest
        .files
        .keys()
        .find(|n| n.starts_with("pkg/results."))
        .unwrap()
        .clone();
    let (beacon_url, hits) = beacon().await;
    let original = std::fs::read_to_string(copy.join(&changed)).unwrap();
    std::fs::write(
        copy.join(&changed),
        format!("window.tampered = 1; fetch('{beacon_url}/tampered');\n{original}"),
    )
    .unwrap();
    std::fs::remove_file(copy.join(&gone)).unwrap();
    let (host, asked) = static_host(copy.clone()).await;

    // The gallery serves the unchanged bundle and lists the static host as a page origin.
    let srv = demo_server(
        "page-verify",
        &["--web-dir", dist.to_str().unwrap(), "--page-origin", &host],
    );
    let ok = verify_page(&format!("{}/", srv.base));
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{out}");
    assert!(
        out.contains(&format!("all {} files", manifest.files.len())),
        "{out}"
    );

    let bad = verify_page(&format!("{host}/"));
    assert_eq!(bad.status.code(), Some(12), "{bad:?}");
    let out = String::from_utf8_lossy(&bad.stdout);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        out.contains(&format!("{changed}: changed: sha256")),
        "{out}"
    );
    assert!(out.contains(&format!("{gone}: missing: HTTP 404")), "{out}");
    assert_eq!(out.lines().count(), 2, "only the two differences: {out}");
    assert!(err.contains(&changed) && err.contains(&gone), "{err}");

    let (_d, c) = browser().await;
    // The bundle from the gallery itself runs, and says its code came from the gallery.
    open(&c, &format!("{}/", srv.base)).await;
    assert_eq!(
        js(
            &c,
            "return document.getElementById('code-origin').dataset.from;"
        )
        .await,
        json!("gallery")
    );
    assert_eq!(
        js(&c, "return document.getElementById('run-locally').hidden;").await,
        json!(false),
        "the way to run it from this machine is offered"
    );
    // The changed copy: the browser fetches the changed module, refuses it, runs nothing.
    c.goto(&format!("{host}/#gallery={}", srv.base))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        asked
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == &format!("/{changed}")),
        "the changed module was requested"
    );
    assert_ne!(
        js(&c, "return document.body.dataset.ready || '';").await,
        json!("true")
    );
    assert_eq!(
        js(&c, "return typeof window.tampered;").await,
        json!("undefined")
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the changed module ran");
    let _ = std::fs::remove_dir_all(&copy);
}
