//! Test support shared by the wasm tests and benchmarks: a synthetic server configuration.

#![cfg(target_arch = "wasm32")]

use serde_json::json;
use shared::DMatrix;

/// `n` anchors with deterministic pseudo-random features (xorshift from `seed`) and the class
/// simplex frame rows, as the server publishes them: the config and anchors JSON, and the
/// same features and frame rows as matrices.
pub fn server_json(n: usize, seed: u64) -> (String, String, DMatrix<f64>, DMatrix<f64>) {
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let features: Vec<Vec<f32>> = (0..n)
        .map(|_| (0..64).map(|_| next() as f32).collect())
        .collect();
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 10).collect();
    let frame_rows: Vec<Vec<f64>> = labels
        .iter()
        .map(|&l| (0..10).map(|j| f64::from(j == l)).collect())
        .collect();
    let config = json!({
        "smlq": shared::SmlqParams::default(),
        "privacy_defaults": shared::PrivacyParams::default(),
        "class_names": ["T-shirt/top","Trouser","Pullover","Dress","Coat","Sandal","Shirt","Sneaker","Bag","Ankle boot"],
        "feature_dim": 64, "frame_dim": 10, "frame_kernel_scale": 0.02, "anchor_count": n,
        "model_version": "test", "limits": { "max_k": 50, "max_query_rows": 32, "max_body_bytes": 1048576 }
    });
    let anchors = json!({
        "ids": (0..n as u64).collect::<Vec<_>>(), "labels": labels,
        "features": features, "frame_rows": frame_rows,
    });
    let f = DMatrix::from_fn(n, 64, |i, j| features[i][j] as f64);
    let r = DMatrix::from_fn(n, 10, |i, j| frame_rows[i][j]);
    (config.to_string(), anchors.to_string(), f, r)
}
