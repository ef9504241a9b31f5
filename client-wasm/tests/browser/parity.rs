//! Native and wasm inference agree: search features (`embed::views`) computed natively
//! for eight Fashion-MNIST test
//! images (the fixture, checked against the current weights by `crates/data/tests/models/wasm_parity_fixture.rs`) are
//! reproduced to 1e-5 in the browser. Run with
//! `wasm-pack test --headless --chrome --chromedriver /usr/bin/chromedriver --mode no-install client-wasm`.

use privatemail_client_wasm::OnDeviceModel;
use wasm_bindgen_test::*;

use crate::common::WEIGHTS;
const FIXTURE: &str = include_str!("../fixtures/parity.json");

#[wasm_bindgen_test]
fn wasm_features_match_native_to_1e5() {
    let model = OnDeviceModel::new(WEIGHTS).unwrap();
    let cases: Vec<serde_json::Value> = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(cases.len(), 8);
    for case in cases {
        let pixels: Vec<u8> = serde_json::from_value(case["pixels"].clone()).unwrap();
        let native: Vec<f32> = serde_json::from_value(case["features"].clone()).unwrap();
        let label: u32 = serde_json::from_value(case["label"].clone()).unwrap();
        let wasm = model.features(&pixels).unwrap();
        assert_eq!(wasm.len(), native.len());
        for (a, b) in wasm.iter().zip(&native) {
            assert!((a - b).abs() <= 1e-5, "wasm {a} vs native {b}");
        }
        assert_eq!(model.label(&pixels).unwrap(), label);
    }
}

#[wasm_bindgen_test]
fn bad_inputs_are_errors_not_panics() {
    assert!(OnDeviceModel::new(b"not a model").is_err());
    let model = OnDeviceModel::new(WEIGHTS).unwrap();
    assert!(model.features(&[0u8; 10]).is_err());
}
