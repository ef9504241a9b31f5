//! Writes, or checks, the fixture the wasm parity test compares against: native features of
//! eight Fashion-MNIST test images under the committed weights. With `PM_WRITE_FIXTURE=1` it
//! (re)writes the file; otherwise it fails if the file does not match the current weights, so
//! the fixture cannot go stale silently.

use privatemail_server::data::{load_split, DEFAULT_DIR};
use privatemail_server::MODEL_WEIGHTS;
use shared::model::Model;

#[test]
fn wasm_parity_fixture_matches_the_committed_weights() {
    let model = Model::from_bytes(MODEL_WEIGHTS).unwrap();
    let test = load_split(std::path::Path::new(DEFAULT_DIR), "t10k").unwrap();
    let cases: Vec<serde_json::Value> = (0..8)
        .map(|k| {
            let i = k * 1237;
            let px = test.images.image(i);
            let inf = model.infer(px).unwrap();
            serde_json::json!({ "index": i, "pixels": px, "features": inf.features, "label": inf.label })
        })
        .collect();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../client-wasm/tests/fixtures/parity.json"
    );
    let text = serde_json::to_string(&cases).unwrap();
    if std::env::var("PM_WRITE_FIXTURE").is_ok() {
        std::fs::write(path, &text).unwrap();
    }
    let stored: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(stored.len(), 8);
    for (a, b) in stored.iter().zip(&cases) {
        assert_eq!(a["pixels"], b["pixels"]);
        assert_eq!(a["label"], b["label"]);
        let fa: Vec<f32> = serde_json::from_value(a["features"].clone()).unwrap();
        let fb: Vec<f32> = serde_json::from_value(b["features"].clone()).unwrap();
        assert!(
            fa.iter().zip(&fb).all(|(x, y)| x == y),
            "fixture is stale: rerun with PM_WRITE_FIXTURE=1"
        );
    }
}
