//! The real server binary on an ephemeral port, driven with the native client pipeline from
//! `shared`. Needs the Debian package dataset-fashion-mnist (the set-up scripts install it).

use base64::Engine;
use paper::frame::{privatize_in_frame, AnchorFrame};
use paper::privatemail::privatize;
use privatemail_e2e::{
    client_query, fetch_client, post_search, search_request, temp_store, Server,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::api::{ConfigResponse, ErrorResponse, Ranking, SearchRequest, SearchResponse};
use shared::Params;

fn server() -> Server {
    privatemail_e2e::small_server("api", &[])
}

fn client_release(
    base: &str,
    http: &Client,
    query_index: usize,
    seed: u8,
) -> (paper::privatemail::ClientRelease, ConfigResponse) {
    let (config, a) = fetch_client(http, base).unwrap();
    let (q, label) = client_query(query_index);
    let params = Params {
        smlq: config.smlq,
        privacy: shared::PrivacyParams {
            epsilon: 8.0,
            ..config.privacy_defaults
        },
        ..Params::default()
    };
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    (privatize(&q, label, &a, &params, &mut rng).unwrap(), config)
}

#[test]
fn private_search_round_trip() {
    let srv = server();
    let http = Client::new();
    let (release, config) = client_release(&srv.base, &http, 5000, 1);
    let req = search_request(&release, 8);
    let resp = http
        .post(format!("{}/api/v1/search", srv.base))
        .json(&req)
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: SearchResponse = resp.json().unwrap();
    assert_eq!(
        body.results.len(),
        config.class_names.len(),
        "one list per submitted row"
    );
    for list in &body.results {
        assert_eq!(list.len(), 8);
        assert!(list.windows(2).all(|w| w[0].distance <= w[1].distance));
        for m in list {
            assert!(m.id < 1000 && m.label < 10 && m.distance.is_finite());
            let png = base64::engine::general_purpose::STANDARD
                .decode(&m.thumbnail_png_base64)
                .unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        }
    }
    // The image endpoint serves the same bytes as the inline thumbnail.
    let first = &body.results[0][0];
    let img = http
        .get(format!(
            "{}/api/v1/gallery/{}/image.png",
            srv.base, first.id
        ))
        .send()
        .unwrap();
    assert_eq!(img.headers()["content-type"], "image/png");
    let inline = base64::engine::general_purpose::STANDARD
        .decode(&first.thumbnail_png_base64)
        .unwrap();
    assert_eq!(img.bytes().unwrap().to_vec(), inline);
    let meta: Value = http
        .get(format!("{}/api/v1/gallery/{}", srv.base, first.id))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(meta["label"], first.label);
    assert_eq!(
        http.get(format!("{}/healthz", srv.base))
            .send()
            .unwrap()
            .text()
            .unwrap(),
        "ok"
    );
}

/// Whatever position the real row has, the response is shaped the same: one list of k per
/// row, the same fields, and thumbnails inline (nothing to fetch afterwards).
#[test]
fn response_shape_does_not_depend_on_the_real_row() {
    let srv = server();
    let http = Client::new();
    let mut shapes = Vec::new();
    let mut positions = std::collections::HashSet::new();
    for seed in 1..=12u8 {
        let (release, _) = client_release(&srv.base, &http, 7000 + seed as usize, seed);
        positions.insert(release.real_position());
        let req = search_request(&release, 5);
        let body: Value = post_search(&http, &srv.base, &req);
        let shape: Vec<(usize, Vec<String>)> = body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let l = l.as_array().unwrap();
                let mut keys: Vec<String> = l[0].as_object().unwrap().keys().cloned().collect();
                keys.sort();
                (l.len(), keys)
            })
            .collect();
        shapes.push(shape);
    }
    assert!(
        positions.len() > 1,
        "the real row should move between searches"
    );
    assert!(shapes.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn every_bad_input_gets_a_typed_4xx() {
    let srv = server();
    let http = Client::new();
    let url = format!("{}/api/v1/search", srv.base);
    let (release, _) = client_release(&srv.base, &http, 5001, 3);
    let good = serde_json::to_value(search_request(&release, 8)).unwrap();
    let check = |resp: reqwest::blocking::Response, status: StatusCode, code: &str| {
        assert_eq!(resp.status(), status, "expected {status} {code}");
        let body: ErrorResponse = resp.json().expect("JSON error body");
        assert_eq!(serde_json::to_value(body.error.code).unwrap(), code);
        assert!(!body.error.message.is_empty());
    };
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        http.post(&url).json(&v).send().unwrap()
    };
    check(
        http.post(&url)
            .header("content-type", "application/json")
            .body("{bad")
            .send()
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    check(
        http.post(&url).body(good.to_string()).send().unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_json",
    );
    check(
        http.post(&url)
            .header("content-type", "application/json")
            .body(r#"{"query_rows":[[1e999,0]],"anchor_rows":[],"k":8}"#)
            .send()
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    check(
        with(&|v| v["k"] = json!("eight")),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    check(
        with(&|v| v["ranking"] = json!("nearest")),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    // A ranking needs the frame protocol's noise std (this is an Algorithm 1 request).
    check(
        with(&|v| v["ranking"] = json!("proportional")),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    check(
        with(&|v| v["k"] = json!(0)),
        StatusCode::UNPROCESSABLE_ENTITY,
        "k_out_of_range",
    );
    check(
        with(&|v| v["k"] = json!(51)),
        StatusCode::UNPROCESSABLE_ENTITY,
        "k_out_of_range",
    );
    check(
        with(&|v| v["k"] = json!(-1)),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
    );
    check(
        with(&|v| {
            v["anchor_rows"].as_array_mut().unwrap().pop();
        }),
        StatusCode::UNPROCESSABLE_ENTITY,
        "dimension_mismatch",
    );
    check(
        with(&|v| v["query_rows"][0] = json!([1.0, 2.0, 3.0])),
        StatusCode::UNPROCESSABLE_ENTITY,
        "dimension_mismatch",
    );
    check(
        with(&|v| v["query_rows"] = json!([])),
        StatusCode::UNPROCESSABLE_ENTITY,
        "too_large",
    );
    check(
        with(&|v| v["query_rows"] = json!(vec![[0.0, 0.0]; 33])),
        StatusCode::UNPROCESSABLE_ENTITY,
        "too_large",
    );
    check(
        with(&|v| {
            let n = v["anchor_rows"].as_array().unwrap().len();
            v["anchor_rows"] = json!(vec![[1.0, 1.0]; n]);
        }),
        StatusCode::UNPROCESSABLE_ENTITY,
        "degenerate_anchors",
    );
    let huge = format!(
        r#"{{"query_rows":[[{}]],"anchor_rows":[],"k":8}}"#,
        "0,".repeat(600_000)
    );
    // Refused before its body was read: the connection ends, and the answer says so, so the
    // client's next request does not go down a connection closing under it.
    let refused = http
        .post(&url)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .unwrap();
    assert_eq!(refused.headers().get("connection").unwrap(), "close");
    check(refused, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // A body read to its end keeps the connection for the next request.
    let read = with(&|v| v["k"] = json!(0));
    assert!(read.headers().get("connection").is_none());
    check(read, StatusCode::UNPROCESSABLE_ENTITY, "k_out_of_range");
    check(
        http.get(format!("{}/api/v1/gallery/123456789", srv.base))
            .send()
            .unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    check(
        http.get(format!("{}/api/v1/gallery/abc", srv.base))
            .send()
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    check(
        http.get(format!("{}/api/v1/nope", srv.base))
            .send()
            .unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // Still healthy after all of it.
    assert_eq!(
        http.get(format!("{}/healthz", srv.base))
            .send()
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

/// The server's alignment and retrieval, end to end, with a query whose answer is known: the
/// server's own embedding (recomputed in-process from the same data and seed — it is
/// deterministic) under a known similarity transform. The server must undo the transform,
/// find each item itself first, and mostly same-class neighbours after it.
#[test]
fn transformed_server_rows_find_themselves_and_their_class() {
    let srv = server();
    let limits = shared::api::ApiLimits {
        max_k: 50,
        max_query_rows: 32,
        max_body_bytes: 1 << 20,
    };
    let local = privatemail_server::state::AppState::open(&privatemail_server::state::Options {
        data_dir: std::path::Path::new(data::fashion::DEFAULT_DIR),
        store_path: &temp_store("own-local"),
        gallery_size: 1000,
        anchor_count: 200,
        seed: 1,
        limits,
        admin_token: None,
        blocks_store: None,
        blocks_public_url: None,
        pir_concurrency: 2,
        pir_upload_budget: 64 << 20,
        client_address_header: None,
        identity_key: None,
    })
    .unwrap();
    let snap = local.snapshot();
    let (c, s) = (0.5f64.cos(), 0.5f64.sin());
    let t = |r: &[f64]| {
        vec![
            2.5 * (c * r[0] - s * r[1]) + 3.0,
            2.5 * (s * r[0] + c * r[1]) - 1.0,
        ]
    };
    let queries: Vec<usize> = (0..10).map(|i| i * 97).collect();
    let req = SearchRequest {
        query_rows: queries.iter().map(|&i| t(&snap.gallery_rows[i])).collect(),
        anchor_rows: Some(
            snap.anchor_rows
                .row_iter()
                .map(|r| t(&[r[0], r[1]]))
                .collect(),
        ),
        k: 8,
        noise_std: None,
        ranking: None,
    };
    let body: SearchResponse = post_search(&Client::new(), &srv.base, &req);
    let mut same = 0;
    for (list, &i) in body.results.iter().zip(&queries) {
        let item = &snap.items[i];
        assert_eq!(list[0].id, item.id, "item {i} should find itself first");
        assert!(list[0].distance < 1e-6, "distance {}", list[0].distance);
        same += list[1..].iter().filter(|m| m.label == item.label).count();
    }
    let share = same as f64 / 70.0;
    assert!(
        share > 0.5,
        "only {share:.2} of the neighbours share the query's class"
    );
}

/// The anchor-frame protocol end to end with the native client: the frame the server
/// publishes, the client's own sensitivity, a release at the largest ε, and a search. At that
/// ε the noise std is about a quarter of the frame's diameter, so for confidently classified
/// images most matches share the true class. Several images, so the check does not rest on
/// one noise draw.
#[test]
fn frame_protocol_finds_the_class_at_large_epsilon() {
    let srv = privatemail_e2e::demo_server("frame", &[]);
    let http = Client::new();
    let config: ConfigResponse = http
        .get(format!("{}/api/v1/config", srv.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let anchors: shared::api::AnchorsResponse = http
        .get(format!("{}/api/v1/anchors", srv.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let feats = shared::DMatrix::from_row_iterator(
        anchors.features.len(),
        config.feature_dim,
        anchors.features.iter().flatten().map(|&v| v as f64),
    );
    let rows = shared::DMatrix::from_row_iterator(
        anchors.frame_rows.len(),
        config.frame_dim,
        anchors.frame_rows.iter().flatten().copied(),
    );
    let frame = AnchorFrame::new(&feats, &rows, config.frame_kernel_scale).unwrap();
    // The client computes the sensitivity itself: √2 for the class simplex.
    let sens = frame.sensitivity();
    assert!((sens.diameter - 2f64.sqrt()).abs() < 1e-9, "{sens:?}");
    let privacy = shared::PrivacyParams {
        epsilon: shared::params::limits::MAX_EPSILON,
        ..config.privacy_defaults
    };
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let (mut majority, mut tried) = (0, 0);
    for i in 5000..5040 {
        let (q, label) = client_query(i);
        let (_, truth) = privatemail_e2e::test_image(i);
        if label != truth {
            continue;
        }
        tried += 1;
        let r = privatize_in_frame(&q, &frame, 9, &privacy, &mut rng).unwrap();
        // Every ranking in turn: the proportional page (what the page asks for), the
        // posterior ranking, and plain nearest neighbours in the frame (the k-d tree).
        let mut req = paper::frame::search_request(&r, 8, Ranking::Proportional);
        match i % 3 {
            1 => req.ranking = Some(Ranking::Posterior),
            2 => (req.noise_std, req.ranking) = (None, None),
            _ => {}
        }
        let body: SearchResponse = post_search(&http, &srv.base, &req);
        assert_eq!(body.results.len(), 10);
        // As sent (up to serde_json's last-bit float parsing).
        for (a, b) in body
            .rows_in_frame
            .iter()
            .flatten()
            .zip(req.query_rows.iter().flatten())
        {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0));
        }
        let hits = body.results[r.real_position()]
            .iter()
            .filter(|m| m.label == truth)
            .count();
        majority += usize::from(hits >= 5);
    }
    assert!(tried >= 30, "{tried}");
    let share = majority as f64 / tried as f64;
    eprintln!("{majority} of {tried} searches found mostly their class");
    assert!(
        share >= 0.7,
        "only {share:.2} of the searches found mostly their class"
    );
}
