//! Blocks on object storage: the server writes its partition to a real S3-compatible server
//! (`s3s-fs`, installed by `scripts/setup.sh`) through `object_store`, the document says
//! clients fetch blocks from the bucket (through a CDN stand-in that adds CORS), and a page
//! search downloads its blocks from there — none from the gallery server.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use privatemail_e2e::browser::{
    browser, choose, click, free_port, image_file, js, load_photo, open_page, partition, wait_for,
    ROOT,
};
use privatemail_e2e::{start_server_env, temp_store};
use serde_json::json;

/// A child process killed and reaped on drop.
pub(crate) struct Killed(pub(crate) Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `s3s-fs` on a free port over `root` (no credentials: anonymous reads, unsigned writes).
pub(crate) fn s3s_fs(root: &std::path::Path) -> (Killed, String) {
    let port = free_port();
    let child = Command::new("s3s-fs")
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("s3s-fs (cargo install s3s-fs --features binary; scripts/setup.sh does)");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "s3s-fs did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), format!("http://127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_search_downloads_its_blocks_from_the_bucket() {
    let store = temp_store("s3");
    let root = store.parent().unwrap().join("s3-root");
    std::fs::create_dir_all(root.join("pm-bucket")).unwrap();
    let (_s3, endpoint) = s3s_fs(&root);
    let cdn = privatemail_e2e::cdn::start(&endpoint).await;
    let public = format!("{}/pm-bucket/gallery", cdn.base);
    let web = format!("{ROOT}/web");
    let srv = {
        let (store, public, endpoint, web) = (store.clone(), public.clone(), endpoint.clone(), web);
        tokio::task::spawn_blocking(move || {
            start_server_env(
                &[
                    "--gallery-size",
                    "1000",
                    "--anchors",
                    "1000",
                    "--store",
                    store.to_str().unwrap(),
                    "--web-dir",
                    &web,
                    "--blocks-store",
                    "s3://pm-bucket/gallery",
                    "--blocks-public-url",
                    &public,
                ],
                &[
                    ("AWS_ENDPOINT", endpoint.as_str()),
                    ("AWS_ALLOW_HTTP", "true"),
                    ("AWS_SKIP_SIGNATURE", "true"),
                    ("AWS_REGION", "us-east-1"),
                ],
            )
        })
        .await
        .unwrap()
    };
    // The document points clients at the bucket, counting the bytes it sends (uncompressed).
    let doc = partition(&srv.base).await;
    assert_eq!(doc.blocks_url, format!("{public}/{}", doc.version));
    for l in &doc.levels {
        assert_eq!(l.transfer_bytes, l.bytes);
    }
    // Written there: every block and the document, and the announcement.
    let dir = root.join("pm-bucket/gallery");
    assert!(dir.join("CURRENT.json").is_file());
    assert!(dir.join(&doc.version).join("partition.json").is_file());
    for (li, l) in doc.levels.iter().enumerate() {
        for b in 0..l.blocks {
            let f = dir
                .join(&doc.version)
                .join(li.to_string())
                .join(b.to_string());
            assert_eq!(
                std::fs::metadata(&f).unwrap().len(),
                l.bytes[b as usize],
                "{f:?}"
            );
        }
    }

    let (_driver, c) = browser().await;
    open_page(&c, &srv.base).await;
    // Blocks come from the bucket: search with DP blocks (PIR, the default, asks the server).
    choose(&c, "protocol", "blocks").await;
    let (path, _) = image_file(5003);
    load_photo(&c, &path).await;
    let before = cdn.hits.load(std::sync::atomic::Ordering::SeqCst);
    js(&c, "performance.clearResourceTimings(); return 0;").await;
    click(&c, "search").await;
    wait_for(
        &c,
        "document.querySelectorAll('#results li').length > 0 || !document.getElementById('warning').hidden",
        "matches or the budget warning",
    )
    .await;
    privatemail_e2e::browser::confirm_warning(&c).await;
    wait_for(
        &c,
        "document.querySelectorAll('#results li').length === 8",
        "8 matches",
    )
    .await;
    let resources = js(
        &c,
        "return performance.getEntriesByType('resource').map((e) => e.name);",
    )
    .await;
    let resources: Vec<String> = serde_json::from_value(resources).unwrap();
    let blocks: Vec<&String> = resources
        .iter()
        .filter(|u| u.contains("/pm-bucket/"))
        .collect();
    assert!(
        !blocks.is_empty(),
        "no block came from the bucket: {resources:?}"
    );
    assert!(
        blocks.iter().all(|u| u.starts_with(&doc.blocks_url)),
        "{blocks:?}"
    );
    assert!(
        resources.iter().all(|u| !u.contains("/api/v1/blocks")),
        "a block came from the gallery server: {resources:?}"
    );
    let forwarded = cdn.hits.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert_eq!(
        forwarded,
        blocks.len(),
        "each block fetched once, from the bucket"
    );
    let canvases = js(
        &c,
        "return document.querySelectorAll('#results li canvas').length;",
    )
    .await;
    assert_eq!(
        canvases,
        json!(8),
        "thumbnails drawn from the bucket's blocks"
    );
    c.close().await.unwrap();
    let _ = std::fs::remove_file(path);
    drop(srv);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}
