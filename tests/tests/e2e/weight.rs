//! Page weight on the wire, against the real server: what is compressed (gzip or brotli, as
//! asked) and what is not (answers already in gzip are never compressed twice; binary PIR
//! files keep their published size), and the ETags with which a browser revalidates the page's
//! files and public documents (304 without a body).

use privatemail_e2e::{gunzip, small_server};
use reqwest::blocking::Client;
use reqwest::StatusCode;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn get(http: &Client, url: &str, headers: &[(&str, &str)]) -> reqwest::blocking::Response {
    let mut r = http.get(url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().unwrap()
}

#[test]
fn public_documents_and_page_files_are_compressed_and_revalidated() {
    let web = format!("{ROOT}/web");
    let srv = small_server("weight", &["--web-dir", &web]);
    let http = Client::new();
    for path in [
        "/",
        "/app.js",
        "/style.css",
        "/api/v1/config",
        "/api/v1/anchors",
        "/api/v1/gallery-map",
    ] {
        let url = format!("{}{path}", srv.base);
        let plain = get(&http, &url, &[("accept-encoding", "identity")]);
        assert_eq!(plain.status(), StatusCode::OK, "{path}");
        assert!(plain.headers().get("content-encoding").is_none(), "{path}");
        assert_eq!(plain.headers()["cache-control"], "no-cache", "{path}");
        let etag = plain.headers()["etag"].to_str().unwrap().to_string();
        assert!(
            etag.starts_with('"') && etag.len() == 34,
            "{path}: a strong ETag of 16 bytes, {etag}"
        );
        let body = plain.bytes().unwrap();
        // gzip when asked: the same bytes, fewer on the wire.
        let gz = get(&http, &url, &[("accept-encoding", "gzip")]);
        assert_eq!(gz.headers()["content-encoding"], "gzip", "{path}");
        let gz = gz.bytes().unwrap();
        assert!(gz.len() < body.len(), "{path}");
        assert_eq!(gunzip(&gz), body.as_ref(), "{path}");
        // brotli when preferred.
        let br = get(&http, &url, &[("accept-encoding", "br")]);
        assert_eq!(br.headers()["content-encoding"], "br", "{path}");
        assert!(br.bytes().unwrap().len() < body.len(), "{path}");
        // Revalidation: 304 without a body while unchanged, whatever the encoding asked.
        for ae in ["identity", "gzip, br"] {
            let r = get(
                &http,
                &url,
                &[("if-none-match", etag.as_str()), ("accept-encoding", ae)],
            );
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{path} {ae}");
            assert_eq!(r.headers()["etag"], etag.as_str(), "{path}");
            assert!(r.bytes().unwrap().is_empty(), "{path}");
        }
        // Another ETag: the whole body again.
        let r = get(&http, &url, &[("if-none-match", "\"0\"")]);
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    // A rebuilt page file gets a new ETag at once (its bytes are hashed, not its date).
    let favicon = format!("{}/favicon.svg", srv.base);
    let r = get(&http, &favicon, &[]);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");

    // Block files are stored in gzip: sent as they are (never compressed again), and not
    // compressed at all for a client that takes only brotli (binary).
    let doc: shared::api::PartitionDoc = get(&http, &format!("{}/api/v1/partition", srv.base), &[])
        .json()
        .unwrap();
    let level = doc.levels.iter().position(|l| !l.whole).unwrap();
    let url = format!("{}{}/{level}/0", srv.base, doc.blocks_url);
    let gz = get(&http, &url, &[("accept-encoding", "gzip, br")]);
    assert_eq!(gz.status(), StatusCode::OK);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    let gz = gz.bytes().unwrap();
    let block = gunzip(&gz);
    publish::blocks::decode(&block, Some(&doc.levels[level].hashes[0])).unwrap();
    let br = get(&http, &url, &[("accept-encoding", "br")]);
    assert!(br.headers().get("content-encoding").is_none());
    assert_eq!(br.bytes().unwrap().as_ref(), block.as_slice());

    // A PIR hint (binary, uniformly random-looking): its published size on the wire.
    // (The PIR databases may still be building just after the start.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let pir: publish::pir::doc::PirDoc = loop {
        let r = get(&http, &format!("{}/api/v1/pir", srv.base), &[]);
        if r.status() == StatusCode::OK {
            break r.json().unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "no PIR document");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let hint = format!("{}{}/thumbs/hint", srv.base, pir.answer_url);
    let r = get(&http, &hint, &[("accept-encoding", "gzip, br")]);
    assert_eq!(r.status(), StatusCode::OK, "{hint}");
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(
        r.bytes().unwrap().len(),
        pir.thumbs.shape.hint_bytes(),
        "the hint's published size"
    );
}
