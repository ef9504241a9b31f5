//! The paper's Algorithm 1 in the browser: the wasm release equals the native one for the same
//! inputs and seed (fixture written by `crates/paper/tests/algorithm1_fixture.rs`), the explicit
//! SIMD128 kernels equal the scalar code, the `Client`'s release has the request's shape and
//! the calibrated noise, and bad input is an error.

use dp::mechanism::calibrate;
use paper::privatemail::{privatize, Anchors};
use privatemail_client_wasm::Client;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use shared::{DMatrix, Mechanism, Params, PrivacyParams};
use wasm_bindgen_test::*;

use crate::common::{self, CLASS_WEIGHTS, FAMILIARITY, WEIGHTS};
const FIXTURE: &str = include_str!("../fixtures/algorithm1.json");

fn rows(v: &Value) -> Vec<Vec<f64>> {
    serde_json::from_value(v.clone()).unwrap()
}

#[wasm_bindgen_test]
fn wasm_release_equals_the_native_one_for_the_same_seed() {
    let f: Value = serde_json::from_str(FIXTURE).unwrap();
    let inp = &f["inputs"];
    let anchors = rows(&inp["anchors"]);
    let labels: Vec<u32> = serde_json::from_value(inp["labels"].clone()).unwrap();
    let query: Vec<f64> = serde_json::from_value(inp["query"].clone()).unwrap();
    let label: u32 = serde_json::from_value(inp["label"].clone()).unwrap();
    let params: Params = serde_json::from_value(inp["params"].clone()).unwrap();
    let seed: u64 = serde_json::from_value(inp["seed"].clone()).unwrap();
    let feats = DMatrix::from_fn(anchors.len(), anchors[0].len(), |i, j| anchors[i][j]);
    let a = Anchors::new(&feats, &labels, &params.smlq).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let r = privatize(&query, label, &a, &params, &mut rng).unwrap();
    let req = paper::privatemail::search_request(&r, 8);
    let native = &f["release"];
    assert_eq!(
        r.real_position() as u64,
        native["real_position"].as_u64().unwrap()
    );
    let scale = native["noise_scale"].as_f64().unwrap();
    assert!((r.receipt.noise_scale - scale).abs() <= 1e-9 * scale);
    for (got, want) in [
        (req.query_rows, rows(&native["query_rows"])),
        (req.anchor_rows.unwrap(), rows(&native["anchor_rows"])),
    ] {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            assert!((g - w).abs() <= 1e-5, "wasm {g} vs native {w}");
        }
    }
}

#[wasm_bindgen_test]
fn client_release_has_the_request_shape_and_the_calibrated_noise() {
    let (config, anchors, _, _) = common::server_json(60, 0x2545_f491_4f6c_dd1d);
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    assert!(
        client
            .privatize_paper(1.0, 1e-5, "discrete_gaussian", 8)
            .is_err(),
        "no photo yet"
    );
    client.load_pixels(&[30u8; 784]).unwrap();
    let privatized = client
        .privatize_paper(1.0, 1e-5, "discrete_gaussian", 8)
        .unwrap();
    let out = common::with_request(&mut client, &privatized);
    let req: Value = serde_json::from_str(out["request"].as_str().unwrap()).unwrap();
    assert_eq!(
        req["query_rows"].as_array().unwrap().len(),
        10,
        "the query and 9 decoys"
    );
    assert_eq!(req["anchor_rows"].as_array().unwrap().len(), 60);
    assert_eq!(req["k"], 8);
    assert!(req.get("noise_std").is_none());
    let receipt = &out["receipt"];
    assert_eq!(receipt["mechanism"], "discrete_gaussian");
    let privacy = PrivacyParams {
        epsilon: 1.0,
        delta: 1e-5,
        mechanism: Mechanism::DiscreteGaussian,
    };
    let sigma = calibrate(&privacy, out["sensitivity"].as_f64().unwrap()).unwrap();
    let ratio = receipt["noise_scale"].as_f64().unwrap() / sigma;
    assert!(
        (1.0..1.001).contains(&ratio),
        "noise scale / calibrated σ = {ratio}"
    );
    // The answer for the real row is picked; the server's answer for every row is accepted.
    let n = 10;
    let results: Vec<Value> = (0..n)
        .map(|i| json!([{ "id": i, "label": 0, "distance": 0.0, "thumbnail_png_base64": "" }]))
        .collect();
    let answer = json!({ "results": results, "rows_in_frame": vec![vec![0.0, 0.0]; n] });
    let picked: Value = serde_json::from_str(&client.pick(&answer.to_string()).unwrap()).unwrap();
    assert_eq!(picked["matches"].as_array().unwrap().len(), 1);
}

#[wasm_bindgen_test]
fn bad_arguments_are_errors_not_panics() {
    let (config, anchors, _, _) = common::server_json(60, 7);
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    client.load_pixels(&[30u8; 784]).unwrap();
    for (eps, delta, mech, k) in [
        (0.0, 1e-5, "discrete_gaussian", 8),
        (f64::NAN, 1e-5, "discrete_gaussian", 8),
        (1e9, 1e-5, "discrete_gaussian", 8),
        (1.0, 0.0, "discrete_gaussian", 8),
        (1.0, 1e-5, "laplace", 8),
        (1.0, 1e-5, "discrete_gaussian", 0),
        (1.0, 1e-5, "discrete_gaussian", 1000),
        (2.0, 1e-5, "classic_gaussian", 8),
    ] {
        assert!(
            client.privatize_paper(eps, delta, mech, k).is_err(),
            "{eps} {delta} {mech} {k}"
        );
    }
}

/// The kernels' explicit SIMD (SIMD128 here, scalars natively; `embed::lanes`) equals
/// the scalar code bit for bit: the f64 weights of the private kernel and the f32 weights of
/// the post-processing kernel, remainders included; both products equal the dense product.
#[wasm_bindgen_test]
fn simd_kernels_equal_the_scalar_code() {
    use paper::laplacian::{
        exp_neg, exp_neg_f32, min_unit_weight, weights_in_place, DenseKernel, DenseKernel32,
        GraphOperator,
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let d2: Vec<f64> = (0..1003).map(|_| 5.0 * next()).collect();
    let (s, lo) = (0.7, min_unit_weight(0.7));
    let mut got = d2.clone();
    weights_in_place(&mut got, s, lo);
    for (g, &d) in got.iter().zip(&d2) {
        let e = exp_neg(d * (-1.0 / s));
        let want = (if e < 1e-150 { 0.0 } else { e }).clamp(lo, 1.0);
        assert_eq!(g.to_bits(), want.to_bits(), "f64 weight of d² = {d}");
    }
    let n = 37;
    let z = DMatrix::from_fn(n, 2, |_, _| 4.0 * next() - 2.0);
    let s = 0.9;
    let k32 = DenseKernel32::from_points(&z, s);
    let inv = (-1.0 / s) as f32;
    for j in 0..n {
        for i in j + 1..n {
            let mut d2 = 0.0f32;
            for c in 0..2 {
                let d = z[(i, c)] as f32 - z[(j, c)] as f32;
                d2 += d * d;
            }
            let e = exp_neg_f32(d2 * inv);
            let w = if e < 1e-30 { 0.0 } else { e };
            let want = if 1.0 < w { 1.0 } else { w };
            assert_eq!(
                (k32.weight(i, j) as f32).to_bits(),
                want.to_bits(),
                "w({i}, {j})"
            );
        }
    }
    let q = DMatrix::from_fn(n, 2, |_, _| next() - 0.5);
    let want = k32.to_dense() * &q;
    assert!((k32.weighted_sum(&q) - &want).amax() <= 1e-5 * want.amax());
    let k64 = DenseKernel::from_points(&z, s);
    let want = k64.to_dense() * &q;
    assert!((k64.weighted_sum(&q) - &want).amax() <= 1e-12 * want.amax());
}
