//! The wasm client API in headless Chromium: privatization output shape and noise scale, the
//! real row's position not exposed by what `privatize` returns, and error paths.

use paper::frame::AnchorFrame;
use privatemail_client_wasm::{compose_budget, Client};
use serde_json::{json, Value};
use shared::DMatrix;
use wasm_bindgen_test::*;

use crate::common::{self, CLASS_WEIGHTS, FAMILIARITY, WEIGHTS};
const FIXTURE: &str = include_str!("../fixtures/parity.json");
const N: usize = 60;

/// A small public frame (60 anchors), as the server publishes it.
fn server_json() -> (String, String, DMatrix<f64>, DMatrix<f64>) {
    common::server_json(N, 0x2545_f491_4f6c_dd1d)
}

fn image(k: usize) -> Vec<u8> {
    let cases: Vec<Value> = serde_json::from_str(FIXTURE).unwrap();
    serde_json::from_value(cases[k]["pixels"].clone()).unwrap()
}

/// A server answer whose match ids name the row they answer, so `pick` reveals (to the test)
/// which row the client kept as real.
fn answer(rows: &[Value]) -> String {
    let results: Vec<Value> = (0..rows.len())
        .map(|i| json!([{ "id": i, "label": 0, "distance": 0.0, "thumbnail_png_base64": "" }]))
        .collect();
    json!({ "results": results, "rows_in_frame": rows }).to_string()
}

#[wasm_bindgen_test]
fn privatize_sends_only_shuffled_noisy_rows_with_the_calibrated_noise() {
    let (config, anchors, feats, rows) = server_json();
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    let info: Value = serde_json::from_str(&client.load_pixels(&image(0)).unwrap()).unwrap();
    assert_eq!(info["pixels"].as_array().unwrap().len(), 784);
    let p: f64 = info["probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((p - 1.0).abs() < 1e-4);
    // The exact placement of this image, computed with the same shared code.
    let model = embed::model::Model::from_bytes(WEIGHTS).unwrap();
    let q = model.search_features(&image(0)).unwrap();
    let frame = AnchorFrame::new(&feats, &rows, 0.02).unwrap();
    let exact = frame
        .place(&DMatrix::from_fn(1, 64, |_, j| q[j] as f64))
        .unwrap();
    assert!((client.sensitivity() - 2f64.sqrt()).abs() < 1e-9);

    let (eps, delta) = (4.0, 1e-5);
    let trials = 300;
    let mut counts = [0usize; 10];
    let mut sq = 0.0;
    let mut scale = 0.0;
    for _ in 0..trials {
        let privatized = client
            .privatize(eps, delta, "discrete_gaussian", 8, "proportional")
            .unwrap();
        let out = common::with_request(&mut client, &privatized);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["receipt", "request", "sensitivity"]);
        let req: Value = serde_json::from_str(out["request"].as_str().unwrap()).unwrap();
        let keys: Vec<&String> = req.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["k", "noise_std", "query_rows", "ranking"]);
        assert_eq!(req["noise_std"], out["receipt"]["noise_scale"]);
        assert_eq!(req["ranking"], "proportional");
        let sent = req["query_rows"].as_array().unwrap().clone();
        assert_eq!(sent.len(), 10);
        assert!(sent.iter().all(|r| r.as_array().unwrap().len() == 10));
        scale = out["receipt"]["noise_scale"].as_f64().unwrap();
        let picked: Value = serde_json::from_str(&client.pick(&answer(&sent)).unwrap()).unwrap();
        let pos = picked["matches"][0]["id"].as_u64().unwrap() as usize;
        counts[pos] += 1;
        for j in 0..10 {
            sq += (sent[pos][j].as_f64().unwrap() - exact[(0, j)]).powi(2);
        }
    }
    // σ as calibrated for the frame's sensitivity (up to the proven grid terms, < 1 %).
    let want = dp::mechanism::zcdp_sigma(eps, delta, 2f64.sqrt()).unwrap();
    assert!(scale >= want && scale < 1.01 * want, "{scale} vs {want}");
    // Empirical std of the real row's noise: 3,000 entries, SE ≈ 1.3 %; allow 6 SE.
    let est = (sq / (10.0 * trials as f64)).sqrt();
    assert!((est / scale - 1.0).abs() < 0.08, "{est} vs {scale}");
    // The real row's position is uniform: each of 10 positions expects 30 (sd ≈ 5.2).
    assert!(counts.iter().all(|&c| (5..=60).contains(&c)), "{counts:?}");
}

#[wasm_bindgen_test]
fn bad_inputs_are_js_errors_with_plain_messages() {
    let (config, anchors, _, _) = server_json();
    assert!(Client::new(b"nope", CLASS_WEIGHTS, &config, &anchors).is_err());
    assert!(Client::new(WEIGHTS, CLASS_WEIGHTS, "{", &anchors).is_err());
    assert!(Client::new(WEIGHTS, CLASS_WEIGHTS, &config, "[]").is_err());
    let mut short: Value = serde_json::from_str(&anchors).unwrap();
    short["frame_rows"].as_array_mut().unwrap().pop();
    let short = short.to_string();
    // Anchors other than the ones the configuration names: refused as such, as the CLI does…
    let e = common::message(
        Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &short)
            .err()
            .unwrap(),
    );
    assert!(e.contains("SHA-256"), "{e}");
    // …and, named, refused for their shape.
    let e = common::message(
        Client::new(
            WEIGHTS,
            CLASS_WEIGHTS,
            &common::naming(&config, &short),
            &short,
        )
        .err()
        .unwrap(),
    );
    assert!(e.contains("frame rows"), "{e}");
    // Weights other than the query model the gallery expects: refused, naming both versions.
    let mut other: Value = serde_json::from_str(&config).unwrap();
    other["query_model_version"] = json!("cnn-v2-0000000000000000");
    let e = common::message(
        Client::new(WEIGHTS, CLASS_WEIGHTS, &other.to_string(), &anchors)
            .err()
            .unwrap(),
    );
    assert!(e.contains("cnn-v2-0000000000000000"), "{e}");
    assert!(e.contains(&embed::model::weights_version(WEIGHTS)), "{e}");
    let mut altered = WEIGHTS.to_vec();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    assert!(Client::new(&altered, CLASS_WEIGHTS, &config, &anchors).is_err());
    // A class model that is not one (the retrieval model's f32 file, a cut file): refused.
    let e = common::message(
        Client::new(WEIGHTS, WEIGHTS, &config, &anchors)
            .err()
            .unwrap(),
    );
    assert!(e.contains("class model"), "{e}");
    assert!(Client::new(WEIGHTS, &CLASS_WEIGHTS[1..], &config, &anchors).is_err());
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    // Nothing loaded yet, nothing pending.
    assert!(client
        .privatize(1.0, 1e-5, "discrete_gaussian", 8, "proportional")
        .is_err());
    assert!(client.pick("{}").is_err());
    assert!(client.load_pixels(&[0u8; 10]).is_err());
    // Nothing to see (too small, one solid colour): refused with the reason, no query kept.
    let refused: Value =
        serde_json::from_str(&client.load_image(&[0u8; 36], 3, 3).unwrap()).unwrap();
    assert!(
        refused["refused"].as_str().unwrap().contains("3×3"),
        "{refused}"
    );
    let refused: Value =
        serde_json::from_str(&client.load_image(&[200u8; 4 * 40 * 30], 40, 30).unwrap()).unwrap();
    assert!(
        refused["refused"]
            .as_str()
            .unwrap()
            .contains("solid colour"),
        "{refused}"
    );
    assert!(client
        .privatize(1.0, 1e-5, "analytic_gaussian", 8, "proportional")
        .is_err());
    assert!(client.load_image(&[0u8; 16], 30, 30).is_err());
    // A dark box on a light background: a query.
    let boxed: Vec<u8> = (0..40 * 30)
        .flat_map(|i| {
            let (x, y) = (i % 40, i / 40);
            let v = if (10..30).contains(&x) && (5..25).contains(&y) {
                40
            } else {
                230
            };
            [v, v, v, 255]
        })
        .collect();
    let info: Value = serde_json::from_str(&client.load_image(&boxed, 40, 30).unwrap()).unwrap();
    assert!(info.get("refused").is_none(), "{info}");
    assert!(client
        .privatize(0.0, 1e-5, "discrete_gaussian", 8, "proportional")
        .is_err());
    assert!(client
        .privatize(1.0, 1.5, "discrete_gaussian", 8, "proportional")
        .is_err());
    assert!(client
        .privatize(1.0, 1e-5, "laplace", 8, "proportional")
        .is_err());
    assert!(client
        .privatize(1.0, 1e-5, "discrete_gaussian", 8, "nearest")
        .is_err());
    assert!(client
        .privatize(1.0, 1e-5, "discrete_gaussian", 0, "proportional")
        .is_err());
    assert!(client
        .privatize(1.0, 1e-5, "discrete_gaussian", 51, "proportional")
        .is_err());
    // The request only after the ledger recorded the receipt, and once; an answer only after
    // the request, and once (a bad one ends the search too).
    let privatized = client
        .privatize(1.0, 1e-5, "analytic_gaussian", 8, "proportional")
        .unwrap();
    assert!(client.pick("{}").is_err(), "no request was handed out");
    let e = common::message(client.search_request(&common::full_ledger()).unwrap_err());
    assert!(e.contains("could not be recorded"), "{e}");
    let out = common::with_request(&mut client, &privatized);
    assert!(
        client.search_request(&common::ledger()).is_err(),
        "sent once"
    );
    let req: Value = serde_json::from_str(out["request"].as_str().unwrap()).unwrap();
    let rows = req["query_rows"].as_array().unwrap().clone();
    assert!(client.pick(&answer(&rows[..9])).is_err());
    assert!(client.pick(&answer(&rows)).is_err(), "the search is over");
    let fresh = |client: &mut Client| {
        let p = client
            .privatize(1.0, 1e-5, "analytic_gaussian", 8, "proportional")
            .unwrap();
        common::with_request(client, &p)
    };
    fresh(&mut client);
    assert!(client.pick("not json").is_err());
    let out = fresh(&mut client);
    let req: Value = serde_json::from_str(out["request"].as_str().unwrap()).unwrap();
    let rows = req["query_rows"].as_array().unwrap();
    assert!(client.pick(&answer(rows)).is_ok());
    // Budget: two receipts compose below the sum of their epsilons.
    let receipts = json!([out["receipt"], out["receipt"]]).to_string();
    let total: Value = serde_json::from_str(&compose_budget(&receipts, 1e-5).unwrap()).unwrap();
    assert!(total["epsilon"].as_f64().unwrap() < 2.0);
    assert!(compose_budget("[{}]", 1e-5).is_err());
}

/// The familiarity model is the pinned file or nothing: a query model of other bytes, a
/// changed byte or a truncated file are refused; until it is set a photo is refused with the
/// reason and no query is kept, so a search cannot follow. A query model whose file is the
/// pinned one is taken as the familiarity model too (nothing more to fetch).
#[wasm_bindgen_test]
fn the_familiarity_model_is_the_pinned_file_and_comes_before_any_photo() {
    let (config, anchors, _, _) = server_json();
    // A query model of other bytes (one 8-bit weight in the middle changed), named by the
    // configuration: the client is made, without a familiarity model.
    let mut other = WEIGHTS.to_vec();
    let mid = other.len() / 2;
    other[mid] ^= 1;
    let mut named: Value = serde_json::from_str(&config).unwrap();
    named["query_model_version"] = json!(embed::model::weights_version(&other));
    let mut client = Client::new(&other, CLASS_WEIGHTS, &named.to_string(), &anchors).unwrap();
    assert!(!client.has_familiarity_model());
    let e = common::message(client.load_pixels(&image(0)).err().unwrap());
    assert!(e.contains("familiarity model is not loaded"), "{e}");
    let mut changed = FAMILIARITY.to_vec();
    changed[100] ^= 1;
    for bad in [
        &other[..],
        &changed[..],
        &FAMILIARITY[..FAMILIARITY.len() - 1],
    ] {
        let e = common::message(client.set_familiarity_model(bad).err().unwrap());
        assert!(e.contains("SHA-256"), "{e}");
        assert!(!client.has_familiarity_model());
    }
    client.set_familiarity_model(FAMILIARITY).unwrap();
    assert!(client.has_familiarity_model());
    let info: Value = serde_json::from_str(&client.load_pixels(&image(0)).unwrap()).unwrap();
    assert!(info["unfamiliar_score"].is_number());
    let same = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    assert_eq!(same.has_familiarity_model(), WEIGHTS == FAMILIARITY);
}

/// The photo's out-of-distribution check: the score and decision are the native
/// `embed::ood::assess_input` of its input and of the familiarity model's features and layer
/// means (compiled in, whatever query model the client was given) against the reference the
/// client was given, and the sentence comes with the decision. A malformed reference is
/// refused when the client is made.
#[wasm_bindgen_test]
fn load_pixels_says_whether_the_photo_looks_like_the_anchors() {
    let (config, anchors, _, _) = server_json();
    let familiar = embed::ood::FamiliarityModel::from_bytes(FAMILIARITY).unwrap();
    let (inf, layers) = familiar.model().infer_with_layer_means(&image(0)).unwrap();
    let q = inf.features;
    let check = |anchors: &str| -> Value {
        let mut client = Client::new(
            WEIGHTS,
            CLASS_WEIGHTS,
            &common::naming(&config, anchors),
            anchors,
        )
        .unwrap();
        client.set_familiarity_model(FAMILIARITY).unwrap();
        let info: Value = serde_json::from_str(&client.load_pixels(&image(0)).unwrap()).unwrap();
        let parsed: shared::api::AnchorsResponse = serde_json::from_str(anchors).unwrap();
        let native = embed::ood::assess_input(&image(0), &q, &layers, &parsed.familiarity).unwrap();
        let s = info["unfamiliar_score"].as_f64().unwrap() as f32;
        assert!(
            (s - native.score).abs() <= 1e-5 * native.score.max(1.0),
            "{s} vs {}",
            native.score
        );
        assert_eq!(info["unfamiliar"].as_bool().unwrap(), native.unfamiliar);
        assert_eq!(info["unfamiliar_message"].is_string(), native.unfamiliar);
        info
    };
    // The fitted reference of random anchors: the same score as natively.
    check(&anchors);
    let identity =
        |d: usize| -> Vec<f32> { (0..d * d).map(|i| f32::from(i % (d + 1) == 0)).collect() };
    let centred = |shift: f32| -> String {
        let mut v: Value = serde_json::from_str(&anchors).unwrap();
        let mean: Vec<f32> = q.iter().map(|x| x + shift).collect();
        v["familiarity"] = json!({
            "features": { "means": [mean], "precision": identity(q.len()) },
            "layers": { "means": [layers.clone()], "precision": identity(layers.len()) },
        });
        v.to_string()
    };
    // A reference far from the photo's features (2.5 in every coordinate: 6.25 a dimension).
    let far = check(&centred(2.5));
    assert!(far["unfamiliar"].as_bool().unwrap());
    assert_eq!(
        far["unfamiliar_message"].as_str().unwrap(),
        embed::ood::UNFAMILIAR_MESSAGE
    );
    // Centred on the photo's own features and layer means: familiar, no sentence.
    let near = check(&centred(0.0));
    assert!(!near["unfamiliar"].as_bool().unwrap());
    assert!(near["unfamiliar_message"].is_null());
    // A reference of the wrong shape: the client is not made.
    let mut bad: Value = serde_json::from_str(&anchors).unwrap();
    bad["familiarity"]["layers"]["precision"] = json!([1.0]);
    let bad = bad.to_string();
    let e = common::message(
        Client::new(WEIGHTS, CLASS_WEIGHTS, &common::naming(&config, &bad), &bad)
            .err()
            .unwrap(),
    );
    assert!(e.contains("malformed"), "{e}");
}

/// The class shown for a photo is the class model's (`embed::classify`), reproduced in
/// the browser to 1e-5 of the native figures the fixture holds — not the retrieval model's
/// (whose probabilities differ).
#[wasm_bindgen_test]
fn the_class_shown_is_the_class_models() {
    let (config, anchors, _, _) = server_json();
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    let cases: Vec<Value> = serde_json::from_str(FIXTURE).unwrap();
    for case in &cases {
        let pixels: Vec<u8> = serde_json::from_value(case["pixels"].clone()).unwrap();
        let info: Value = serde_json::from_str(&client.load_pixels(&pixels).unwrap()).unwrap();
        assert_eq!(info["label"], case["shown_label"]);
        let want: Vec<f32> = serde_json::from_value(case["shown_probabilities"].clone()).unwrap();
        let got: Vec<f32> = serde_json::from_value(info["probabilities"].clone()).unwrap();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5, "wasm {a} vs native {b}");
        }
    }
}

/// A tilted photo becomes, in the browser, the very model input the native pipeline makes of
/// it (the fixtures, checked against the pipeline by `crates/data/tests/models/wasm_parity_fixture.rs`):
/// the turn at the photo's resolution — by the principal axis (trousers) or by levelling the
/// base (an ankle boot) — gives the same bytes on both targets.
#[wasm_bindgen_test]
fn a_tilted_photo_gives_the_native_model_input() {
    for text in [
        include_str!("../fixtures/photo.json"),
        include_str!("../fixtures/photo-shoe.json"),
    ] {
        let fixture: Value = serde_json::from_str(text).unwrap();
        let side = fixture["side"].as_u64().unwrap() as u32;
        let rgba: Vec<u8> = serde_json::from_value(fixture["rgba"].clone()).unwrap();
        let (config, anchors, _, _) = server_json();
        let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
        client.set_familiarity_model(FAMILIARITY).unwrap();
        client.set_familiarity_model(FAMILIARITY).unwrap();
        let info: Value =
            serde_json::from_str(&client.load_image(&rgba, side, side).unwrap()).unwrap();
        assert_eq!(info["pixels"], fixture["pixels"]);
        // The class model read the photo's own class input (the noise removed its way): each
        // probability to 1e-5 of itself (the targets' `exp` differ in the last bit; another
        // input moves the small ones by far more).
        let probabilities = |v: &Value| -> Vec<f32> { serde_json::from_value(v.clone()).unwrap() };
        let (got, want) = (
            probabilities(&info["probabilities"]),
            probabilities(&fixture["class_probabilities"]),
        );
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * b.abs(), "wasm {a} vs native {b}");
        }
    }
}

/// A sample (`web/samples.js`, `embed::sample`) is searched with the features published
/// with it when they are the gallery model's (the configuration's `model_version`), and with
/// the query model's otherwise, as any photo. Published features that are not a finite unit
/// vector of the model's length are refused with the reason, and the sample is searched with
/// the query model's features: a refusal never stops the search.
#[wasm_bindgen_test]
fn a_sample_is_searched_with_its_published_gallery_features() {
    let (config, anchors, feats, rows) = server_json();
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    // The sample as the page decodes it: the dataset image's grey levels as RGBA.
    let rgba: Vec<u8> = image(0).iter().flat_map(|&p| [p, p, p, 255]).collect();
    // Published features: anchor 3's, which the frame places far from the photo's own.
    let published: Vec<f32> = {
        let a: Vec<f32> = (0..64).map(|j| feats[(3, j)] as f32).collect();
        let n = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        a.iter().map(|x| x / n).collect()
    };
    let frame = AnchorFrame::new(&feats, &rows, 0.02).unwrap();
    let place = |q: &[f32]| {
        frame
            .place(&DMatrix::from_fn(1, 64, |_, j| q[j] as f64))
            .unwrap()
    };
    let want = place(&embed::sample::published_features(&published).unwrap());
    let model = embed::model::Model::from_bytes(WEIGHTS).unwrap();
    let own = place(&model.search_features(&image(0)).unwrap());
    let apart = (0..10)
        .map(|j| (want[(0, j)] - own[(0, j)]).powi(2))
        .sum::<f64>();
    assert!(
        apart > 0.25,
        "the two placements must be told apart: {apart}"
    );
    // The real row, averaged over searches (its position read back through `pick`).
    let mean_real_row = |client: &mut Client| -> Vec<f64> {
        let trials = 150;
        let mut sum = vec![0.0; 10];
        for _ in 0..trials {
            let privatized = client
                .privatize(8.0, 1e-5, "discrete_gaussian", 8, "proportional")
                .unwrap();
            let out = common::with_request(client, &privatized);
            let req: Value = serde_json::from_str(out["request"].as_str().unwrap()).unwrap();
            let sent = req["query_rows"].as_array().unwrap().clone();
            let picked: Value =
                serde_json::from_str(&client.pick(&answer(&sent)).unwrap()).unwrap();
            let pos = picked["matches"][0]["id"].as_u64().unwrap() as usize;
            for (j, s) in sum.iter_mut().enumerate() {
                *s += sent[pos][j].as_f64().unwrap() / trials as f64;
            }
        }
        sum
    };
    let dist = |m: &[f64], x: &DMatrix<f64>| (0..10).map(|j| (m[j] - x[(0, j)]).powi(2)).sum();
    // The real row's distances to the published features' placement and to the photo's own.
    let distances = |client: &mut Client| -> (f64, f64) {
        let m = mean_real_row(client);
        (dist(&m, &want), dist(&m, &own))
    };
    let load = |client: &mut Client, features: &[f32], version: &str| -> Value {
        serde_json::from_str(
            &client
                .load_sample(&rgba, 28, 28, features, version)
                .unwrap(),
        )
        .unwrap()
    };
    // The gallery's model version: the published features are the query.
    let info = load(&mut client, &published, "gallery");
    assert_eq!(info["features"], "published");
    let (to_want, to_own) = distances(&mut client);
    assert!(to_want < to_own, "{to_want} vs {to_own}");
    // Another model's features: the query model's own, as for a photo.
    let info = load(&mut client, &published, "cnn-v2-0000000000000000");
    assert_eq!(info["features"], "query model");
    let (to_want, to_own) = distances(&mut client);
    assert!(to_own < to_want, "{to_own} vs {to_want}");
    // Refused: wrong length, NaN, infinity, zero, far from unit length. Each is searched with
    // the query model's features, the reason given.
    let mut bad: Vec<Vec<f32>> = vec![published[..63].to_vec(), vec![0.0; 64]];
    for v in [f32::NAN, f32::INFINITY] {
        let mut b = published.clone();
        b[5] = v;
        bad.push(b);
    }
    bad.push(published.iter().map(|x| x * 2.0).collect());
    for (k, b) in bad.iter().enumerate() {
        let info = load(&mut client, b, "gallery");
        assert_eq!(info["features"], "query model");
        let why = info["published_error"].as_str().unwrap();
        assert!(why.contains("sample"), "{why}");
        if k == 0 {
            let (to_want, to_own) = distances(&mut client);
            assert!(to_own < to_want, "{to_own} vs {to_want}");
        }
    }
    // Accepted features give no reason.
    let info = load(&mut client, &published, "gallery");
    assert!(info["published_error"].is_null());
}
