//! Browser benchmarks (they report timings and check nothing, so they are not tests): the
//! model's inference and search features per photo, privatization for 1,000 anchors, ranking
//! a 1,000-item pool, and Algorithm 1 for 1,000 anchors, in headless Chromium. `wasm-pack
//! test` runs the tests only; run these with
//!
//! ```text
//! wasm-pack test --release --headless --chrome --chromedriver /usr/bin/chromedriver \
//!   --mode no-install client-wasm --bench browser -- --nocapture
//! ```
//!
//! The figures are printed as `BENCH` lines.

#![cfg(target_arch = "wasm32")]

use privatemail_client_wasm::OnDeviceModel;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

#[path = "../tests/browser/common.rs"]
mod common;

wasm_bindgen_test_configure!(run_in_browser);

use common::{CLASS_WEIGHTS, FAMILIARITY, WEIGHTS};

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: sub-millisecond, unlike `Date.now()`.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

#[wasm_bindgen_test]
fn bench_inference_per_image() {
    let model = OnDeviceModel::new(WEIGHTS).unwrap();
    let images: Vec<Vec<u8>> = (0..16u32)
        .map(|k| {
            (0..784u32)
                .map(|i| ((i * 31 + k * 17) % 256) as u8)
                .collect()
        })
        .collect();
    // Warm up, then time 400 inferences (the image and its mirror image: what the class,
    // the energy and the familiarity check read)…
    for img in &images {
        model.label(img).unwrap();
    }
    let runs = 400;
    let t0 = js_sys::Date::now();
    let mut sink = 0u32;
    for r in 0..runs {
        sink += model.label(&images[r % images.len()]).unwrap();
    }
    let ms = (js_sys::Date::now() - t0) / runs as f64;
    console_log!(
        "BENCH wasm model inference: {ms:.3} ms per image over {runs} runs (checksum {sink})"
    );
    // …and 40 photos' search features (`embed::views`: the unshifted pair, then the
    // eight half-pixel views and their mirror images through the lanes), what a photo costs.
    let runs = 40;
    let t0 = js_sys::Date::now();
    let mut sink = 0.0f32;
    for r in 0..runs {
        sink += model.features(&images[r % images.len()]).unwrap()[0];
    }
    let ms = (js_sys::Date::now() - t0) / runs as f64;
    console_log!(
        "BENCH wasm search features: {ms:.3} ms per photo over {runs} runs (checksum {sink:.3})"
    );
}

/// Privatization for 1,000 public anchors (the demo's count): placing the query and nine
/// dummies in the frame, the discrete Gaussian release, and serialising the request.
#[wasm_bindgen_test]
fn bench_privatization_1000_anchors() {
    use privatemail_client_wasm::Client;
    let (config, anchors, _, _) = common::server_json(1000, 0x9e37_79b9_7f4a_7c15);
    let t0 = js_sys::Date::now();
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    let setup = js_sys::Date::now() - t0;
    client.load_pixels(&[30u8; 784]).unwrap();
    let runs = 200;
    let t0 = js_sys::Date::now();
    let mut bytes = 0;
    for _ in 0..runs {
        bytes += client
            .privatize(1.0, 1e-5, "discrete_gaussian", 8, "proportional")
            .unwrap()
            .len();
    }
    let ms = (js_sys::Date::now() - t0) / runs as f64;
    console_log!(
        "BENCH wasm privatization (1,000 anchors, 10 rows): {ms:.3} ms per search over {runs} runs; client set-up (frame + sensitivity) {setup:.1} ms; {} bytes out",
        bytes / runs
    );
}

/// Ranking a 1,000-item pool in the browser: `Client::rank_blocks` on one 1,000-item block (the
/// SHA-256 check of its 0.9 MB, decoding, the exact top 8, thumbnails, JSON), and the exact
/// ranking alone (`publish::blocks::rank`).
#[wasm_bindgen_test]
fn bench_rank_1000_item_pool() {
    use privatemail_client_wasm::Client;
    let (config, anchors, _, _) = common::server_json(60, 0x9e37_79b9_7f4a_7c15);
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    let (doc, files) = common::partition(1000, 5, true);
    client.load_partition(&doc).unwrap();
    client.load_pixels(&[30u8; 784]).unwrap();
    let whole = client.whole_plan().unwrap();
    let runs = 50;
    let mut bytes = 0;
    let mut whole_ms = 0.0;
    for _ in 0..runs {
        // A search is ranked once: each run releases (nothing, for the whole gallery) anew.
        let released = client.release_blocks(&whole).unwrap();
        let release = common::with_urls(&mut client, &released);
        let blocks = common::fetch(release["urls"].as_array().unwrap(), &files);
        let t0 = js_sys::Date::now();
        bytes += client.rank_blocks(blocks, 8).unwrap().len();
        whole_ms += js_sys::Date::now() - t0;
    }
    let whole_ms = whole_ms / runs as f64;
    let decoded = publish::blocks::decode(&files[0][0], None).unwrap();
    // The figure is of a 1,000-item pool only if the whole level's one block holds them all.
    assert_eq!(decoded.len(), 1000);
    let q = OnDeviceModel::new(WEIGHTS)
        .unwrap()
        .features(&[30u8; 784])
        .unwrap();
    let runs = 400;
    let t0 = js_sys::Date::now();
    let mut sink = 0u64;
    for _ in 0..runs {
        sink += publish::blocks::rank(&q, std::slice::from_ref(&decoded), 8).unwrap()[0].id;
    }
    let rank_ms = (js_sys::Date::now() - t0) / runs as f64;
    let runs = 50;
    let t0 = js_sys::Date::now();
    for _ in 0..runs {
        sink += publish::blocks::hash_hex(&files[0][0]).len() as u64;
    }
    let hash_ms = (js_sys::Date::now() - t0) / runs as f64;
    console_log!(
        "BENCH wasm rank_blocks, 1,000-item pool ({} KiB block): {whole_ms:.3} ms per search (hash check, decode, top 8, thumbnails, JSON; {} bytes out); of which SHA-256 {hash_ms:.3} ms; exact ranking alone {rank_ms:.3} ms (checksum {sink})",
        files[0][0].len() / 1024,
        bytes / 50
    );
}

/// The paper's Algorithm 1 in the browser for the demo's 1,000 anchors (n = 1,010 rows, d =
/// 64): the noisy SMLQ step and the post-processing iterations, per search (the anchors' kernel
/// cache is built once, on the first search, and reported apart). Timed with
/// `performance.now()` over 31 searches, so the median is steady.
#[wasm_bindgen_test]
fn bench_algorithm1_privatization_1000_anchors() {
    use privatemail_client_wasm::Client;
    let (config, anchors, _, _) = common::server_json(1000, 0x9e37_79b9_7f4a_7c15);
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    client.load_pixels(&[30u8; 784]).unwrap();
    let t0 = performance_now();
    client
        .privatize_paper(1.0, 1e-5, "discrete_gaussian", 8)
        .unwrap();
    let first = performance_now() - t0;
    let mut ms: Vec<f64> = (0..31)
        .map(|_| {
            let t = performance_now();
            client
                .privatize_paper(1.0, 1e-5, "discrete_gaussian", 8)
                .unwrap();
            performance_now() - t
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    console_log!(
        "BENCH wasm Algorithm 1 privatization (n = 1,010, d = 64): median {:.1} ms over {} runs (min {:.1}, max {:.1}); first search incl. the anchors' kernel cache {first:.1} ms",
        ms[ms.len() / 2],
        ms.len(),
        ms[0],
        ms[ms.len() - 1]
    );
}
