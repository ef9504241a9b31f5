//! Benchmark (reports, asserts nothing about time): model inference per image in the browser.
//! Its figure is printed in the wasm-pack test output.

#![cfg(target_arch = "wasm32")]

use privatemail_client_wasm::OnDeviceModel;
use wasm_bindgen_test::*;

mod common;

wasm_bindgen_test_configure!(run_in_browser);

const WEIGHTS: &[u8] = include_bytes!("../../server/assets/model.bin");

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
    // Warm up, then time 400 inferences.
    for img in &images {
        model.features(img).unwrap();
    }
    let runs = 400;
    let t0 = js_sys::Date::now();
    let mut sink = 0.0f32;
    for r in 0..runs {
        sink += model.features(&images[r % images.len()]).unwrap()[0];
    }
    let ms = (js_sys::Date::now() - t0) / runs as f64;
    console_log!(
        "BENCH wasm model inference: {ms:.3} ms per image over {runs} runs (checksum {sink:.3})"
    );
}

/// Privatization for 1,000 public anchors (the demo's count): placing the query and nine
/// dummies in the frame, the discrete Gaussian release, and serialising the request.
#[wasm_bindgen_test]
fn bench_privatization_1000_anchors() {
    use privatemail_client_wasm::Client;
    let (config, anchors, _, _) = common::server_json(1000, 0x9e37_79b9_7f4a_7c15);
    let t0 = js_sys::Date::now();
    let mut client = Client::new(WEIGHTS, &config, &anchors).unwrap();
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
