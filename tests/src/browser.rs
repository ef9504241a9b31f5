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
    let caps = json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-background-networking",
                     "--disable-component-update", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,2000"]
        }
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

/// Save test image `i` as a PNG file the browser can upload.
pub fn image_file(i: usize) -> (std::path::PathBuf, u32) {
    let (px, label) = test_image(i);
    let png = privatemail_server::thumbnail::png_grey(&px, 28, 28).unwrap();
    let path = std::env::temp_dir().join(format!("pm-upload-{}-{i}.png", std::process::id()));
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
    let deadline = Instant::now() + Duration::from_secs(30);
    while js(c, &format!("return !!({cond});")).await != json!(true) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Click search (confirming the over-budget warning if it appears) and wait for the matches.
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
