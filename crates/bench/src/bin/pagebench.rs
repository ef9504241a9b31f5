//! Benchmark of the page in headless Chromium (reports; asserts nothing about time): page load
//! to ready, model inference per uploaded image, and the search over `--searches` real
//! Fashion-MNIST test images, on loopback.
//!
//! `--protocol blocks` (the page's default): the whole page search at `--epsilon` within
//! `--budget` bytes — release, fetching every released block, hash check, ranking, drawing —
//! and the bytes each search moved. With `--cold` (default) Chromium's HTTP cache is disabled,
//! so every search downloads its blocks (a warm cache serves repeated blocks for free).
//! `--protocol frame` or `paper` (the paper's Algorithm 1): privatization in the browser (wasm,
//! as the page times it) and the search round trip, apart. For `paper` the first search also
//! builds the anchors' kernel cache, so it is reported alone and left out of the statistics.
//! Needs `web/pkg` (scripts/build-web.sh), chromium and chromium-driver.

use clap::Parser;
use privatemail_e2e::browser::{
    browser_with, choose, image_file, js, load_photo, open_page, search, ROOT,
};
use serde_json::Value;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 20)]
    searches: usize,
    /// `blocks` (private block retrieval, the page's default), `whole`, `frame` or `paper`.
    #[arg(long, default_value = "blocks")]
    protocol: String,
    /// Gallery size of the server (its first start embeds and partitions it).
    #[arg(long, default_value_t = 1000)]
    gallery_size: usize,
    /// ε of each search (one of the page's slider values).
    #[arg(long, default_value_t = 8.0)]
    epsilon: f64,
    /// Byte budget of a block search (one of the page's choices).
    #[arg(long, default_value_t = 524288)]
    budget: u64,
    /// Disable Chromium's HTTP cache (every search downloads its blocks).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    cold: bool,
    /// The page to serve (default: this checkout's `web/`); another build's, to compare two
    /// wasm clients on the same server and browser.
    #[arg(long)]
    web_dir: Option<String>,
    /// A running server to measure (e.g. the release server at 1,000,000 images, whose debug
    /// build would take hours to start): its page is this server's; `--gallery-size` and
    /// `--web-dir` are then only reported.
    #[arg(long)]
    base: Option<String>,
    /// Only measure the page's weight, with Chromium's HTTP cache on: the bytes of its first
    /// load over the network (Resource Timing's transferSize of the document and everything
    /// it loads before it is ready), then of a reload, each file listed.
    #[arg(long)]
    weight: bool,
}

/// Transfer sizes of the document and every resource it loaded: (total, per file).
async fn weight(c: &fantoccini::Client) -> (f64, Vec<(String, f64, f64, f64)>) {
    let v = js(
        c,
        "const n = performance.getEntriesByType('navigation')[0];
         return [n, ...performance.getEntriesByType('resource')]
           .map((e) => [new URL(e.name).pathname, e.transferSize, e.encodedBodySize, e.decodedBodySize]);",
    )
    .await;
    let files: Vec<(String, f64, f64, f64)> = serde_json::from_value(v).unwrap();
    (files.iter().map(|f| f.1).sum(), files)
}

const EPSILONS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 100.0];

fn stats(name: &str, v: &mut [f64], unit: &str) {
    if v.is_empty() {
        return;
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{name:<34} mean {mean:9.2} {unit}   median {:9.2} {unit}   max {:9.2} {unit}   (n = {})",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let slider = EPSILONS
        .iter()
        .position(|&e| e == args.epsilon)
        .expect("--epsilon must be one of the page's values");
    let web_dir = args
        .web_dir
        .clone()
        .unwrap_or_else(|| format!("{ROOT}/web"));
    let store = privatemail_e2e::temp_store("pagebench");
    let size = args.gallery_size.to_string();
    let srv = args.base.is_none().then(|| {
        privatemail_e2e::start_server(&[
            "--gallery-size",
            &size,
            "--anchors",
            "1000",
            "--store",
            store.to_str().unwrap(),
            "--web-dir",
            &web_dir,
        ])
    });
    let base = srv
        .as_ref()
        .map_or_else(|| args.base.clone().unwrap_or_default(), |s| s.base.clone());
    let flags: &[&str] = if args.cold {
        &[
            "--disable-http-cache",
            "--disk-cache-size=1",
            "--media-cache-size=1",
        ]
    } else {
        &[]
    };
    if args.weight {
        let (_driver, c) = browser_with(&[]).await;
        open_page(&c, &base).await;
        for what in ["first load", "reload"] {
            if what == "reload" {
                c.refresh().await.unwrap();
                c.wait()
                    .at_most(std::time::Duration::from_secs(60))
                    .for_element(fantoccini::Locator::Css("body[data-ready='true']"))
                    .await
                    .expect("the page never became ready after the reload");
            }
            let (total, files) = weight(&c).await;
            println!(
                "{what}: {:.1} KB over the network ({total} bytes)",
                total / 1000.0
            );
            for f in files {
                println!(
                    "  {:<44} transfer {:>9} encoded {:>9} decoded {:>9}",
                    f.0, f.1, f.2, f.3
                );
            }
        }
        return;
    }
    let (_driver, c) = browser_with(flags).await;
    let mut ready = Vec::new();
    for _ in 0..3 {
        open_page(&c, &base).await;
        ready.push(
            js(&c, "return window.pmTimings.ready_ms;")
                .await
                .as_f64()
                .unwrap(),
        );
    }
    choose(&c, "protocol", &args.protocol).await;
    choose(&c, "epsilon", &slider.to_string()).await;
    choose(&c, "budget", &args.budget.to_string()).await;
    let plan = js(&c, "return document.getElementById('plan').textContent;").await;
    let mut infer = Vec::new();
    let (mut private, mut round) = (Vec::new(), Vec::new());
    let framed = matches!(args.protocol.as_str(), "frame" | "paper");
    let pir = args.protocol == "pir";
    let (mut pir_total, mut pir_client) = (Vec::new(), Vec::new());
    // Searches whose photo-independent work the page did ahead (`pir_prepare`).
    let mut pir_prepared = 0usize;
    let mut first_private = None;
    let (mut whole, mut release, mut fetch, mut rank) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut wire, mut body, mut cached) = (Vec::new(), Vec::new(), 0usize);
    for i in 0..args.searches {
        let (path, _) = image_file(6000 + i);
        load_photo(&c, &path).await;
        js(&c, "performance.clearResourceTimings(); return 0;").await;
        search(&c).await;
        let t: Value = js(&c, "return window.pmTimings;").await;
        infer.push(t["infer_ms"].as_f64().unwrap());
        if framed {
            let ms = t["privatize_ms"].as_f64().unwrap();
            if args.protocol == "paper" && i == 0 {
                first_private = Some(ms);
            } else {
                private.push(ms);
            }
            round.push(t["roundtrip_ms"].as_f64().unwrap());
        } else if pir {
            // The first search also fetches and checks the public files (hints, table).
            if i > 0 {
                pir_total.push(t["pir_search_ms"].as_f64().unwrap());
                pir_client.push(t["pir_client_ms"].as_f64().unwrap());
                pir_prepared += usize::from(t["pir_prepared"].as_bool() == Some(true));
            }
        } else {
            whole.push(t["block_search_ms"].as_f64().unwrap());
            release.push(t["release_ms"].as_f64().unwrap());
            fetch.push(t["fetch_ms"].as_f64().unwrap());
            rank.push(t["rank_ms"].as_f64().unwrap());
            let r = js(
                &c,
                "const e = performance.getEntriesByType('resource')
                   .filter((e) => e.name.includes('/api/v1/blocks/'));
                 return [e.reduce((s, x) => s + x.transferSize, 0),
                         e.reduce((s, x) => s + x.decodedBodySize, 0),
                         e.filter((x) => x.transferSize === 0).length];",
            )
            .await;
            wire.push(r[0].as_f64().unwrap() / 1024.0);
            body.push(r[1].as_f64().unwrap() / 1024.0);
            cached += r[2].as_u64().unwrap() as usize;
        }
        let _ = std::fs::remove_file(path);
        // Keep the budget warning out of the timings.
        js(&c, "localStorage.clear(); return 0;").await;
    }
    let wasm = std::fs::read(format!("{web_dir}/pkg/privatemail_client_wasm_bg.wasm")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &wasm).unwrap();
    let gz = gz.finish().unwrap();
    println!(
        "wasm bundle: {} KiB, {} KiB gzipped (-9); server: {} gallery images, 1,000 anchors; protocol {}, ε = {}, budget {} KiB, HTTP cache {}",
        wasm.len() / 1024,
        gz.len() / 1024,
        args.gallery_size,
        args.protocol,
        args.epsilon,
        args.budget / 1024,
        if args.cold { "disabled" } else { "enabled" }
    );
    if !framed {
        println!("plan: {}", plan.as_str().unwrap_or(""));
    }
    stats("page load to ready", &mut ready, "ms");
    stats("model (decode → features)", &mut infer, "ms");
    if framed {
        if let Some(ms) = first_private {
            println!(
                "privatization, first search (also builds the anchors' kernel cache): {ms:.2} ms"
            );
        }
        stats("privatization (wasm)", &mut private, "ms");
        stats("search round trip", &mut round, "ms");
    } else if pir {
        stats(
            "PIR search after the first (click → results checked)",
            &mut pir_total,
            "ms",
        );
        stats(
            "  query generation + decoding + checks + ranking (wasm)",
            &mut pir_client,
            "ms",
        );
        println!(
            "  searches whose secrets, masks and key bodies were prepared before the photo: {} of {}",
            pir_prepared,
            pir_total.len()
        );
    } else {
        stats("whole block search (click → drawn)", &mut whole, "ms");
        stats("  release (wasm)", &mut release, "ms");
        stats("  fetch all blocks", &mut fetch, "ms");
        stats("  hash check + rank (wasm)", &mut rank, "ms");
        stats("KiB on the wire per search", &mut wire, "KiB");
        stats("KiB of block files per search", &mut body, "KiB");
        println!("block responses served from the HTTP cache: {cached}");
    }
    c.close().await.unwrap();
    // The server first (it holds the store), then its temporary directory.
    drop(srv);
    if let Some(dir) = store.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
