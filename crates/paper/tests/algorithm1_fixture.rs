//! Writes, or checks, the fixture the wasm test `client-wasm/tests/browser/algorithm1.rs` compares against:
//! Algorithm 1's release computed natively for fixed inputs and a fixed seed. With
//! `PM_WRITE_FIXTURE=1` it (re)writes the file; otherwise it fails if the file no longer matches
//! what the native code computes, so the fixture cannot go stale silently.

#![cfg(not(target_arch = "wasm32"))]

use paper::privatemail::{privatize, Anchors};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use shared::{DMatrix, Params};

const PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../client-wasm/tests/fixtures/algorithm1.json"
);

/// Deterministic inputs: 100 anchors (labels i % 10) and one query of label 3, 64-d.
fn inputs() -> (Vec<Vec<f64>>, Vec<u32>, Vec<f64>, u32) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let anchors: Vec<Vec<f64>> = (0..100)
        .map(|_| (0..64).map(|_| next()).collect())
        .collect();
    let labels = (0..100u32).map(|i| i % 10).collect();
    let query = (0..64).map(|_| next()).collect();
    (anchors, labels, query, 3)
}

/// The release for the fixture's inputs, parameters and seed.
fn release(fixture_inputs: &Value) -> Value {
    let anchors: Vec<Vec<f64>> = serde_json::from_value(fixture_inputs["anchors"].clone()).unwrap();
    let labels: Vec<u32> = serde_json::from_value(fixture_inputs["labels"].clone()).unwrap();
    let query: Vec<f64> = serde_json::from_value(fixture_inputs["query"].clone()).unwrap();
    let label: u32 = serde_json::from_value(fixture_inputs["label"].clone()).unwrap();
    let params: Params = serde_json::from_value(fixture_inputs["params"].clone()).unwrap();
    let seed: u64 = serde_json::from_value(fixture_inputs["seed"].clone()).unwrap();
    let feats = DMatrix::from_fn(anchors.len(), 64, |i, j| anchors[i][j]);
    let a = Anchors::new(&feats, &labels, &params.smlq).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let r = privatize(&query, label, &a, &params, &mut rng).unwrap();
    let req = paper::privatemail::search_request(&r, 8);
    json!({
        "query_rows": req.query_rows,
        "anchor_rows": req.anchor_rows,
        "real_position": r.real_position(),
        "noise_scale": r.receipt.noise_scale,
        "sensitivity": r.sensitivity.value,
    })
}

#[test]
fn algorithm1_wasm_fixture_matches_the_native_release() {
    let (anchors, labels, query, label) = inputs();
    let mut params = Params::default();
    params.privacy.epsilon = 1.0;
    let fixture_inputs = json!({
        "anchors": anchors, "labels": labels, "query": query, "label": label,
        "params": params, "seed": 7u64,
    });
    let fresh = json!({ "inputs": fixture_inputs, "release": release(&fixture_inputs) });
    if std::env::var("PM_WRITE_FIXTURE").is_ok() {
        std::fs::write(PATH, serde_json::to_string(&fresh).unwrap()).unwrap();
    }
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
    // JSON float parsing may differ from the printed value in the last bit; compare numbers.
    let worst = max_rel_diff(&stored, &fresh);
    assert!(
        worst <= 1e-12,
        "{PATH} is stale (relative difference {worst:e}): rerun with PM_WRITE_FIXTURE=1"
    );
}

/// The largest relative difference between corresponding numbers of two JSON values of the
/// same shape (infinite if the shapes differ).
fn max_rel_diff(a: &Value, b: &Value) -> f64 {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() / x.abs().max(y.abs()).max(1e-300)
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .map(|(p, q)| max_rel_diff(p, q))
            .fold(0.0, f64::max),
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() => x
            .iter()
            .map(|(k, v)| y.get(k).map_or(f64::INFINITY, |w| max_rel_diff(v, w)))
            .fold(0.0, f64::max),
        _ if a == b => 0.0,
        _ => f64::INFINITY,
    }
}
