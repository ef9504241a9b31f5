//! Benchmark of the page in headless Chromium (reports; asserts nothing about time): page load
//! to ready, model inference per uploaded image, privatization for the server's anchors, and
//! the whole search round trip on loopback, over `--searches` real Fashion-MNIST test images.
//! Needs `web/pkg` (scripts/build-web.sh), chromium and chromium-driver.

use clap::Parser;
use privatemail_e2e::browser::{browser, image_file, js, load_photo, open_page, search, server};
use serde_json::Value;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 20)]
    searches: usize,
}

fn stats(name: &str, v: &mut [f64]) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{name:<28} mean {mean:7.2} ms   median {:7.2} ms   max {:7.2} ms   (n = {})",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let srv = server();
    let (_driver, c) = browser().await;
    let mut ready = Vec::new();
    for _ in 0..3 {
        open_page(&c, &srv.base).await;
        ready.push(
            js(&c, "return window.pmTimings.ready_ms;")
                .await
                .as_f64()
                .unwrap(),
        );
    }
    let (mut infer, mut private, mut round) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.searches {
        let (path, _) = image_file(6000 + i);
        load_photo(&c, &path).await;
        search(&c).await;
        let t: Value = js(&c, "return window.pmTimings;").await;
        infer.push(t["infer_ms"].as_f64().unwrap());
        private.push(t["privatize_ms"].as_f64().unwrap());
        round.push(t["roundtrip_ms"].as_f64().unwrap());
        let _ = std::fs::remove_file(path);
        // Keep the budget warning out of the timings.
        js(&c, "localStorage.clear(); return 0;").await;
    }
    let wasm = std::fs::read(format!(
        "{}/web/pkg/privatemail_client_wasm_bg.wasm",
        privatemail_e2e::browser::ROOT
    ))
    .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &wasm).unwrap();
    let gz = gz.finish().unwrap();
    println!(
        "wasm bundle: {} KiB, {} KiB gzipped (-9); server: 1,000 gallery images, 1,000 anchors",
        wasm.len() / 1024,
        gz.len() / 1024
    );
    stats("page load to ready", &mut ready);
    stats("model (decode → features)", &mut infer);
    stats("privatization", &mut private);
    stats("search round trip", &mut round);
    c.close().await.unwrap();
}
