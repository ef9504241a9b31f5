//! Private information retrieval against the real server binary: the document, the hint and
//! table files, answers that decode to exactly the published records, the exact top 8 with
//! verified thumbnails, requests that do not depend on the photo, and typed errors.

use ::pir::client::Hint;
use client::pir_search::{
    plan, rank_level, rank_query, rank_table, thumbs_decode, thumbs_query, PirRanking, Ranked,
    ThumbCode,
};
use privatemail_e2e::{client_query, get_json, small_server, status_json, Server};
use publish::blocks::{decode, rank};
use publish::partition::{nearest_centroid, Overlap};
use publish::pir::doc::PirDoc;
use publish::pir::hintless::{self, ScoresKeys, ScoresPublic};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use shared::api::{ErrorResponse, PartitionDoc};

/// The small test galleries' thumbnails: 3-bit records of 28×28.
const RAW28: ThumbCode<'static> = ThumbCode::Raw { side: 28 };

fn server(tag: &str) -> Server {
    small_server(tag, &[])
}

fn docs(http: &Client, base: &str) -> (PartitionDoc, PirDoc) {
    let r = http.get(format!("{base}/api/v1/pir")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    (get_json(http, base, "/api/v1/partition"), r.json().unwrap())
}

fn get(http: &Client, url: &str) -> Vec<u8> {
    let r = http.get(url).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{url}");
    r.bytes().unwrap().to_vec()
}

fn post(http: &Client, url: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let r = http
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .unwrap();
    (r.status(), r.bytes().unwrap().to_vec())
}

fn hint(http: &Client, base: &str, pir: &PirDoc, db: &str) -> Hint {
    let d = if db == "thumbs" {
        &pir.thumbs
    } else {
        pir.levels[db.parse::<usize>().unwrap()].as_ref().unwrap()
    };
    let bytes = get(http, &format!("{base}{}/{db}/hint", pir.answer_url));
    Hint::from_bytes(&d.shape, &bytes, &d.hint_sha256).unwrap()
}

fn features(i: usize) -> Vec<f32> {
    client_query(i).0.iter().map(|&v| v as f32).collect()
}

/// The whole gallery as one block (the partition's whole level), checked.
fn whole(http: &Client, base: &str, part: &PartitionDoc) -> publish::blocks::Block {
    let l = part
        .levels
        .iter()
        .position(|l| l.whole)
        .expect("a whole level");
    let bytes = get(http, &format!("{base}{}/{l}/0", part.blocks_url));
    decode(&bytes, Some(&part.levels[l].hashes[0])).unwrap()
}

/// One thumbnail round: exactly 8 queries; returns the request body size and the answer.
fn thumbs(
    http: &Client,
    base: &str,
    part: &PartitionDoc,
    pir: &PirDoc,
    h: &Hint,
    ranked: &Ranked,
    rng: &mut ChaCha20Rng,
) -> (usize, Vec<Vec<u8>>) {
    let (body, pending) = thumbs_query(part, pir, Some(ranked), 8, rng).unwrap();
    let n = body.len();
    let (st, answer) = post(http, &format!("{base}{}/thumbs", pir.answer_url), body);
    assert_eq!(st, StatusCode::OK);
    (
        n,
        thumbs_decode(&pending, h, &answer, ranked, &RAW28).unwrap(),
    )
}

#[test]
fn table_and_level_searches_are_exact_and_verified() {
    let srv = server("pir-exact");
    let (base, http) = (&srv.base, Client::new());
    let (part, pir) = docs(&http, base);
    publish::pir::doc::validate(&pir, part.gallery_size, part.levels.len()).unwrap();
    assert_eq!(pir.version, part.version);
    let th = hint(&http, base, &pir, "thumbs");
    let mut rng = ChaCha20Rng::seed_from_u64(5);

    // Table plan: exact over the whole gallery; thumbnails are the gallery's pixels.
    let p = plan(&part, &pir, 8, 1e9).unwrap();
    assert_eq!(p.ranking, PirRanking::Table);
    assert!(
        p.page_default,
        "a small gallery's table plan is the page's default"
    );
    // Below the table plan's bytes per search: a level that fits, or a typed error, never the
    // table over the budget.
    let tight = (p.up_bytes + p.down_bytes) as f64 - 1.0;
    match plan(&part, &pir, 8, tight) {
        Ok(q) => {
            assert!(matches!(q.ranking, PirRanking::Level { .. }), "{q:?}");
            assert!((q.up_bytes + q.down_bytes) as f64 <= tight);
        }
        Err(e) => {
            let kib = (p.up_bytes + p.down_bytes).div_ceil(1024);
            let want = format!("no PIR plan fits this many bytes per search; the cheapest sends and receives {kib} KiB");
            assert!(e.to_string().contains(&want), "{e}");
        }
    }
    let table = get(&http, &format!("{base}{}/rank", pir.answer_url));
    let all = whole(&http, base, &part);
    let mut sizes = Vec::new();
    for i in [3usize, 77, 512] {
        let q = features(i);
        let r = rank_table(&pir, &table, &q, 8).unwrap();
        let want = rank(&q, std::slice::from_ref(&all), 8).unwrap();
        let ids = |h: &[publish::blocks::Hit]| h.iter().map(|h| h.id).collect::<Vec<_>>();
        assert_eq!(ids(&r.hits), ids(&want), "photo {i}");
        let (n, px) = thumbs(&http, base, &part, &pir, &th, &r, &mut rng);
        sizes.push(n);
        for (h, p) in want.iter().zip(&px) {
            assert_eq!(
                p.as_slice(),
                all.thumbnail(h.index),
                "thumbnail of {}",
                h.id
            );
        }
    }
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");

    // Every offered level: the decoded record holds exactly the ids of the photo's block file.
    let offered: Vec<usize> = (0..pir.levels.len())
        .filter(|&l| pir.levels[l].is_some())
        .collect();
    assert!(!offered.is_empty(), "no level database offered");
    let mut bodies = Vec::new();
    for &l in &offered {
        let lh = hint(&http, base, &pir, &l.to_string());
        for i in [3usize, 600] {
            let q = features(i);
            let cents = privatemail_e2e::level_centroids(&http, base, &part, l);
            let (body, pending) = rank_query(&part, &pir, l, &cents, &q, &mut rng).unwrap();
            bodies.push((l, body.len()));
            let (st, answer) = post(&http, &format!("{base}{}/{l}", pir.answer_url), body);
            assert_eq!(st, StatusCode::OK);
            let r = rank_level(&pir, l, &pending, &lh, &answer, &q, 8).unwrap();
            let ld = &part.levels[l];
            let x = publish::partition::nearest_centroid(&cents.values, part.feature_dim, &q);
            let bytes = get(&http, &format!("{base}{}/{l}/{x}", part.blocks_url));
            let block = decode(&bytes, Some(&ld.hashes[x as usize])).unwrap();
            let want: Vec<u64> = rank(&q, &[block], 8)
                .unwrap()
                .iter()
                .map(|h| h.id)
                .collect();
            let got: Vec<u64> = r.hits.iter().map(|h| h.id).collect();
            assert_eq!(got, want, "level {l}, photo {i}");
            thumbs(&http, base, &part, &pir, &th, &r, &mut rng);
        }
    }
    // Two photos, one level: the same request size.
    for w in bodies.chunks(2) {
        assert_eq!(w[0], w[1]);
    }

    // The server counted the work.
    let st = status_json(&http, base);
    assert!(st["pir"]["requests"].as_u64().unwrap() >= 3 + 4 * offered.len() as u64);
    assert!(st["pir"]["core_ms_per_request"].as_f64().unwrap() > 0.0);
    // One thumbnail request per search: 3 table searches and 2 per offered level.
    assert_eq!(
        st["pir"]["searches"].as_u64().unwrap(),
        3 + 2 * offered.len() as u64
    );
    assert!(st["pir"]["core_ms_per_search"].as_f64().unwrap() > 0.0);
}

#[test]
fn hintless_scores_are_exact_over_the_photos_block_and_checked() {
    let srv = server("pir-scores");
    let (base, http) = (&srv.base, Client::new());
    let (part, pir) = docs(&http, base);
    let sd = hintless::entry(&part, &pir).expect("the capped level's ranking is offered");
    assert!(matches!(
        part.levels[sd.level].overlap,
        Overlap::Capped { .. }
    ));
    let file = get(&http, &format!("{base}{}/scores/hint", pir.answer_url));
    assert_eq!(file.len() as u64, sd.public.bytes);
    let public = ScoresPublic::decode(sd, &part, &file).unwrap();
    let keys = ScoresKeys::new(&part, sd).unwrap();
    let th = hint(&http, base, &pir, "thumbs");
    let cents = privatemail_e2e::level_centroids(&http, base, &part, sd.level);
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let url = format!("{base}{}/scores", pir.answer_url);
    let mut sizes = Vec::new();
    for i in [3usize, 77, 600] {
        let q = features(i);
        let (body, pending) = hintless::query(&part, sd, &keys, &cents, &q, &mut rng).unwrap();
        sizes.push(body.len());
        let (st, answer) = post(&http, &url, body);
        assert_eq!(st, StatusCode::OK);
        assert_eq!(answer.len() as u64, sd.answer_bytes);
        let r =
            hintless::rank(sd, &pir.thumbs.shape, &keys, &public, &pending, &answer, 8).unwrap();
        // The photo's block file, checked by its hash: the public rows are its items, and the
        // hits are its exact top 8 by distance from the quantised photo (integer scores).
        let x = nearest_centroid(&cents.values, part.feature_dim, &q) as usize;
        let ld = &part.levels[sd.level];
        let bytes = get(
            &http,
            &format!("{base}{}/{}/{x}", part.blocks_url, sd.level),
        );
        let block = decode(&bytes, Some(&ld.hashes[x])).unwrap();
        let row_ids: Vec<u64> = public.rows[x]
            .iter()
            .map(|&g| public.ids[g as usize])
            .collect();
        assert_eq!(row_ids, block.ids, "photo {i}");
        let want = privatemail_e2e::block_top8_by_scores(&q, &block);
        let got: Vec<u64> = r.hits.iter().map(|h| h.id).collect();
        assert_eq!(got, want, "photo {i}");
        // The same as ranking the block's features in f32 (no ties at these photos).
        let f32_rank: Vec<u64> = rank(&q, std::slice::from_ref(&block), 8)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(got, f32_rank, "photo {i}");
        for h in &r.hits {
            let f = &block.features[h.index * part.feature_dim..][..part.feature_dim];
            let exact: f32 = f.iter().zip(&q).map(|(a, b)| (a - b) * (a - b)).sum();
            assert!((h.distance - exact).abs() < 1e-3, "{h:?} {exact}");
        }
        // Thumbnails by PIR, checked against the public file's digests.
        let (_, px) = thumbs(&http, base, &part, &pir, &th, &r, &mut rng);
        for (h, p) in r.hits.iter().zip(&px) {
            let at = block.ids.iter().position(|&id| id == h.id).unwrap();
            assert_eq!(p.as_slice(), block.thumbnail(at));
        }

        // A damaged answer or a truncated one: typed errors, never a ranking. (Coefficient 3
        // of the first packed ciphertext holds a row; coefficients from the packing width on
        // are never read, see `pir::inspiring`.)
        let bad = {
            use ::pir::scores::{decode_answer, encode_answer};
            let (shape, q) = (sd.shape(), ::lattice::modq::Q.value);
            let mut v = decode_answer(&shape, ::lattice::N, &answer).unwrap();
            // 2²⁸ = Δ/2 away: outside the error bound.
            v[0][3] = ((u128::from(v[0][3]) + (1 << 28)) % u128::from(q)) as u64;
            encode_answer(&v)
        };
        let e =
            hintless::rank(sd, &pir.thumbs.shape, &keys, &public, &pending, &bad, 8).unwrap_err();
        assert!(e.to_string().contains("error bound"), "{e}");
        let e = hintless::rank(
            sd,
            &pir.thumbs.shape,
            &keys,
            &public,
            &pending,
            &answer[8..],
            8,
        )
        .unwrap_err();
        assert!(e.to_string().contains("PIR answer has"), "{e}");
    }
    // Every photo sends the same number of bytes: the document's.
    assert!(
        sizes.iter().all(|&n| n as u64 == sd.upload_bytes),
        "{sizes:?}"
    );

    // A damaged public file is refused by its hash; a malformed query is a typed 422.
    let mut f = file.clone();
    f[40] ^= 1;
    assert!(ScoresPublic::decode(sd, &part, &f).is_err());
    for body in [
        Vec::new(),
        vec![0u8; sd.upload_bytes as usize - 8],
        vec![0xffu8; sd.upload_bytes as usize],
    ] {
        let (st, b) = post(&http, &url, body);
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
        let e: ErrorResponse = serde_json::from_slice(&b).unwrap();
        assert!(
            e.error.message.contains("scores query"),
            "{}",
            e.error.message
        );
    }
    let st = status_json(&http, base);
    assert!(st["pir"]["core_ms_per_request"].as_f64().unwrap() > 0.0);
}

#[test]
fn damaged_answers_and_bad_requests_are_typed_errors() {
    let srv = server("pir-errors");
    let (base, http) = (&srv.base, Client::new());
    let (part, pir) = docs(&http, base);
    let th = hint(&http, base, &pir, "thumbs");
    let table = get(&http, &format!("{base}{}/rank", pir.answer_url));
    let q = features(9);
    let r = rank_table(&pir, &table, &q, 8).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(6);

    // A damaged answer never yields a thumbnail: the digest check refuses it.
    let (body, pending) = thumbs_query(&part, &pir, Some(&r), 8, &mut rng).unwrap();
    let (_, mut answer) = post(&http, &format!("{base}{}/thumbs", pir.answer_url), body);
    let at = answer.len() / 2;
    answer[at] ^= 0x80;
    answer[at + 1] ^= 0x80;
    answer[at + 2] ^= 0x80;
    answer[at + 3] ^= 0x80;
    let e = thumbs_decode(&pending, &th, &answer, &r, &RAW28).unwrap_err();
    assert!(e.to_string().contains("thumbnail"), "{e}");
    // A truncated answer: a size error.
    let e = thumbs_decode(&pending, &th, &answer[..answer.len() - 4], &r, &RAW28).unwrap_err();
    assert!(e.to_string().contains("PIR answer has"), "{e}");
    // A damaged table is refused by its hash.
    let mut t = table.clone();
    let at = t.len() / 2;
    t[at] ^= 1;
    assert!(rank_table(&pir, &t, &q, 8).is_err());
    // A damaged level answer: refused by the record hash.
    if let Some(l) = (0..pir.levels.len()).find(|&l| pir.levels[l].is_some()) {
        let lh = hint(&http, base, &pir, &l.to_string());
        let cents = privatemail_e2e::level_centroids(&http, base, &part, l);
        let (body, pending) = rank_query(&part, &pir, l, &cents, &q, &mut rng).unwrap();
        let (_, answer) = post(&http, &format!("{base}{}/{l}", pir.answer_url), body);
        // The top bit of a row's entry: a change the rounding cannot absorb (changes in the
        // low bits within Δ/2 decode to the right byte, as they should). Row 10 is in the
        // record's header (malformed), row 2,000 in its features (hash mismatch).
        let shape = pir.levels[l].as_ref().unwrap().shape;
        for (row, want) in [(10usize, "malformed"), (2000, "ranking record")] {
            let mut entries = shape.decode_answer(&answer).unwrap();
            entries[row] ^= 1 << 31;
            let bad = shape.encode_answer(&entries);
            let e = rank_level(&pir, l, &pending, &lh, &bad, &q, 8).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
        assert!(rank_level(&pir, l, &pending, &lh, &answer, &q, 8).is_ok());
    }

    // Bad requests: typed JSON errors with 4xx statuses; long input is not echoed in full.
    let url = format!("{base}{}/thumbs", pir.answer_url);
    for body in [
        Vec::new(),
        vec![0u8; 3],
        vec![0u8; pir.thumbs.shape.query_bytes() + 4],
    ] {
        let (st, b) = post(&http, &url, body);
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
        let e: ErrorResponse = serde_json::from_slice(&b).unwrap();
        assert!(
            e.error.message.contains("query vectors"),
            "{}",
            e.error.message
        );
    }
    let long = "x".repeat(5000);
    for path in [
        format!("{}/{long}", pir.answer_url),
        format!("/api/v1/pir/{long}/thumbs"),
        format!("{}/99", pir.answer_url),
    ] {
        let (st, b) = post(&http, &format!("{base}{path}"), vec![0u8; 16]);
        assert_eq!(st, StatusCode::NOT_FOUND, "{path}");
        let e: ErrorResponse = serde_json::from_slice(&b).unwrap();
        assert!(e.error.message.len() < 400, "{}", e.error.message.len());
    }
    // Only the declared type: a cross-site "simple" POST (text/plain, or no type) gets a 415
    // before any work, with a JSON error.
    let good = vec![0u8; pir.thumbs.shape.query_bytes()];
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut rq = http.post(&url).body(good.clone());
        if let Some(ct) = ct {
            rq = rq.header("content-type", ct);
        }
        let r = rq.send().unwrap();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        let e: ErrorResponse = r.json().unwrap();
        assert!(
            e.error.message.contains("octet-stream"),
            "{}",
            e.error.message
        );
    }
    let r = http
        .post(&url)
        .header("content-type", "Application/Octet-Stream; charset=binary")
        .body(good)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = http
        .get(format!("{base}{}/thumbs/hint", pir.answer_url))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Every answer carries the security headers.
    for (name, want) in [
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(r.headers()[name].to_str().unwrap(), want);
    }
    assert!(r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    // The framework's own errors in the API's format too: a method the endpoint does not take.
    let r = http.get(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let e: ErrorResponse = r.json().unwrap();
    assert!(e.error.message.contains("method"), "{}", e.error.message);
    // Last: the server answers 413 before reading the body (then reads and drops it, so the
    // client still sending sees the answer, not a reset).
    let too_big = vec![0u8; 17 << 20];
    let (st, b) = post(&http, &url, too_big);
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    let e: ErrorResponse = serde_json::from_slice(&b).unwrap();
    assert_eq!(e.error.code, shared::api::ErrorCode::PayloadTooLarge);
}
