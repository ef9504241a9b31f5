//! Benchmark (reports, asserts nothing about time): model inference per image in the browser.
//! Its figure is printed in the wasm-pack test output.

#![cfg(target_arch = "wasm32")]

use privatemail_client_wasm::OnDeviceModel;
use wasm_bindgen_test::*;

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
