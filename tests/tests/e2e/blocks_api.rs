//! Private block retrieval, server side: the partition document and the block files served by
//! the real server binary — validity, verification against the listed hashes, coverage of the
//! gallery, encodings, caching headers, errors, versions across a gallery change, and the
//! exactness of ranking over released blocks.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use privatemail_e2e::{gunzip, status_json, Server};
use publish::blocks::{decode, rank, Block};
use publish::centroids::{self, centroids_url, Centroids};
use publish::partition::{nearest_centroid, Overlap};
use publish::plan::validate_doc;
use reqwest::blocking::{Client, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::api::{ErrorResponse, PartitionDoc};

const TOKEN: &str = "blocks-token";

/// A 1,000-image gallery (levels B = 1, 8, 16, 32), 200 anchors, fresh store.
fn server(tag: &str, extra: &[&str]) -> Server {
    privatemail_e2e::small_server(tag, extra)
}

/// A client that shows the response as sent: no automatic gzip decoding (the workspace's
/// reqwest has the `gzip` feature, which the CLI uses), so the tests see `Content-Encoding`.
fn raw_client() -> Client {
    Client::builder().no_gzip().build().expect("client")
}

fn doc(http: &Client, base: &str) -> PartitionDoc {
    let r = http.get(format!("{base}/api/v1/partition")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().unwrap()
}

fn block_url(base: &str, d: &PartitionDoc, level: usize, block: usize) -> String {
    format!("{base}{}/{level}/{block}", d.blocks_url)
}

/// GET a block with gzip accepted; returns the uncompressed bytes and the wire length.
fn get_block(http: &Client, url: &str) -> (Vec<u8>, usize) {
    let r = http
        .get(url)
        .header("accept-encoding", "gzip, deflate, br")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{url}");
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let wire = r.bytes().unwrap();
    (gunzip(&wire), wire.len())
}

/// A level's centroids file, fetched like a block and verified against the document.
fn get_centroids(http: &Client, base: &str, d: &PartitionDoc, level: usize) -> Centroids {
    let (bytes, _) = get_block(http, &format!("{base}{}", centroids_url(d, level)));
    centroids::verify(d, level, &bytes).unwrap()
}

/// The levels are the default block counts `want`, then the hintless ranking's capped level
/// (`publish::publish::ranking_spec`), whose every block is within its row cap.
fn assert_default_levels_then_capped(d: &PartitionDoc, want: &[u32]) {
    let (capped, rest) = d.levels.split_last().expect("levels");
    let bs: Vec<u32> = rest.iter().map(|l| l.blocks).collect();
    assert_eq!(bs, want);
    match capped.overlap {
        Overlap::Capped { rows, .. } => {
            assert!(
                capped.sizes.iter().all(|&s| s <= rows),
                "{:?}",
                capped.sizes
            );
            assert_eq!(capped.sizes.len(), capped.blocks as usize);
        }
        o => panic!("the last level is {o:?}, not capped"),
    }
}

fn error_code(r: Response) -> (StatusCode, String, String) {
    let status = r.status();
    let body: ErrorResponse = r.json().expect("JSON error body");
    let code = serde_json::to_value(body.error.code).unwrap();
    (
        status,
        code.as_str().unwrap().to_string(),
        body.error.message,
    )
}

fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema =
        json!({ "$ref": format!("#/components/schemas/{name}"), "components": doc["components"] });
    jsonschema::validator_for(&schema).unwrap()
}

fn assert_valid(doc: &Value, name: &str, instance: &Value) {
    let errors: Vec<String> = validator(doc, name)
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?}");
}

/// The whole gallery, decoded from level 0.
fn whole(http: &Client, base: &str, d: &PartitionDoc) -> Block {
    assert!(d.levels[0].whole);
    let (bytes, _) = get_block(http, &block_url(base, d, 0, 0));
    decode(&bytes, Some(&d.levels[0].hashes[0])).unwrap()
}

#[test]
fn partition_is_valid_and_every_block_verifies_and_covers_the_gallery() {
    let srv = server("blocks-all", &[]);
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    validate_doc(&d).unwrap();
    assert_eq!(d.blocks_url, format!("/api/v1/blocks/{}", d.version));
    assert_eq!(
        (d.gallery_size, d.feature_dim, d.thumb_side),
        (1000, 64, 28)
    );
    assert_eq!(d.max_share, 0.25);
    assert!(d.allow_full_download);
    assert_default_levels_then_capped(&d, &[1, 8, 16, 32]);
    let all = whole(&http, base, &d);
    assert_eq!(all.len(), 1000);
    let gallery: BTreeSet<u64> = all.ids.iter().copied().collect();
    for (li, level) in d.levels.iter().enumerate() {
        let mut union = BTreeSet::new();
        for bi in 0..level.blocks as usize {
            let url = block_url(base, &d, li, bi);
            let (bytes, wire) = get_block(&http, &url);
            assert_eq!(wire as u64, level.transfer_bytes[bi], "{url}");
            assert_eq!(bytes.len() as u64, level.bytes[bi], "{url}");
            // Identity encoding: the same bytes.
            let plain = http.get(&url).send().unwrap();
            assert!(plain.headers().get("content-encoding").is_none());
            assert_eq!(plain.bytes().unwrap().as_ref(), bytes.as_slice());
            let b = decode(&bytes, Some(&level.hashes[bi])).unwrap();
            assert_eq!(b.len() as u32, level.sizes[bi]);
            assert_eq!((b.dim, b.thumb_side), (64, 28));
            union.extend(b.ids.iter().copied());
        }
        assert_eq!(union, gallery, "level {li} does not cover the gallery");
    }
    // The document and status against the OpenAPI description.
    let api: Value = http
        .get(format!("{base}/api/v1/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    for p in [
        "/partition",
        "/blocks/{version}/{level}/{block}",
        "/pir",
        "/pir/{version}/rank",
        "/pir/{version}/{db}/hint",
        "/pir/{version}/{db}",
    ] {
        assert!(api["paths"].get(p).is_some(), "{p} undocumented");
    }
    let raw: Value = http
        .get(format!("{base}/api/v1/partition"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_valid(&api, "Partition", &raw);
    let pir: Value = http
        .get(format!("{base}/api/v1/pir"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_valid(&api, "PirDoc", &pir);
    let status: Value = status_json(&http, base);
    assert!(status["pir"].is_object(), "{status}");
    assert_valid(&api, "Status", &status);
    assert_eq!(status["partition"]["version"], d.version);
    let blocks: Vec<u32> = d.levels.iter().map(|l| l.blocks).collect();
    assert_eq!(status["partition"]["levels"], json!(blocks));
    let err: Value = http
        .get(format!("{base}/api/v1/blocks/nope/0/0"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_valid(&api, "Error", &err);
    assert!(!validator(&api, "Partition").is_valid(&json!({"version": 1})));
}

#[test]
fn caching_headers_etags_head_and_range() {
    let srv = server("blocks-cache", &[]);
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    let url = block_url(base, &d, 2, 3);
    let hash = &d.levels[2].hashes[3];
    let etag = format!("\"{hash}\"");
    let r = http.get(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(h["etag"], etag.as_str());
    assert_eq!(h["vary"], "accept-encoding");
    let body = r.bytes().unwrap();
    assert_eq!(body.len() as u64, d.levels[2].bytes[3]);
    // Conditional requests: the ETag itself, weak form, in a list, `*` → 304 without a body.
    for inm in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"abc\", {etag}"),
        "*".to_string(),
    ] {
        let r = http
            .get(&url)
            .header("if-none-match", &inm)
            .header("accept-encoding", "gzip")
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{inm}");
        assert_eq!(r.headers()["etag"], etag.as_str());
        assert!(r.bytes().unwrap().is_empty());
    }
    // Garbage or another ETag simply does not match.
    for inm in ["garbage", "\"0000\"", "W/", "\u{7f}", ",,,"] {
        let r = http.get(&url).header("if-none-match", inm).send();
        let r = match r {
            Ok(r) => r,
            Err(_) => continue, // a header value reqwest refuses to send
        };
        assert_eq!(r.status(), StatusCode::OK, "{inm}");
        assert_eq!(r.bytes().unwrap(), body);
    }
    // Accept-Encoding negotiation.
    for (ae, gz) in [
        ("gzip", true),
        ("br, gzip;q=0.5", true),
        ("*", true),
        ("gzip;q=0", false),
        ("identity", false),
        ("br", false),
        ("*;q=0", false),
    ] {
        let r = http.get(&url).header("accept-encoding", ae).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers().get("content-encoding").is_some(), gz, "{ae}");
        let b = r.bytes().unwrap();
        let b = if gz { gunzip(&b) } else { b.to_vec() };
        assert_eq!(b, body.as_ref(), "{ae}");
    }
    // HEAD: the same headers, no body.
    for ae in ["gzip", "identity"] {
        let r = http
            .head(&url)
            .header("accept-encoding", ae)
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["etag"], etag.as_str());
        let len: u64 = r.headers()["content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let want = if ae == "gzip" {
            d.levels[2].transfer_bytes[3]
        } else {
            d.levels[2].bytes[3]
        };
        assert_eq!(len, want, "{ae}");
        assert!(r.bytes().unwrap().is_empty());
    }
    // Range is ignored: the whole file, 200.
    let r = http.get(&url).header("range", "bytes=0-9").send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["accept-ranges"], "none");
    assert_eq!(r.bytes().unwrap(), body);
    // The document: no-cache, ETag = version, 304 on revalidation, gzip when accepted.
    let r = http.get(format!("{base}/api/v1/partition")).send().unwrap();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let doc_etag = format!("\"{}\"", d.version);
    assert_eq!(r.headers()["etag"], doc_etag.as_str());
    let r = http
        .get(format!("{base}/api/v1/partition"))
        .header("if-none-match", &doc_etag)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    let r = http
        .get(format!("{base}/api/v1/partition"))
        .header("accept-encoding", "gzip")
        .send()
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let again: PartitionDoc = serde_json::from_slice(&gunzip(&r.bytes().unwrap())).unwrap();
    assert_eq!(again, d);
}

/// Each level's centroids file: served beside its blocks with the same caching rules (strong
/// ETag = its SHA-256, immutable, gzip when asked, 304 on a match), exactly the size the
/// document declares, verified by its hash (homes are pinned to the decoded centroids by
/// `shared`'s unit tests). Damaged copies are refused.
#[test]
fn centroids_files_are_served_like_blocks_and_verify() {
    let srv = server("blocks-centroids", &[]);
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    for (li, l) in d.levels.iter().enumerate() {
        let c = get_centroids(&http, base, &d, li);
        assert_eq!(c.len(), l.blocks as usize);
        assert_eq!(c.dim, d.feature_dim);
        assert_eq!(
            l.centroids_bytes,
            centroids::file_len(l.blocks as u64, d.feature_dim as u64).unwrap()
        );
    }
    let li = d.levels.len() - 1;
    let url = format!("{base}{}", centroids_url(&d, li));
    assert!(url.ends_with(&format!("/{li}/centroids")), "{url}");
    let etag = format!("\"{}\"", d.levels[li].centroids_hash);
    let r = http.get(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(h["etag"], etag.as_str());
    assert!(h.get("content-encoding").is_none());
    let plain = r.bytes().unwrap().to_vec();
    assert_eq!(plain.len() as u64, d.levels[li].centroids_bytes);
    let r = http
        .get(&url)
        .header("if-none-match", &etag)
        .header("accept-encoding", "gzip")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert!(r.bytes().unwrap().is_empty());
    // A damaged or lengthened copy, or another level's file, is refused with a typed error.
    let mut bad = plain.clone();
    bad[centroids::HEADER] ^= 1;
    assert!(matches!(
        centroids::verify(&d, li, &bad),
        Err(centroids::CentroidsError::HashMismatch { .. })
    ));
    let mut long = plain.clone();
    long.push(0);
    assert!(matches!(
        centroids::verify(&d, li, &long),
        Err(centroids::CentroidsError::Size { .. })
    ));
    assert!(centroids::verify(&d, li - 1, &plain).is_err());
    // No such level: 404; a name that is neither a number nor `centroids`: 400.
    let r = http
        .get(format!(
            "{base}{}/{}/centroids",
            d.blocks_url,
            d.levels.len()
        ))
        .send()
        .unwrap();
    assert_eq!(error_code(r).0, StatusCode::NOT_FOUND);
    let r = http
        .get(format!("{base}{}/{li}/centroid", d.blocks_url))
        .send()
        .unwrap();
    assert_eq!(error_code(r).0, StatusCode::BAD_REQUEST);
}

#[test]
fn bad_block_requests_get_typed_errors() {
    let srv = server("blocks-bad", &[]);
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    let v = &d.version;
    let get = |p: String| {
        http.get(format!("{base}/api/v1/blocks/{p}"))
            .send()
            .unwrap()
    };
    let not_found = |p: String| {
        let (status, code, msg) = error_code(get(p.clone()));
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{p}"
        );
        assert!(msg.contains(v.as_str()), "{p}: {msg}");
    };
    not_found(format!("{v}/{}/0", d.levels.len())); // level out of range
    not_found(format!("{v}/0/1")); // block out of range (the whole level has one)
    not_found(format!("{v}/3/32"));
    not_found(format!("{v}/99999999999999999999999/0")); // too big for any index
    not_found("0123456789abcdef/1/0".to_string()); // a version never served
    not_found(format!("{}/1/0", "f".repeat(300)));
    for p in [
        format!("{v}/one/0"),
        format!("{v}/1/-1"),
        format!("{v}/1/1.0"),
        format!("{v}/1/%20"),
        format!("{v}/1/0x1"),
    ] {
        let (status, code, _) = error_code(get(p.clone()));
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_input"),
            "{p}"
        );
    }
    // Wrong shapes of the path fall through to the API's JSON 404.
    for p in [format!("{v}/1"), format!("{v}/1/0/2"), String::new()] {
        let (status, code, _) = error_code(get(p.clone()));
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{p}"
        );
    }
    // Still healthy.
    let (b, _) = get_block(&http, &block_url(base, &d, 1, 0));
    decode(&b, Some(&d.levels[1].hashes[0])).unwrap();
}

fn add_item(http: &Client, base: &str, image: usize) {
    privatemail_e2e::add_test_image(http, base, TOKEN, image);
}

/// Polls `/status` until the partition's version differs from `old`.
fn wait_for_new_partition(http: &Client, base: &str, old: &str) -> PartitionDoc {
    let t = Instant::now();
    loop {
        let s: Value = status_json(http, base);
        if s["partition"]["version"] != old && s["reembedding"] == false {
            let d = doc(http, base);
            assert_ne!(d.version, old);
            return d;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no new partition: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_gallery_change_publishes_a_new_version_and_keeps_the_old_one_for_the_grace_period() {
    let srv = server("blocks-grace", &["--admin-token", TOKEN]);
    let http = raw_client();
    let base = &srv.base;
    let old = doc(&http, base);
    let old_url = block_url(base, &old, 1, 2);
    let (old_bytes, _) = get_block(&http, &old_url);
    add_item(&http, base, 9000);
    let new = wait_for_new_partition(&http, base, &old.version);
    assert_eq!(new.gallery_size, old.gallery_size + 1);
    validate_doc(&new).unwrap();
    // The old version's blocks are still served, unchanged.
    let (again, _) = get_block(&http, &old_url);
    assert_eq!(again, old_bytes);
    decode(&again, Some(&old.levels[1].hashes[2])).unwrap();
    let (b, _) = get_block(&http, &block_url(base, &new, 0, 0));
    let whole = decode(&b, Some(&new.levels[0].hashes[0])).unwrap();
    assert_eq!(whole.len(), 1001);
    let s: Value = status_json(&http, base);
    assert_eq!(s["partition"]["retired"], 1);
    assert_eq!(s["partition"]["version"], new.version);
    // PIR databases live and expire with their version: the new document names the new
    // version, and the old version still answers queries during the grace period.
    let pir: publish::pir::doc::PirDoc = http
        .get(format!("{base}/api/v1/pir"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(pir.version, new.version);
    assert_eq!(pir.thumbs.shape.records, 1001);
    let old_answer = format!("{base}/api/v1/pir/{}/thumbs", old.version);
    let hint = http
        .get(format!("{old_answer}/hint"))
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    // The hint's rows are the column's width (`Shape::hint_bytes`: N entries a row).
    let width = ::pir::layout::decode_hint(&hint).unwrap().len() / ::pir::lwe::LWE_N;
    assert!(width > 0, "the old version's hint is served");
    // The old version's shape: its 1,000 thumbnails in columns of that width.
    let shape = ::pir::layout::Shape::new(publish::thumbs::packed_len(28), 1000, width).unwrap();
    // A query of arbitrary values, asked twice: after each late answer the old version's
    // mapped pages leave the resident set (`Partitions::after_answer`), and the second answer
    // reads them back from its files — the same bytes, so the same answer.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let values: Vec<u32> = (0..shape.cols)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u32) >> shape.query_drop() << shape.query_drop()
        })
        .collect();
    let ask = || {
        let r = http
            .post(&old_answer)
            .header("content-type", "application/octet-stream")
            .body(shape.encode_query(&values))
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "the old version still answers");
        r.bytes().unwrap()
    };
    let first = ask();
    // One answer (`Shape::answer_bytes`).
    assert_eq!(first.len(), shape.answer_bytes());
    assert!(first.iter().any(|&b| b != 0), "the query selects data");
    assert_eq!(ask(), first, "the same answer after the pages were let go");
}

#[test]
fn an_expired_version_is_gone_and_names_the_current_one() {
    let srv = server(
        "blocks-gone",
        &["--admin-token", TOKEN, "--partition-grace-secs", "1"],
    );
    let http = raw_client();
    let base = &srv.base;
    let old = doc(&http, base);
    add_item(&http, base, 9001);
    let new = wait_for_new_partition(&http, base, &old.version);
    std::thread::sleep(Duration::from_millis(1_500));
    let (status, code, msg) = error_code(http.get(block_url(base, &old, 1, 0)).send().unwrap());
    assert_eq!((status, code.as_str()), (StatusCode::GONE, "gone"));
    assert!(msg.contains(&new.version), "{msg}");
    // A version never served is still a 404, not a 410.
    let (status, code, _) = error_code(
        http.get(format!("{base}/api/v1/blocks/00000000000000ff/1/0"))
            .send()
            .unwrap(),
    );
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    // The current version is served.
    get_block(&http, &block_url(base, &new, 1, 0));
}

#[test]
fn full_download_can_be_turned_off() {
    let srv = server(
        "blocks-nofull",
        &["--allow-full-download", "false", "--max-share", "0.5"],
    );
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    validate_doc(&d).unwrap();
    assert!(!d.allow_full_download);
    assert_eq!(d.max_share, 0.5);
    assert!(d.levels.iter().all(|l| !l.whole && l.blocks > 1));
    assert_default_levels_then_capped(&d, &[8, 16, 32]);
    // No level holds the whole gallery in one block, and one past the last level is a 404.
    let (status, code, _) = error_code(
        http.get(block_url(base, &d, d.levels.len(), 0))
            .send()
            .unwrap(),
    );
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    for bi in 0..8 {
        let (b, _) = get_block(&http, &block_url(base, &d, 0, bi));
        assert!(decode(&b, Some(&d.levels[0].hashes[bi])).unwrap().len() < 1000);
    }
}

/// Ranking over released blocks is the exact search whenever the pool holds the true top-k:
/// for held-out images, the true block at the finest level plus two other blocks rank exactly
/// like the whole gallery (the same dequantised features) when they contain its top 8.
#[test]
fn ranking_released_blocks_matches_the_whole_gallery() {
    let srv = server("blocks-rank", &[]);
    let http = raw_client();
    let base = &srv.base;
    let d = doc(&http, base);
    let all = whole(&http, base, &d);
    let li = d.levels.len() - 1;
    let level = &d.levels[li];
    let centroids = get_centroids(&http, base, &d, li).values;
    let blocks: Vec<Block> = (0..level.blocks as usize)
        .map(|bi| {
            let (b, _) = get_block(&http, &block_url(base, &d, li, bi));
            decode(&b, Some(&level.hashes[bi])).unwrap()
        })
        .collect();
    let (mut contained, mut tried) = (0, 0);
    for i in 5000..5060 {
        let (q, _) = privatemail_e2e::client_query(i);
        let q: Vec<f32> = q.iter().map(|&v| v as f32).collect();
        let truth: Vec<u64> = rank(&q, std::slice::from_ref(&all), 8)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        let own = nearest_centroid(&centroids, d.feature_dim, &q) as usize;
        let n = blocks.len();
        let pool = vec![
            blocks[own].clone(),
            blocks[(own + 1 + i % (n - 1)) % n].clone(),
            blocks[(own + 1 + (i * 7) % (n - 1)) % n].clone(),
        ];
        let ids: BTreeSet<u64> = pool.iter().flat_map(|b| b.ids.iter().copied()).collect();
        tried += 1;
        if truth.iter().all(|id| ids.contains(id)) {
            contained += 1;
            let got: Vec<u64> = rank(&q, &pool, 8).unwrap().iter().map(|h| h.id).collect();
            assert_eq!(got, truth, "query {i}");
        }
    }
    eprintln!("{contained} of {tried} pools held the whole top 8");
    assert!(
        contained * 2 >= tried,
        "only {contained} of {tried} pools held the top 8"
    );
}
