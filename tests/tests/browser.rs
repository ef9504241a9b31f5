//! The page in a real browser: Debian's headless Chromium, driven through chromedriver
//! (WebDriver) with fantoccini, against the real server binary serving `web/`.
//!
//! Needs `web/pkg` (built by `scripts/build-web.sh`; `scripts/test.sh` runs it first),
//! `/usr/bin/chromium` and `/usr/bin/chromedriver`. Writes a screenshot to
//! `target/e2e-artifacts/browser-search.png`.

use fantoccini::key::Key;
use fantoccini::Locator;
use privatemail_e2e::browser::{
    browser, click, confirm_warning, image_file, js, load_photo, open_page, search, server, upload,
    wait_for,
};
use privatemail_e2e::test_image;
use serde_json::{json, Value};

const ROOT: &str = privatemail_e2e::browser::ROOT;

/// Test images the native model classifies correctly and confidently: the test is about the
/// pipeline at a large ε, not about the model's mistakes.
fn confident_images(count: usize) -> Vec<usize> {
    let model = shared::model::Model::from_bytes(privatemail_server::MODEL_WEIGHTS).unwrap();
    (5000..6000)
        .filter(|&i| {
            let (px, label) = test_image(i);
            let inf = model.infer(&px).unwrap();
            inf.label == label && inf.probabilities[label as usize] > 0.99
        })
        .step_by(7)
        .take(count)
        .collect()
}

/// Upload real Fashion-MNIST test images, search at the largest ε with the keyboard, and check
/// that the matches mostly share the image's class; save a screenshot; report timings.
#[tokio::test(flavor = "multi_thread")]
async fn page_finds_same_class_matches_at_large_epsilon() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    // Keyboard only: End moves the privacy slider to its largest ε.
    let slider = c.find(Locator::Id("epsilon")).await.unwrap();
    slider.send_keys(&Key::End).await.unwrap();
    assert_eq!(
        js(
            &c,
            "return document.getElementById('eps-value').textContent;"
        )
        .await,
        json!("100")
    );

    let (mut same, mut total) = (0, 0);
    let mut timings = Vec::new();
    for i in confident_images(4) {
        let (path, label) = image_file(i);
        load_photo(&c, &path).await;
        let shown = js(
            &c,
            "return document.getElementById('prediction').textContent;",
        )
        .await;
        assert!(shown.as_str().unwrap().contains("sure"), "{shown}");
        let labels = search(&c).await;
        assert_eq!(labels.len(), 8, "image {i}: {labels:?}");
        same += labels.iter().filter(|&&l| l == label).count();
        total += labels.len();
        timings.push(js(&c, "return window.pmTimings;").await);
        let _ = std::fs::remove_file(path);
    }
    let dir = format!("{ROOT}/target/e2e-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        format!("{dir}/browser-search.png"),
        c.screenshot().await.unwrap(),
    )
    .unwrap();
    // The plot shows the sent rows and the real one.
    assert_eq!(
        js(
            &c,
            "return document.querySelectorAll('#plot polygon').length;"
        )
        .await,
        json!(1)
    );
    let spent = js(&c, "return document.getElementById('spent').textContent;").await;
    assert!(
        spent.as_str().unwrap().contains("over 4 searches"),
        "{spent}"
    );
    eprintln!("browser timings (ms): {timings:?}");
    c.close().await.unwrap();
    let share = same as f64 / total as f64;
    assert!(
        share > 0.5,
        "only {same} of {total} matches share the query's class"
    );
}

/// What the page sends after a search is the same whichever row is real: exactly one
/// `POST /api/v1/search` whose body holds only the shuffled rows, k and the (public) noise std —
/// no per-match image
/// fetches, no other request. Also: every control has an accessible name, and errors (a file
/// that is not an image, the server gone) are shown in plain words.
#[tokio::test(flavor = "multi_thread")]
async fn requests_after_a_search_do_not_depend_on_the_real_row() {
    let srv = server();
    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    let unnamed = js(
        &c,
        "return [...document.querySelectorAll('input, select, button')].filter(e => {
            const byLabel = e.id && document.querySelector(`label[for='${e.id}']`);
            return !(byLabel || e.getAttribute('aria-label') || e.closest('label') || e.textContent.trim());
         }).map(e => e.outerHTML);",
    )
    .await;
    assert_eq!(unnamed, json!([]), "controls without an accessible name");
    // Record every fetch the page makes from now on.
    js(
        &c,
        "window.__log = []; const f = window.fetch.bind(window);
         window.fetch = (u, o) => { window.__log.push({ url: String(u), method: (o && o.method) || 'GET',
             body: (o && o.body) || null }); return f(u, o); };
         performance.clearResourceTimings(); return 0;",
    )
    .await;
    let (path, _) = image_file(5003);
    load_photo(&c, &path).await;
    let url = format!("{}/api/v1/config", srv.base);
    let config: Value =
        tokio::task::spawn_blocking(move || reqwest::blocking::get(url).unwrap().json().unwrap())
            .await
            .unwrap();
    let frame_dim = config["frame_dim"].as_u64().unwrap() as usize;
    for round in 0..3 {
        js(
            &c,
            "window.__log = []; performance.clearResourceTimings(); return 0;",
        )
        .await;
        let labels = search(&c).await;
        assert_eq!(labels.len(), 8);
        let log = js(&c, "return window.__log;").await;
        let log = log.as_array().unwrap();
        assert_eq!(log.len(), 1, "round {round}: {log:?}");
        assert_eq!(log[0]["method"], "POST");
        assert!(log[0]["url"].as_str().unwrap().ends_with("/api/v1/search"));
        let body: Value = serde_json::from_str(log[0]["body"].as_str().unwrap()).unwrap();
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["k", "noise_std", "query_rows", "ranking"],
            "round {round}"
        );
        let rows = body["query_rows"].as_array().unwrap();
        assert_eq!(rows.len(), 10);
        assert!(rows
            .iter()
            .all(|r| r.as_array().unwrap().len() == frame_dim));
        // Nothing else was loaded: thumbnails come inline with the answer.
        let loaded = js(
            &c,
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname);",
        )
        .await;
        assert_eq!(loaded, json!(["/api/v1/search"]), "round {round}");
    }
    // A file that is not an image.
    let bad = std::env::temp_dir().join(format!("pm-not-an-image-{}.png", std::process::id()));
    std::fs::write(&bad, b"this is text, not a PNG").unwrap();
    upload(&c, &bad).await;
    wait_for(
        &c,
        "!document.getElementById('error').hidden",
        "the bad-image error",
    )
    .await;
    let msg = js(&c, "return document.getElementById('error').textContent;").await;
    assert!(msg.as_str().unwrap().contains("not an image"), "{msg}");
    // The server goes away.
    load_photo(&c, &path).await;
    drop(srv);
    click(&c, "search").await;
    confirm_warning(&c).await;
    wait_for(
        &c,
        "!document.getElementById('error').hidden",
        "the server-down error",
    )
    .await;
    let msg = js(&c, "return document.getElementById('error').textContent;").await;
    assert!(
        msg.as_str()
            .unwrap()
            .contains("Cannot reach the search server"),
        "{msg}"
    );
    c.close().await.unwrap();
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(bad);
}
