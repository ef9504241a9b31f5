//! Gallery changes, persistence across a hard kill, authorisation, and the OpenAPI document
//! checked against real responses.

use std::time::{Duration, Instant};

use paper::privatemail::privatize;
use privatemail_e2e::{
    client_query, fetch_client, search_request, start_server, temp_store, test_image, Server,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::{Client, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::api::{SearchRequest, SearchResponse, StatusResponse};
use shared::Params;

const TOKEN: &str = "test-token-123";

fn start(store: &std::path::Path, token: bool) -> Server {
    let mut args = vec![
        "--gallery-size",
        "600",
        "--anchors",
        "100",
        "--store",
        store.to_str().unwrap(),
    ];
    if token {
        args.extend(["--admin-token", TOKEN]);
    }
    start_server(&args)
}

fn status(http: &Client, base: &str) -> StatusResponse {
    http.get(format!("{base}/api/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

fn wait_for_snapshot(http: &Client, base: &str) -> StatusResponse {
    let t = Instant::now();
    loop {
        let s = status(http, base);
        if s.snapshot_version == s.catalogue_version && !s.reembedding {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "re-embedding did not finish: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fixed search request (seeded client) against this server's anchors.
fn fixed_request(http: &Client, base: &str) -> SearchRequest {
    let (config, a) = fetch_client(http, base).unwrap();
    let (q, label) = client_query(9000);
    let params = Params {
        smlq: config.smlq,
        ..Params::default()
    };
    let r = privatize(&q, label, &a, &params, &mut ChaCha20Rng::from_seed([7; 32])).unwrap();
    search_request(&r, 10)
}

fn item_status(http: &Client, base: &str, id: u64) -> StatusCode {
    http.get(format!("{base}/api/v1/gallery/{id}"))
        .send()
        .unwrap()
        .status()
}

fn search(http: &Client, base: &str, req: &SearchRequest) -> SearchResponse {
    let resp = http
        .post(format!("{base}/api/v1/search"))
        .json(req)
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().unwrap()
}

fn add(http: &Client, base: &str, token: Option<&str>, body: &Value) -> Response {
    let mut rq = http.post(format!("{base}/api/v1/gallery")).json(body);
    if let Some(t) = token {
        rq = rq.bearer_auth(t);
    }
    rq.send().unwrap()
}

/// Test image `i` added with the token: its new id.
fn add_one(http: &Client, base: &str, i: usize) -> u64 {
    let (px, label) = test_image(i);
    let resp = add(
        http,
        base,
        Some(TOKEN),
        &json!({ "items": [{ "label": label, "pixels": px }] }),
    );
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let change: Value = resp.json().unwrap();
    change["ids"][0].as_u64().unwrap()
}

#[test]
fn changes_persist_across_a_hard_kill() {
    let store = temp_store("persist");
    let http = Client::new();
    let (added_id, deleted_id, before, version);
    {
        let srv = start(&store, true);
        let s0 = wait_for_snapshot(&http, &srv.base);
        assert_eq!(s0.snapshot_items, 600);
        added_id = add_one(&http, &srv.base, 9500);
        // Searches keep being answered while the gallery re-embeds.
        let req = fixed_request(&http, &srv.base);
        let _ = search(&http, &srv.base, &req);
        deleted_id = 17;
        let resp = http
            .delete(format!("{}/api/v1/gallery/{deleted_id}", srv.base))
            .bearer_auth(TOKEN)
            .send()
            .unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        let s = wait_for_snapshot(&http, &srv.base);
        assert_eq!((s.snapshot_items, s.catalogue_items), (600, 600));
        before = search(&http, &srv.base, &req);
        version = s.catalogue_version;
        assert_eq!(
            item_status(&http, &srv.base, deleted_id),
            StatusCode::NOT_FOUND
        );
        // `srv` drops here: SIGKILL, no graceful shutdown.
    }
    let srv = start(&store, true);
    let s = status(&http, &srv.base);
    assert_eq!(s.catalogue_version, version, "catalogue version lost");
    assert_eq!(
        s.snapshot_version, version,
        "the stored snapshot was not reused"
    );
    assert!(!s.reembedding);
    let req = fixed_request(&http, &srv.base);
    assert_eq!(
        search(&http, &srv.base, &req),
        before,
        "results changed across the restart"
    );
    let meta: Value = http
        .get(format!("{}/api/v1/gallery/{added_id}", srv.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(meta["id"], added_id);
    assert_eq!(
        item_status(&http, &srv.base, deleted_id),
        StatusCode::NOT_FOUND
    );
    // An id names one image for good: with the highest item deleted, the next one added gets
    // a new id, not the deleted one's.
    let resp = http
        .delete(format!("{}/api/v1/gallery/{added_id}", srv.base))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let again = add_one(&http, &srv.base, 9501);
    assert!(again > added_id, "{again} after {added_id}");
}

#[test]
fn changes_need_the_bearer_token() {
    let http = Client::new();
    let body = json!({ "items": [{ "label": 1, "pixels": vec![0u8; 784] }] });
    let with_token = start(&temp_store("auth"), true);
    let code = |r: Response| -> (StatusCode, String) {
        let s = r.status();
        let v: Value = r.json().unwrap();
        (s, v["error"]["code"].as_str().unwrap().to_string())
    };
    assert_eq!(
        code(add(&http, &with_token.base, None, &body)),
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    assert_eq!(
        code(add(&http, &with_token.base, Some("wrong"), &body)),
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    let del = http
        .delete(format!("{}/api/v1/gallery/3", with_token.base))
        .send()
        .unwrap();
    assert_eq!(code(del), (StatusCode::UNAUTHORIZED, "unauthorized".into()));
    let bad = json!({ "items": [{ "label": 1, "pixels": vec![0u8; 10] }] });
    assert_eq!(
        code(add(&http, &with_token.base, Some(TOKEN), &bad)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "dimension_mismatch".into()
        )
    );
    let bad = json!({ "items": [{ "label": 10, "pixels": vec![0u8; 784] }] });
    assert_eq!(
        code(add(&http, &with_token.base, Some(TOKEN), &bad)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input".into())
    );
    assert_eq!(
        code(add(
            &http,
            &with_token.base,
            Some(TOKEN),
            &json!({ "items": [] })
        )),
        (StatusCode::UNPROCESSABLE_ENTITY, "too_large".into())
    );
    let del = http
        .delete(format!("{}/api/v1/gallery/999999", with_token.base))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(code(del), (StatusCode::NOT_FOUND, "not_found".into()));
    let without = start(&temp_store("noauth"), false);
    assert_eq!(
        code(add(&http, &without.base, Some(TOKEN), &body)),
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
}

fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema =
        json!({ "$ref": format!("#/components/schemas/{name}"), "components": doc["components"] });
    jsonschema::validator_for(&schema).unwrap()
}

fn assert_valid(doc: &Value, name: &str, instance: &Value) {
    let v = validator(doc, name);
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{name}: {errors:?}");
}

#[test]
fn openapi_document_describes_the_real_responses() {
    let srv = start(&temp_store("openapi"), true);
    let http = Client::new();
    let base = &srv.base;
    let doc: Value = http
        .get(format!("{base}/api/v1/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let get = |p: &str| -> Value {
        http.get(format!("{base}{p}"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    assert_valid(&doc, "Config", &get("/api/v1/config"));
    assert_valid(&doc, "Identity", &get("/api/v1/identity"));
    assert_valid(&doc, "Anchors", &get("/api/v1/anchors"));
    assert_valid(&doc, "Status", &get("/api/v1/status"));
    assert_valid(&doc, "ItemMeta", &get("/api/v1/gallery/5"));
    assert_valid(&doc, "Error", &get("/api/v1/gallery/5555555"));
    let req = fixed_request(&http, base);
    assert_valid(&doc, "SearchRequest", &serde_json::to_value(&req).unwrap());
    let resp: Value = http
        .post(format!("{base}/api/v1/search"))
        .json(&req)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_valid(&doc, "SearchResponse", &resp);
    let bad: Value = http
        .post(format!("{base}/api/v1/search"))
        .json(&json!({"k": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_valid(&doc, "Error", &bad);
    let (px, label) = test_image(1);
    let change: Value = add(
        &http,
        base,
        Some(TOKEN),
        &json!({ "items": [{ "label": label, "pixels": px }] }),
    )
    .json()
    .unwrap();
    assert_valid(&doc, "ChangeResponse", &change);
    // Every path the router serves is documented.
    for p in [
        "/config",
        "/identity",
        "/anchors",
        "/search",
        "/status",
        "/gallery",
        "/gallery/{id}",
        "/gallery/{id}/image.png",
        "/openapi.json",
    ] {
        assert!(doc["paths"].get(p).is_some(), "{p} undocumented");
    }
    // And the schema rejects what it should.
    assert!(!validator(&doc, "SearchResponse").is_valid(&json!({"results": [[{"id": -1}]]})));
}
