//! Test support shared by the wasm tests and benchmarks: a synthetic server configuration.

// The tests and the bench each use part of this module.
#![allow(dead_code)]

use serde_json::json;
use shared::DMatrix;

/// The query model the server serves the page (and whose version its configuration names).
pub const WEIGHTS: &[u8] = include_bytes!("../../../server/assets/query.bin");
pub const CLASS_WEIGHTS: &[u8] = include_bytes!("../../../server/assets/classifier.bin");
/// The familiarity model's file, as the page fetches it with its first photo.
pub const FAMILIARITY: &[u8] = include_bytes!("../../../crates/embed/assets/familiarity.bin");

/// A `JsError`'s message, as the page shows it.
/// `config` naming `anchors` by their SHA-256, as a server sending altered anchors
/// consistently would (the client refuses anchors the configuration does not name).
#[allow(dead_code)] // Not every test binary alters the anchors.
pub fn naming(config: &str, anchors: &str) -> String {
    let mut c: serde_json::Value = serde_json::from_str(config).unwrap();
    c["anchors_sha256"] = publish::blocks::hash_hex(anchors.as_bytes()).into();
    c.to_string()
}

pub fn message(e: wasm_bindgen::JsError) -> String {
    use wasm_bindgen::JsCast;
    let v: wasm_bindgen::JsValue = e.into();
    v.dyn_into::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_default()
}

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
    // The out-of-distribution reference, fitted as the server fits it (layer means made up).
    let layer_dim = embed::model::Model::from_bytes(WEIGHTS)
        .unwrap()
        .w
        .arch
        .layer_dim();
    let layer_means: Vec<f32> = (0..n * layer_dim).map(|_| next() as f32).collect();
    let familiarity =
        embed::ood::fit(&features.concat(), &layer_means, &labels, 64, layer_dim).unwrap();
    let anchors = json!({
        "ids": (0..n as u64).collect::<Vec<_>>(), "labels": labels,
        "features": features, "frame_rows": frame_rows, "familiarity": familiarity,
    })
    .to_string();
    let config = json!({
        "smlq": shared::SmlqParams::default(),
        "privacy_defaults": shared::PrivacyParams::default(),
        "class_names": ["T-shirt/top","Trouser","Pullover","Dress","Coat","Sandal","Shirt","Sneaker","Bag","Ankle boot"],
        "feature_dim": 64, "frame_dim": 10, "frame_kernel_scale": 0.02, "anchor_count": n,
        "anchors_sha256": publish::blocks::hash_hex(anchors.as_bytes()),
        "model_version": "gallery", "query_model_version": embed::model::weights_version(WEIGHTS), "limits": { "max_k": 50, "max_query_rows": 32, "max_body_bytes": 1048576 }
    });
    let f = DMatrix::from_fn(n, 64, |i, j| features[i][j] as f64);
    let r = DMatrix::from_fn(n, 10, |i, j| frame_rows[i][j]);
    (config.to_string(), anchors, f, r)
}

/// A published partition of a synthetic gallery of `n` items (64-d unit features, 28×28
/// thumbnails) as the server would publish it: the document JSON (`blocks_url` = "/b/v") and
/// every level's uncompressed block files, `files[level][block]`. `allow_full` sets
/// `allow_full_download`.
/// A partition of `n` random unit features: the document (JSON) and `files[level]`, the
/// level's block files followed by its centroids file.
pub fn partition(n: usize, seed: u64, allow_full: bool) -> (String, Vec<Vec<Vec<u8>>>) {
    use publish::partition::{build_level, gallery_neighbours, nearest_k};
    use publish::publish::{
        default_specs, document, publish_level, publish_whole, GalleryView, Thumbnails, COVERAGE_K,
    };
    let (dim, t) = (64usize, 28usize);
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    let mut features: Vec<f32> = (0..n * dim).map(|_| next()).collect();
    for r in features.chunks_mut(dim) {
        let norm = r.iter().map(|v| v * v).sum::<f32>().sqrt();
        r.iter_mut().for_each(|v| *v /= norm);
    }
    let ids: Vec<u64> = (0..n as u64).map(|i| 10_000 + i).collect();
    let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let thumbs: Vec<u8> = (0..n * t * t).map(|i| (i % 251) as u8).collect();
    let g = GalleryView {
        ids: &ids,
        labels: &labels,
        features: &features,
        dim,
        thumbnails: Thumbnails::Packed(&thumbs),
        thumb_side: t,
    };
    let probes = &features[..50 * dim];
    let truth: Vec<Vec<u32>> = probes
        .chunks(dim)
        .map(|p| nearest_k(&features, dim, p, COVERAGE_K))
        .collect();
    let specs = default_specs(n);
    let m = specs
        .iter()
        .filter_map(|s| match s.overlap {
            publish::partition::Overlap::Closure(m) => Some(m as usize),
            _ => None,
        })
        .max()
        .unwrap_or(16);
    let nb = gallery_neighbours(&features, dim, m, 0..n, None).unwrap();
    let whole = publish_whole(&g).unwrap();
    let mut docs = vec![whole.doc];
    let mut files = vec![[whole.files, vec![whole.centroids]].concat()];
    for spec in specs {
        let level = build_level(&features, dim, spec, 1, Some(&nb)).unwrap();
        let published = publish_level(&g, &level, probes, &truth).unwrap();
        docs.push(published.doc);
        files.push([published.files, vec![published.centroids]].concat());
    }
    let doc = document(docs, &g, "/b/v".into(), 0.6, allow_full, 50);
    (serde_json::to_string(&doc).unwrap(), files)
}

/// The block files behind `urls` ("/b/v/{level}/{block}"), in order, as JS `Uint8Array`s.
pub fn fetch(urls: &[serde_json::Value], files: &[Vec<Vec<u8>>]) -> Vec<js_sys::Uint8Array> {
    urls.iter()
        .map(|u| {
            let (level, block) = level_block(u.as_str().unwrap());
            js_sys::Uint8Array::from(&files[level][block as usize][..])
        })
        .collect()
}

/// (level, block) of a block URL.
pub fn level_block(url: &str) -> (usize, u32) {
    let mut parts = url.rsplit('/');
    let block = parts.next().unwrap().parse().unwrap();
    let level = parts.next().unwrap().parse().unwrap();
    (level, block)
}

/// Chi-square critical values at α = 0.001, indexed by the degrees of freedom (0..=20; L
/// positions have L − 1).
pub const CHI2_999: [f64; 21] = [
    0.0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588, 31.264,
    32.909, 34.528, 36.123, 37.697, 39.252, 40.790, 42.312, 43.820, 45.315,
];

/// The page's ledger for tests that do not count receipts: stores nothing, refuses nothing.
pub fn ledger() -> js_sys::Function {
    js_sys::Function::new_with_args("r", "")
}

/// A ledger that cannot store (a full `localStorage`): it throws.
pub fn full_ledger() -> js_sys::Function {
    js_sys::Function::new_with_args("r", "throw new Error('the store is full')")
}

/// What `privatize` (or `privatize_paper`) returned with the request body the driver then
/// hands out (`search_request`, after [`ledger`] recorded the receipt):
/// `{receipt, request, sensitivity}`.
pub fn with_request(
    c: &mut privatemail_client_wasm::Client,
    privatized: &str,
) -> serde_json::Value {
    let mut out: serde_json::Value = serde_json::from_str(privatized).unwrap();
    let post: serde_json::Value =
        serde_json::from_str(&c.search_request(&ledger()).unwrap()).unwrap();
    out["request"] = post["body"].clone();
    out
}

/// What `release_blocks` returned with the requests the driver then hands out
/// (`block_requests`, after [`ledger`] recorded the receipt):
/// `{epsilon, max_bytes, max_wire_bytes, receipt, urls}`.
pub fn with_urls(c: &mut privatemail_client_wasm::Client, released: &str) -> serde_json::Value {
    let mut out: serde_json::Value = serde_json::from_str(released).unwrap();
    let reqs: serde_json::Value =
        serde_json::from_str(&c.block_requests(&ledger()).unwrap()).unwrap();
    for key in ["urls", "max_bytes", "max_wire_bytes"] {
        out[key] = reqs[key].clone();
    }
    out
}
