//! Private block retrieval through the wasm `Client` in headless Chromium: the plan is a function
//! of public data only (two photos, one plan), a release is L distinct URLs of one level in a
//! uniformly random order with the true block's position uniform, the ranking equals the native
//! `publish::blocks::rank`, hashes are checked, and bad inputs are errors, not panics.

use privatemail_client_wasm::{compose_budget, Client};
use serde_json::Value;
use shared::api::PartitionDoc;
use wasm_bindgen_test::*;

use crate::common::{self, CLASS_WEIGHTS, FAMILIARITY, WEIGHTS};
const FIXTURE: &str = include_str!("../fixtures/parity.json");

fn image(k: usize) -> Vec<u8> {
    let cases: Vec<Value> = serde_json::from_str(FIXTURE).unwrap();
    serde_json::from_value(cases[k]["pixels"].clone()).unwrap()
}

fn client() -> Client {
    let (config, anchors, _, _) = common::server_json(60, 0x2545_f491_4f6c_dd1d);
    let mut client = Client::new(WEIGHTS, CLASS_WEIGHTS, &config, &anchors).unwrap();
    client.set_familiarity_model(FAMILIARITY).unwrap();
    client
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

/// A plan at ε = 8 that releases three blocks of the finest level (a Pareto plan of that level
/// with L set to 3: `release_blocks` takes any L of a level).
fn plan_with_three_or_more(c: &Client) -> Value {
    let plans = json(&c.plans(8.0).unwrap());
    let mut plan = plans
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["whole"].as_bool().unwrap())
        .max_by_key(|p| p["blocks"].as_u64().unwrap())
        .expect("a block plan")
        .clone();
    assert!(plan["blocks"].as_u64().unwrap() > 3);
    plan["size"] = 3.into();
    plan["epsilon"] = 8.0.into();
    plan
}

/// Native ground truth for the test: the photo's true block at a level (the level's
/// centroids file decoded natively).
fn true_block(doc: &PartitionDoc, files: &[Vec<Vec<u8>>], level: usize, pixels: &[u8]) -> u32 {
    let model = embed::model::Model::from_bytes(WEIGHTS).unwrap();
    let q = model.search_features(pixels).unwrap();
    let c = publish::centroids::verify(doc, level, files[level].last().unwrap()).unwrap();
    publish::partition::nearest_centroid(&c.values, doc.feature_dim, &q)
}

/// Give the client `level`'s centroids as the page does: it asks for them (the URL and the
/// declared sizes), takes the verified file, and asks no more.
fn load_centroids(c: &mut Client, files: &[Vec<Vec<u8>>], level: usize) {
    let req = json(&c.centroids_request(level).unwrap().expect("not loaded yet"));
    assert_eq!(req["url"], format!("/b/v/{level}/centroids"));
    let bytes = files[level].last().unwrap();
    assert_eq!(req["max_bytes"].as_u64().unwrap(), bytes.len() as u64);
    c.set_centroids(level, bytes).unwrap();
    assert!(c.centroids_request(level).unwrap().is_none());
}

#[wasm_bindgen_test]
fn the_plan_is_the_same_for_two_photos_and_before_any_photo() {
    let (doc, _) = common::partition(700, 7, true);
    let mut c = client();
    c.load_partition(&doc).unwrap();
    let budgets = [64.0 * 1024.0, 256.0 * 1024.0, 4.0 * 1024.0 * 1024.0];
    let before: Vec<String> = budgets.iter().map(|&b| c.plan(8.0, b).unwrap()).collect();
    let curve = c.plans(8.0).unwrap();
    let mut seen = Vec::new();
    for k in [0, 1] {
        let info = json(&c.load_pixels(&image(k)).unwrap());
        seen.push(info["label"].clone());
        for (b, want) in budgets.iter().zip(&before) {
            assert_eq!(&c.plan(8.0, *b).unwrap(), want);
        }
        assert_eq!(c.plans(8.0).unwrap(), curve);
    }
    assert_ne!(seen[0], seen[1], "two photos of different classes");
    // The curve is cheapest first and improves with bytes; a large budget takes the whole
    // gallery (nothing released).
    let curve = json(&curve);
    let curve = curve.as_array().unwrap();
    assert!(curve.windows(2).all(|w| {
        w[0]["max_bytes"].as_u64() <= w[1]["max_bytes"].as_u64()
            && w[0]["predicted_fidelity"].as_f64() < w[1]["predicted_fidelity"].as_f64()
    }));
    // Each budget is a ceiling on the most its plan can download, and the plan says why.
    for (b, p) in budgets.iter().zip(&before) {
        let p = json(p);
        assert!(p["max_bytes"].as_u64().unwrap() as f64 <= *b, "{p}");
        assert_eq!(p["budget"].as_u64().unwrap() as f64, b.floor());
        assert!(p["why"]["kind"].is_string(), "{p}");
    }
    let big = json(&before[2]);
    assert_eq!(big["whole"], true);
    assert_eq!(big["epsilon"], 0.0);
    let whole = json(&c.whole_plan().unwrap());
    assert_eq!(whole["whole"], true);
}

#[wasm_bindgen_test]
fn a_release_is_l_distinct_urls_of_one_level_with_the_true_block_uniformly_placed() {
    let (doc_json, files) = common::partition(700, 11, true);
    let doc: PartitionDoc = serde_json::from_str(&doc_json).unwrap();
    let mut c = client();
    c.load_partition(&doc_json).unwrap();
    c.load_pixels(&image(2)).unwrap();
    let plan = plan_with_three_or_more(&c);
    let (level, l) = (
        plan["level"].as_u64().unwrap() as usize,
        plan["size"].as_u64().unwrap() as usize,
    );
    // A release needs the level's centroids; a damaged file is refused and nothing is kept.
    let e = common::message(c.release_blocks(&plan.to_string()).unwrap_err());
    assert!(e.contains("centroids"), "{e}");
    let mut bad = files[level].last().unwrap().clone();
    bad[20] ^= 1;
    let e = common::message(c.set_centroids(level, &bad).unwrap_err());
    assert!(e.contains("centroids"), "{e}");
    assert!(c
        .set_centroids(level, files[level - 1].last().unwrap())
        .is_err());
    bad.pop();
    assert!(c.set_centroids(level, &bad).is_err());
    assert!(c.centroids_request(level).unwrap().is_some());
    load_centroids(&mut c, &files, level);
    // Reloading the same version keeps them.
    c.load_partition(&doc_json).unwrap();
    assert!(c.centroids_request(level).unwrap().is_none());
    let truth = true_block(&doc, &files, level, &image(2));
    let trials = 300 * l;
    let mut counts = vec![0usize; l];
    let mut missed = 0;
    let mut first = vec![0usize; doc.levels[level].blocks as usize];
    let plan_json = plan.to_string();
    for _ in 0..trials {
        let released = c.release_blocks(&plan_json).unwrap();
        let out = common::with_urls(&mut c, &released);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["epsilon", "max_bytes", "max_wire_bytes", "receipt", "urls"]
        );
        assert_eq!(out["epsilon"], 8.0);
        assert_eq!(out["receipt"]["mechanism"], "block_subset");
        assert_eq!(out["receipt"]["zcdp_rho"], 32.0);
        let urls = out["urls"].as_array().unwrap();
        assert_eq!(urls.len(), l);
        // Each URL's published sizes (public: read from the document for that block), which
        // the page holds the download to.
        for (i, u) in urls.iter().enumerate() {
            let (lv, b) = common::level_block(u.as_str().unwrap());
            let d = &doc.levels[lv];
            assert_eq!(out["max_bytes"][i], d.bytes[b as usize]);
            assert_eq!(out["max_wire_bytes"][i], d.transfer_bytes[b as usize]);
        }
        let blocks: Vec<(usize, u32)> = urls
            .iter()
            .map(|u| common::level_block(u.as_str().unwrap()))
            .collect();
        assert!(urls
            .iter()
            .all(|u| u.as_str().unwrap().starts_with("/b/v/")));
        assert!(blocks.iter().all(|&(lv, _)| lv == level));
        let mut ids: Vec<u32> = blocks.iter().map(|b| b.1).collect();
        first[ids[0] as usize] += 1;
        match ids.iter().position(|&b| b == truth) {
            Some(p) => counts[p] += 1,
            None => missed += 1,
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), l, "distinct blocks");
    }
    // ε = 8: the true block is in almost every release; its position is uniform over 0..L.
    assert!(missed * 50 < trials, "missed {missed} of {trials}");
    let n: usize = counts.iter().sum();
    let e = n as f64 / l as f64;
    let chi2: f64 = counts.iter().map(|&o| (o as f64 - e).powi(2) / e).sum();
    assert!(
        chi2 < common::CHI2_999[l - 1],
        "positions {counts:?}, chi2 {chi2}"
    );
    // The first URL is not always the true block: every position is used.
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    // The receipts compose with the other protocols' in the page's budget.
    // The ledger is called with the receipt before the URLs are handed out; a ledger that
    // cannot store gets none, and the release stays unsent.
    let released = json(&c.release_blocks(&plan_json).unwrap());
    let e = common::message(c.block_requests(&common::full_ledger()).unwrap_err());
    assert!(e.contains("could not be recorded"), "{e}");
    let kept = js_sys::Array::new();
    let record = wasm_bindgen::closure::Closure::<dyn FnMut(String)>::new({
        let kept = kept.clone();
        move |r: String| {
            kept.push(&r.into());
        }
    });
    let reqs = json(
        &c.block_requests(wasm_bindgen::JsCast::unchecked_ref::<js_sys::Function>(
            record.as_ref(),
        ))
        .unwrap(),
    );
    assert_eq!(reqs["urls"].as_array().unwrap().len(), l);
    assert_eq!(kept.length(), 1);
    let recorded = json(&kept.get(0).as_string().unwrap());
    assert_eq!(recorded, released["receipt"]);
    assert!(
        c.block_requests(&common::ledger()).is_err(),
        "handed out once"
    );
    let r = released["receipt"].clone();
    let total = json(&compose_budget(&Value::Array(vec![r.clone(), r]).to_string(), 1e-5).unwrap());
    assert!((total["zcdp_rho"].as_f64().unwrap() - 64.0).abs() < 1e-9);
    assert!(total["epsilon"].as_f64().unwrap() <= 16.0 + 1e-9);

    // The whole gallery and an all-blocks plan release nothing: every block, no receipt.
    let whole = c.whole_plan().unwrap();
    let released = c.release_blocks(&whole).unwrap();
    let out = common::with_urls(&mut c, &released);
    assert_eq!(out["urls"], serde_json::json!(["/b/v/0/0"]));
    assert_eq!(out["receipt"], Value::Null);
    assert_eq!(out["epsilon"], 0.0);
    let mut all = plan.clone();
    let b = doc.levels[level].blocks;
    all["size"] = b.into();
    all["epsilon"] = 0.0.into();
    let released = c.release_blocks(&all.to_string()).unwrap();
    let out = common::with_urls(&mut c, &released);
    assert_eq!(out["urls"].as_array().unwrap().len(), b as usize);
    assert_eq!(out["receipt"], Value::Null);
}

#[wasm_bindgen_test]
fn ranking_the_released_blocks_equals_the_native_ranking_after_the_hash_check() {
    let (doc_json, files) = common::partition(700, 13, true);
    let doc: PartitionDoc = serde_json::from_str(&doc_json).unwrap();
    let mut c = client();
    c.load_partition(&doc_json).unwrap();
    assert!(c.rank_blocks(vec![], 8).is_err(), "nothing released yet");
    let level = plan_with_three_or_more(&c)["level"].as_u64().unwrap() as usize;
    load_centroids(&mut c, &files, level);
    let model = embed::model::Model::from_bytes(WEIGHTS).unwrap();
    for (k, plan) in [
        (1, plan_with_three_or_more(&c).to_string()),
        (4, c.whole_plan().unwrap()),
    ] {
        c.load_pixels(&image(k)).unwrap();
        let released = c.release_blocks(&plan).unwrap();
        assert!(
            c.rank_blocks(vec![], 8).is_err(),
            "no request was handed out yet"
        );
        let out = common::with_urls(&mut c, &released);
        let urls = out["urls"].as_array().unwrap();
        // The same release each time (a search is ranked once: each bad answer below ends it).
        let again = |c: &mut Client| {
            c.release_blocks(&plan).unwrap();
            let reqs = json(&c.block_requests(&common::ledger()).unwrap());
            reqs["urls"].clone()
        };
        let got = json(&c.rank_blocks(common::fetch(urls, &files), 8).unwrap());
        // Native: the same features, the same blocks in the same order.
        let q = model.search_features(&image(k)).unwrap();
        let blocks: Vec<_> = urls
            .iter()
            .map(|u| {
                let (lv, b) = common::level_block(u.as_str().unwrap());
                publish::blocks::decode(&files[lv][b as usize], None).unwrap()
            })
            .collect();
        let want = publish::blocks::rank(&q, &blocks, 8).unwrap();
        let results = got["results"].as_array().unwrap();
        assert_eq!(results.len(), 8);
        for (r, h) in results.iter().zip(&want) {
            assert_eq!(r["id"].as_u64().unwrap(), h.id);
            assert_eq!(r["label"].as_u64().unwrap(), h.label as u64);
            assert_eq!(r["distance"].as_f64().unwrap() as f32, h.distance);
            let thumb: Vec<u8> = serde_json::from_value(r["thumbnail"].clone()).unwrap();
            assert_eq!(thumb, blocks[h.block].thumbnail(h.index));
            assert!(!r["class_name"].as_str().unwrap().is_empty());
        }
        assert_eq!(got["thumb_side"], 28);
        assert_eq!(got["blocks"].as_u64().unwrap() as usize, urls.len());
        // The release, sorted (the map's rings), and the photo's own block (native truth).
        let (level, _) = common::level_block(urls[0].as_str().unwrap());
        let mut released: Vec<u32> = urls
            .iter()
            .map(|u| common::level_block(u.as_str().unwrap()).1)
            .collect();
        released.sort_unstable();
        assert_eq!(got["level"].as_u64().unwrap() as usize, level);
        assert_eq!(got["released"], serde_json::json!(released));
        if doc.levels[level].whole {
            // Nothing released, no centroids loaded for it: no own block to show.
            assert_eq!(got["own_block"], Value::Null);
        } else {
            assert_eq!(
                got["own_block"].as_u64().unwrap() as u32,
                true_block(&doc, &files, level, &image(k))
            );
        }
        // The whole gallery's top 8 is the non-private top 8.
        if urls.len() == 1 {
            assert_eq!(got["pool_items"], 700);
        }
        // A block whose bytes differ from the published hash is refused, in plain words.
        let mut tampered = common::fetch(urls, &files);
        let bytes = tampered[0].to_vec();
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        tampered[0] = js_sys::Uint8Array::from(&bad[..]);
        assert!(
            c.rank_blocks(tampered.clone(), 8).is_err(),
            "ranked once: the search is over"
        );
        let urls = again(&mut c);
        let urls = urls.as_array().unwrap();
        let mut tampered = common::fetch(urls, &files);
        let bytes = tampered[0].to_vec();
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        tampered[0] = js_sys::Uint8Array::from(&bad[..]);
        let e = common::message(c.rank_blocks(tampered, 8).unwrap_err());
        assert!(e.contains("fingerprint"), "{e}");
        // Too few blocks, a truncated block, k out of range.
        let urls = again(&mut c);
        let urls = urls.as_array().unwrap();
        let mut few = common::fetch(urls, &files);
        few.pop();
        if !few.is_empty() {
            assert!(c.rank_blocks(few, 8).is_err());
        }
        let urls = again(&mut c);
        let urls = urls.as_array().unwrap();
        let mut cut = common::fetch(urls, &files);
        let bytes = cut[0].to_vec();
        cut[0] = js_sys::Uint8Array::from(&bytes[..bytes.len() / 2]);
        assert!(c.rank_blocks(cut, 8).is_err());
        for k in [0, 1000] {
            let urls = again(&mut c);
            let urls = urls.as_array().unwrap();
            assert!(c.rank_blocks(common::fetch(urls, &files), k).is_err());
        }
    }
    let _ = doc;
}

#[wasm_bindgen_test]
fn the_block_map_and_the_disclosure_equal_the_native_ones() {
    let (doc_json, files) = common::partition(700, 19, true);
    let doc: PartitionDoc = serde_json::from_str(&doc_json).unwrap();
    let mut c = client();
    assert!(c.block_map(0).is_err(), "no partition yet");
    c.load_partition(&doc_json).unwrap();
    for (level, l) in doc.levels.iter().enumerate() {
        assert!(c.block_map(level).is_err(), "centroids not loaded yet");
        load_centroids(&mut c, &files, level);
        let got = json(&c.block_map(level).unwrap());
        let flat = publish::centroids::verify(&doc, level, files[level].last().unwrap())
            .unwrap()
            .values;
        let want = publish::map::block_map(&flat, doc.feature_dim).unwrap();
        assert_eq!(got["level"].as_u64().unwrap() as usize, level);
        let points: Vec<[f64; 2]> = serde_json::from_value(got["points"].clone()).unwrap();
        assert_eq!(points.len(), l.blocks as usize);
        // The same map (up to the last bit JSON's decimal round trip may change).
        for (p, w) in points.iter().zip(&want) {
            assert!(
                (p[0] - w[0]).abs() < 1e-12 && (p[1] - w[1]).abs() < 1e-12,
                "{p:?} {w:?}"
            );
        }
        assert_eq!(got["sizes"], serde_json::json!(l.sizes));
    }
    assert!(c.block_map(doc.levels.len()).is_err());
    // What a plan tells the server: the native figures for a block plan and the whole gallery.
    for plan in [plan_with_three_or_more(&c), json(&c.whole_plan().unwrap())] {
        let got = json(&privatemail_client_wasm::disclosure(&plan.to_string()).unwrap());
        let native: publish::plan::Plan = serde_json::from_value(plan).unwrap();
        let want = publish::plan::disclosure(&native);
        let want = serde_json::to_value(want).unwrap();
        for key in ["learns_nothing", "regions", "of"] {
            assert_eq!(got[key], want[key], "{key}");
        }
        for key in ["epsilon", "yes_no", "posterior", "prior"] {
            let (g, w) = (got[key].as_f64().unwrap(), want[key].as_f64().unwrap());
            assert!((g - w).abs() < 1e-12, "{key}: {g} {w}");
        }
        if native.whole {
            assert_eq!(got["learns_nothing"], true);
        } else {
            let p = dp::subset::inclusion_probability(native.blocks, native.size, 8.0);
            assert!((got["posterior"].as_f64().unwrap() - p).abs() < 1e-12);
            assert_eq!(got["regions"], 3);
        }
    }
    assert!(privatemail_client_wasm::disclosure("{").is_err());
    assert!((privatemail_client_wasm::yes_no_bound(8.0, 0.0) - 0.999_665).abs() < 1e-6);
    assert_eq!(privatemail_client_wasm::yes_no_bound(0.0, 0.0), 0.5);
}

#[wasm_bindgen_test]
fn bad_partitions_plans_and_arguments_are_errors_not_panics() {
    let (doc_json, files) = common::partition(1000, 17, false);
    let mut c = client();
    // Nothing loaded.
    assert!(c.plan(8.0, 1e6).is_err());
    assert!(c.plans(8.0).is_err());
    assert!(c.whole_plan().is_err());
    assert!(c.release_blocks("{}").is_err());
    // Malformed or hostile documents.
    assert!(c.load_partition("{").is_err());
    assert!(c.load_partition("[]").is_err());
    let mut doc: Value = json(&doc_json);
    doc["levels"][1]["centroids_bytes"] = 17.into();
    assert!(c.load_partition(&doc.to_string()).is_err());
    let mut doc: Value = json(&doc_json);
    doc["levels"][1]["centroids_hash"] = "zz".into();
    assert!(c.load_partition(&doc.to_string()).is_err());
    let mut doc: Value = json(&doc_json);
    doc["levels"][1]["hashes"][0] = "zz".into();
    assert!(c.load_partition(&doc.to_string()).is_err());
    // Declared sizes that disagree with the block format, and a document past the size limit.
    let mut doc: Value = json(&doc_json);
    doc["levels"][1]["bytes"][0] = 1.into();
    let e = common::message(c.load_partition(&doc.to_string()).unwrap_err());
    assert!(e.contains("declares"), "{e}");
    let limits = json(&privatemail_client_wasm::limits());
    let max = limits["max_partition_doc_bytes"].as_u64().unwrap();
    assert_eq!(max, shared::params::limits::MAX_PARTITION_DOC_BYTES);
    let huge = format!("{doc_json}{}", " ".repeat(max as usize));
    let e = common::message(c.load_partition(&huge).unwrap_err());
    assert!(e.contains("larger than"), "{e}");
    let mut doc: Value = json(&doc_json);
    doc["feature_dim"] = 3.into();
    let e = common::message(c.load_partition(&doc.to_string()).unwrap_err());
    assert!(!e.is_empty());
    c.load_partition(&doc_json).unwrap();
    // Bad ε and byte budgets.
    for eps in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e6] {
        assert!(c.plan(eps, 1e6).is_err(), "{eps}");
        assert!(c.plans(eps).is_err(), "{eps}");
    }
    for bytes in [0.0, -5.0, f64::NAN, f64::INFINITY, 1.0] {
        assert!(c.plan(8.0, bytes).is_err(), "{bytes}");
    }
    // The operator does not allow the whole gallery here.
    let e = common::message(c.whole_plan().unwrap_err());
    assert!(e.contains("whole gallery"), "{e}");
    let plan = json(&c.plan(8.0, 1e9).unwrap());
    assert_eq!(plan["whole"], false);
    // No photo yet.
    assert!(c.release_blocks(&plan.to_string()).is_err());
    c.load_pixels(&image(0)).unwrap();
    assert!(c.centroids_request(99).is_err());
    let level = plan["level"].as_u64().unwrap() as usize;
    if plan["size"] != plan["blocks"] {
        load_centroids(&mut c, &files, level);
    }
    c.release_blocks(&plan.to_string()).unwrap();
    // Plans that do not match the partition, or carry a bad ε.
    assert!(c.release_blocks("not json").is_err());
    for (field, value) in [
        ("level", Value::from(99)),
        ("blocks", Value::from(3)),
        ("size", Value::from(0)),
        ("size", Value::from(10_000)),
        ("whole", Value::from(true)),
        ("epsilon", Value::from(0.0)),
        ("epsilon", Value::from(-2.0)),
        ("epsilon", Value::from(1e9)),
        ("epsilon", Value::Null),
    ] {
        let mut p = plan.clone();
        p[field] = value.clone();
        if p["size"] == p["blocks"] && field == "epsilon" {
            continue; // all blocks: nothing released, ε unused
        }
        assert!(
            c.release_blocks(&p.to_string()).is_err(),
            "{field} = {value}"
        );
    }
    let mut whole = plan.clone();
    whole["level"] = 0.into();
    whole["blocks"] = 1.into();
    whole["size"] = 1.into();
    whole["whole"] = true.into();
    assert!(c.release_blocks(&whole.to_string()).is_err());
}
