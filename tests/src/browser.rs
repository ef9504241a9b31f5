//! Driving the page in headless Chromium through chromedriver (WebDriver) with fantoccini:
//! shared by the browser end-to-end tests and the `pagebench` benchmark.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use crate::{test_image, Server};

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

pub struct Driver(Child);
impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// chromedriver on a free port, Chromium headless with the flags this machine needs.
pub async fn browser() -> (Driver, Client) {
    browser_with(&[]).await
}

/// [`browser`] with extra Chromium flags.
pub async fn browser_with(extra: &[&str]) -> (Driver, Client) {
    assert!(
        std::path::Path::new(&format!("{ROOT}/web/pkg/privatemail_client_wasm.js")).exists(),
        "web/pkg is missing: run scripts/build-web.sh first (scripts/test.sh does)"
    );
    let port = free_port();
    let driver = Driver(
        Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver)"),
    );
    let mut args = vec![
        "--headless",
        "--no-sandbox",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1100,2000",
    ];
    args.extend_from_slice(extra);
    let caps = json!({
        "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args }
    });
    let caps = caps.as_object().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ClientBuilder::native()
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => return (driver, c),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot start a WebDriver session: {e}"),
        }
    }
}

pub fn server() -> Server {
    crate::demo_server("browser", &["--web-dir", &format!("{ROOT}/web")])
}

pub async fn open_page(c: &Client, base: &str) {
    c.goto(&format!("{base}/")).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("body[data-ready='true']"))
        .await
        .expect("the page never became ready");
}

/// Save test image `i` as a PNG file the browser can upload. Each call gets its own file: tests
/// run in parallel and delete their files when done, so a shared name would let one test
/// remove (or rewrite) the file another is uploading.
pub fn image_file(i: usize) -> (std::path::PathBuf, u32) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (px, label) = test_image(i);
    let png = publish::png::png_grey(&px, 28, 28).unwrap();
    let path = std::env::temp_dir().join(format!("pm-upload-{}-{n}-{i}.png", std::process::id()));
    std::fs::write(&path, png).unwrap();
    (path, label)
}

pub async fn upload(c: &Client, path: &std::path::Path) {
    c.find(Locator::Id("file"))
        .await
        .unwrap()
        .send_keys(path.to_str().unwrap())
        .await
        .unwrap();
}

pub async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

pub async fn wait_for(c: &Client, cond: &str, what: &str) {
    wait_for_within(c, cond, what, Duration::from_secs(30)).await
}

/// [`wait_for`] with another limit (a wait that outlasts the page's own deadline).
pub async fn wait_for_within(c: &Client, cond: &str, what: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while js(c, &format!("return !!({cond});")).await != json!(true) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the element with this id (`textContent`).
pub async fn text(c: &Client, id: &str) -> String {
    let v = js(
        c,
        &format!("return document.getElementById('{id}').textContent;"),
    )
    .await;
    v.as_str().unwrap().to_string()
}

/// The gallery ids of the results shown, in order.
pub async fn result_ids(c: &Client) -> Vec<u64> {
    serde_json::from_value(
        js(
            c,
            "return [...document.querySelectorAll('#results li')].map(li => Number(li.dataset.id));",
        )
        .await,
    )
    .unwrap()
}

/// Click the element with this id.
pub async fn click(c: &Client, id: &str) {
    c.find(Locator::Id(id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Confirm the over-budget warning if it is showing.
pub async fn confirm_warning(c: &Client) {
    if js(c, "return !document.getElementById('warning').hidden;").await == json!(true) {
        click(c, "search-anyway").await;
    }
}

/// Upload an image file and wait until the model has run on it.
pub async fn load_photo(c: &Client, path: &std::path::Path) {
    upload(c, path).await;
    wait_for(
        c,
        "!document.getElementById('search').disabled",
        "the model",
    )
    .await;
}

/// Click search (confirming the over-budget warning if it appears) and wait for the matches;
/// their labels, in order.
pub async fn search(c: &Client) -> Vec<u32> {
    js(
        c,
        "document.getElementById('results').replaceChildren(); return 0;",
    )
    .await;
    click(c, "search").await;
    wait_for(
        c,
        "document.querySelectorAll('#results li').length > 0 || !document.getElementById('warning').hidden",
        "matches or the budget warning",
    )
    .await;
    confirm_warning(c).await;
    wait_for(
        c,
        "document.querySelectorAll('#results li').length > 0",
        "matches",
    )
    .await;
    let labels = js(
        c,
        "return [...document.querySelectorAll('#results li')].map(li => Number(li.dataset.label));",
    )
    .await;
    serde_json::from_value(labels).unwrap()
}

/// Set a `<select>` (or range input) by id to `value` and fire its `change` and `input`
/// events, as a user's choice would.
pub async fn choose(c: &Client, id: &str, value: &str) {
    js(
        c,
        &format!(
            "const e = document.getElementById({id:?}); e.value = {value:?};
             e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change')); return 0;"
        ),
    )
    .await;
}

/// The on-device model's features for test image `i` as the page computes them from the
/// uploaded PNG (grey replicated into RGBA, `from_rgba`, the model): the photo's exact features,
/// computed natively — ground truth the page never exposes.
pub fn native_features(i: usize) -> Vec<f32> {
    let (px, _) = test_image(i);
    let rgba: Vec<u8> = px.iter().flat_map(|&v| [v, v, v, 255]).collect();
    let pixels = embed::photo::to_model_input(&rgba, 28, 28).unwrap();
    let model = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    model.search_features(&pixels).unwrap()
}

/// The on-device model's features for a photo file as the CLI computes them (its decoder,
/// `embed::photo_file::decode`, then the query model); the page's for a PNG, whose decoded
/// pixels are the same in both (`e2e::photo_decode`).
pub fn native_features_of(file: &[u8]) -> Vec<f32> {
    let framing = embed::photo_file::decode(file).unwrap();
    let model = embed::model::Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    model.search_features(&framing.pixels).unwrap()
}

/// `GET {base}{path}` as bytes, from a blocking thread.
pub async fn get_bytes(base: &str, path: &str) -> Vec<u8> {
    let url = format!("{base}{path}");
    tokio::task::spawn_blocking(move || {
        let r = reqwest::blocking::get(&url).unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
        r.bytes().unwrap().to_vec()
    })
    .await
    .unwrap()
}

/// The whole gallery as the partition publishes it (its whole-gallery block), hash-checked:
/// the ground truth of the exact top 8.
pub async fn whole_gallery(base: &str) -> publish::blocks::Block {
    let doc = partition(base).await;
    let level = doc
        .levels
        .iter()
        .position(|l| l.whole)
        .expect("whole level");
    let bytes = get_bytes(base, &client::block_search::block_url(&doc, level, 0)).await;
    publish::blocks::decode(&bytes, Some(&doc.levels[level].hashes[0])).unwrap()
}

/// The ids of the exact top 8 of `whole` for `features`.
pub fn top8(whole: &publish::blocks::Block, features: &[f32]) -> Vec<u64> {
    publish::blocks::rank(features, std::slice::from_ref(whole), 8)
        .unwrap()
        .iter()
        .map(|h| h.id)
        .collect()
}

/// The server's partition document.
pub async fn partition(base: &str) -> shared::api::PartitionDoc {
    serde_json::from_slice(&get_bytes(base, "/api/v1/partition").await).unwrap()
}

/// A level's centroids, fetched and verified as a client does.
pub async fn centroids(
    base: &str,
    doc: &shared::api::PartitionDoc,
    level: usize,
) -> publish::centroids::Centroids {
    let url = publish::centroids::centroids_url(doc, level);
    publish::centroids::verify(doc, level, &get_bytes(base, &url).await).unwrap()
}

/// One block search as the page made it: the URLs it passed to `fetch` (in order) and the
/// paths of every resource the page loaded (Resource Timing), from the click until 50 ms after
/// the results were drawn.
#[derive(Debug, serde::Deserialize)]
pub struct SearchLog {
    pub fetches: Vec<String>,
    pub resources: Vec<String>,
}

/// Click "search" `n` times on the loaded photo, inside the page (fast: one script per 25
/// searches), recording each search's requests. The spent budget is forgotten before each
/// search so the over-budget warning never interrupts.
pub async fn block_searches(c: &Client, n: usize) -> Vec<SearchLog> {
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let batch = left.min(25);
        left -= batch;
        let v = c
            .execute_async(
                "const [n, done] = arguments;
                 (async () => {
                   const log = [];
                   const orig = window.__origFetch || (window.__origFetch = window.fetch.bind(window));
                   let cur = null;
                   window.fetch = (u, o) => { if (cur) cur.push(String(u)); return orig(u, o); };
                   const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
                   for (let i = 0; i < n; i++) {
                     localStorage.removeItem('privatemail.receipts');
                     document.getElementById('results').replaceChildren();
                     performance.clearResourceTimings();
                     cur = [];
                     document.getElementById('search').click();
                     const t = performance.now();
                     while (document.querySelectorAll('#results li').length === 0) {
                       if (!document.getElementById('error').hidden)
                         return done({ error: document.getElementById('error').textContent });
                       if (performance.now() - t > 20000) return done({ error: 'timed out' });
                       await sleep(2);
                     }
                     await sleep(50);
                     const resources = performance.getEntriesByType('resource')
                       .map((e) => new URL(e.name).pathname);
                     log.push({ fetches: cur.map((u) => new URL(u, location.href).pathname), resources });
                     cur = null;
                   }
                   done(log);
                 })();",
                vec![json!(batch)],
            )
            .await
            .unwrap();
        assert!(v.get("error").is_none(), "block search failed: {v}");
        out.extend(serde_json::from_value::<Vec<SearchLog>>(v).unwrap());
    }
    out
}

/// [`server`] with extra flags (e.g. `--max-share`).
pub fn server_with(extra: &[&str]) -> Server {
    let web = format!("{ROOT}/web");
    let mut args = vec!["--web-dir", web.as_str()];
    args.extend_from_slice(extra);
    crate::demo_server("browser", &args)
}
