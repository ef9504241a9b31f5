//! Restart: the store keeps every gallery item's model features (keyed by the weights
//! version), so a second start on the same store computes none and serves identical results;
//! features of another weights version, or a store written before features were stored, are
//! recomputed once and written back.

use privatemail_e2e::{start_server, start_server_logged, status_json, temp_store, Server};
use privatemail_server::gallery::store::{FeatureRow, Store, StoredItem};
use reqwest::blocking::Client;
use serde_json::{json, Value};
use shared::api::{AnchorsResponse, SearchRequest, SearchResponse};

const GALLERY: usize = 600;

fn args(store: &std::path::Path) -> [&str; 6] {
    [
        "--gallery-size",
        "600",
        "--anchors",
        "100",
        "--store",
        store.to_str().unwrap(),
    ]
}

fn start(store: &std::path::Path) -> Server {
    start_server(&args(store))
}

fn startup(http: &Client, base: &str) -> Value {
    let s: Value = status_json(http, base);
    s["startup"].clone()
}

/// What a client sees: the results of fixed frame-protocol searches (every anchor's frame row,
/// so the answer depends on every gallery item's features) and the partition's content hash.
fn observe(http: &Client, base: &str) -> (Vec<Vec<u64>>, String) {
    let anchors: AnchorsResponse = http
        .get(format!("{base}/api/v1/anchors"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let mut results = Vec::new();
    for rows in anchors.frame_rows.chunks(20) {
        let req = SearchRequest {
            query_rows: rows.to_vec(),
            anchor_rows: None,
            k: 10,
            noise_std: None,
            ranking: None,
        };
        let resp: SearchResponse = http
            .post(format!("{base}/api/v1/search"))
            .json(&req)
            .send()
            .unwrap()
            .json()
            .unwrap();
        results.extend(
            resp.results
                .iter()
                .map(|r| r.iter().map(|m| m.id).collect::<Vec<_>>()),
        );
    }
    let doc: Value = http
        .get(format!("{base}/api/v1/partition"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    (results, doc["version"].as_str().unwrap().to_string())
}

fn assert_startup(s: &Value, reused: bool, loaded: usize, computed: usize) {
    assert_eq!(s["features_reused"], reused, "{s}");
    assert_eq!(s["features_loaded"], loaded, "{s}");
    assert_eq!(s["features_computed"], computed, "{s}");
    for key in [
        "store_load_secs",
        "features_secs",
        "embedding_secs",
        "partition_secs",
        "total_secs",
    ] {
        assert!(s[key].as_f64().is_some_and(|v| v >= 0.0), "{key}: {s}");
    }
}

#[test]
fn restart_reuses_stored_features_and_recomputes_for_other_weights() {
    let store = temp_store("restart");
    let http = Client::new();

    let first = {
        let s = start(&store);
        let st = startup(&http, &s.base);
        assert_startup(&st, false, 0, GALLERY);
        assert_eq!(st["embedding_reused"], false, "{st}");
        assert_eq!(st["anchors_reused"], false, "{st}");
        observe(&http, &s.base)
    };
    assert!(first.0.iter().all(|r| r.len() == 10));

    // Same store, same weights: nothing recomputed, identical answers.
    {
        let s = start(&store);
        let st = startup(&http, &s.base);
        assert_startup(&st, true, GALLERY, 0);
        assert_eq!(st["embedding_reused"], true, "{st}");
        assert_eq!(st["anchors_reused"], true, "{st}");
        assert_eq!(observe(&http, &s.base), first);
    }

    // Features stored by other weights (wrong values, too): recomputed, not used.
    {
        let db = Store::open(&store).unwrap();
        let items = db.load_items().unwrap();
        assert_eq!(items.len(), GALLERY);
        let junk = vec![0.25f32; 64];
        let rows: Vec<FeatureRow> = items
            .iter()
            .map(|it| FeatureRow {
                id: it.id,
                label: it.label,
                pixels: &it.pixels,
                features: &junk,
            })
            .collect();
        assert_eq!(db.put_features("cnn-v1-other", &rows).unwrap(), GALLERY);
    }
    {
        let s = start(&store);
        let st = startup(&http, &s.base);
        assert_startup(&st, false, 0, GALLERY);
        assert_eq!(observe(&http, &s.base), first);
    }
    // … and written back: the next start reuses them again.
    {
        let s = start(&store);
        assert_startup(&startup(&http, &s.base), true, GALLERY, 0);
    }
    // Malformed rows under the right version (wrong width) are recomputed too.
    {
        let db = Store::open(&store).unwrap();
        let items = db.load_items().unwrap();
        let short = [0.5f32; 3];
        let rows: Vec<FeatureRow> = items
            .iter()
            .take(5)
            .map(|it| FeatureRow {
                id: it.id,
                label: it.label,
                pixels: &it.pixels,
                features: &short,
            })
            .collect();
        let version = embed::model::weights_version(data::assets::MODEL_WEIGHTS);
        assert_eq!(db.put_features(&version, &rows).unwrap(), 5);
    }
    {
        let s = start(&store);
        assert_startup(&startup(&http, &s.base), false, GALLERY - 5, 5);
        assert_eq!(observe(&http, &s.base), first);
    }
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

#[test]
fn added_images_have_their_features_stored() {
    let store = temp_store("restart-add");
    let args = [
        "--gallery-size",
        "600",
        "--anchors",
        "100",
        "--store",
        store.to_str().unwrap(),
        "--admin-token",
        "t",
    ];
    let http = Client::new();
    {
        let s = start_server(&args);
        let (pixels, label) = privatemail_e2e::test_image(7000);
        let r = http
            .post(format!("{}/api/v1/gallery", s.base))
            .bearer_auth("t")
            .json(&json!({"items": [{"label": label, "pixels": pixels}]}))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        // The background re-embedding stores the new item's features before embedding.
        let t = std::time::Instant::now();
        loop {
            let st: Value = status_json(&http, &s.base);
            if st["snapshot_version"] == st["catalogue_version"] && st["reembedding"] == false {
                break;
            }
            assert!(
                t.elapsed().as_secs() < 120,
                "re-embedding did not finish: {st}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let s = start_server(&args);
    assert_startup(&startup(&http, &s.base), true, GALLERY + 1, 0);
    drop(s);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

#[test]
fn a_store_without_features_opens_and_is_completed_once() {
    // A store as written before features were stored: items only.
    let store = temp_store("restart-old");
    {
        let db = Store::open(&store).unwrap();
        let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
        let test = data::fashion::load_split(dir, "t10k").expect("Fashion-MNIST");
        let items: Vec<StoredItem> = (0..GALLERY)
            .map(|i| StoredItem {
                id: i as u64,
                label: test.labels[i] as u32,
                pixels: test.images.image(i).to_vec(),
            })
            .collect();
        db.put_items(&items, 1).unwrap();
    }
    let http = Client::new();
    let first = {
        let s = start(&store);
        assert_startup(&startup(&http, &s.base), false, 0, GALLERY);
        observe(&http, &s.base)
    };
    let s = start(&store);
    assert_startup(&startup(&http, &s.base), true, GALLERY, 0);
    assert_eq!(observe(&http, &s.base), first);
    drop(s);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

/// The numeric bounds the API document publishes are the ones the server enforces: a value
/// just outside is refused by the schema and by the server, one at the edge passes both.
#[test]
fn documented_numeric_bounds_are_enforced() {
    let store = temp_store("bounds");
    let s = start_server(&[
        "--gallery-size",
        "600",
        "--anchors",
        "100",
        "--store",
        store.to_str().unwrap(),
        "--admin-token",
        "t",
    ]);
    let http = Client::new();
    let doc: Value = http
        .get(format!("{}/api/v1/openapi.json", s.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let schema = |name: &str| {
        jsonschema::validator_for(&json!({
            "$ref": format!("#/components/schemas/{name}"),
            "components": doc["components"],
        }))
        .unwrap()
    };
    let post = |path: &str, body: &Value| {
        let r = http
            .post(format!("{}{path}", s.base))
            .bearer_auth("t")
            .json(body)
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap_or(Value::Null))
    };
    let row = vec![0.1f64; 10];
    let search = |k: Value, rows: usize, noise: Option<f64>| {
        let mut b = json!({"query_rows": vec![row.clone(); rows], "k": k});
        if let Some(n) = noise {
            b["noise_std"] = json!(n);
        }
        b
    };
    let sr = schema("SearchRequest");
    for (body, code) in [
        (search(json!(0), 1, None), "k_out_of_range"),
        (search(json!(101), 1, None), "k_out_of_range"),
        (search(json!(8), 0, None), "too_large"),
        (search(json!(8), 33, None), "too_large"),
        (search(json!(8), 1, Some(0.0)), "invalid_input"),
        (search(json!(8), 1, Some(1.5e6)), "invalid_input"),
    ] {
        assert!(!sr.is_valid(&body), "schema accepts {body}");
        let (status, v) = post("/api/v1/search", &body);
        assert_eq!(status, 422, "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
    }
    for body in [search(json!(1), 1, None), search(json!(50), 32, Some(1e6))] {
        assert!(sr.is_valid(&body), "schema refuses {body}");
        assert_eq!(post("/api/v1/search", &body).0, 200, "{body}");
    }
    let add = schema("AddItemsRequest");
    let item = |label: u32, n: usize| json!({"items": [{"label": label, "pixels": vec![0u8; n]}]});
    for (body, code) in [
        (item(10, 784), "invalid_input"),
        (item(1, 783), "dimension_mismatch"),
        (item(1, 785), "dimension_mismatch"),
        (json!({"items": []}), "too_large"),
    ] {
        assert!(!add.is_valid(&body), "schema accepts {body}");
        let (status, v) = post("/api/v1/gallery", &body);
        assert_eq!(status, 422, "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
    }
    assert!(add.is_valid(&item(9, 784)));
    assert_eq!(post("/api/v1/gallery", &item(9, 784)).0, 202);
    // Path parameters: the documented integer ranges.
    let param = |path: &str, name: &str| -> jsonschema::Validator {
        let p = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        jsonschema::validator_for(&p["schema"]).unwrap()
    };
    let id = param("/gallery/{id}", "id");
    assert!(id.is_valid(&json!(u64::MAX)) && !id.is_valid(&json!(-1)));
    let get = |path: &str| {
        http.get(format!("{}{path}", s.base))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(get("/api/v1/gallery/18446744073709551616"), 400);
    assert_eq!(get("/api/v1/gallery/-1"), 400);
    assert_eq!(get(&format!("/api/v1/gallery/{}", u64::MAX)), 404);
    let level = param("/blocks/{version}/{level}/{block}", "level");
    let block = param("/blocks/{version}/{level}/{block}", "block");
    assert!(level.is_valid(&json!(15)) && !level.is_valid(&json!(16)));
    let max = shared::params::limits::MAX_BLOCKS;
    assert!(block.is_valid(&json!(max - 1)) && !block.is_valid(&json!(max)));
    let version = {
        let d: Value = http
            .get(format!("{}/api/v1/partition", s.base))
            .send()
            .unwrap()
            .json()
            .unwrap();
        d["version"].as_str().unwrap().to_string()
    };
    assert_eq!(get(&format!("/api/v1/blocks/{version}/0/0")), 200);
    assert_eq!(get(&format!("/api/v1/blocks/{version}/16/0")), 404);
    assert_eq!(get(&format!("/api/v1/blocks/{version}/x/0")), 400);
    assert_eq!(get(&format!("/api/v1/blocks/{version}/0/{max}")), 404);
    drop(s);
    std::fs::remove_dir_all(store.parent().unwrap()).ok();
}

/// SIGTERM (what a service manager sends): the server stops serving, closes its store and exits
/// 0 with no panic — the block store's runtime is let go, not dropped inside the server's
/// runtime (which panicked at every stop) — and the next start reuses everything it stored.
#[test]
fn sigterm_exits_cleanly_and_the_store_reopens() {
    let store = temp_store("sigterm");
    let mut srv = start_server_logged(&args(&store), &[("RUST_LOG", "warn,server=info")]);
    let http = Client::new();
    assert_eq!(
        startup(&http, &srv.base)["features_computed"],
        GALLERY,
        "a fresh store"
    );
    srv.terminate();
    let status = srv
        .wait_exit(std::time::Duration::from_secs(30))
        .expect("the server exits within 30 s of SIGTERM");
    let log = srv.log_text();
    assert!(status.success(), "exit status {status:?}; log:\n{log}");
    assert!(log.contains("store closed"), "log:\n{log}");
    assert!(!log.contains("panicked"), "log:\n{log}");
    let again = start(&store);
    assert_startup(&startup(&http, &again.base), true, GALLERY, 0);
}
