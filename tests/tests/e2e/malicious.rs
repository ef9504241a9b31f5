//! A malicious server against the one search driver every client runs
//! (`client::pir_search::driver`, the CLI's and the page's). The real server binary
//! serves a 1,000-image gallery; a server imitation in front of it changes what a hostile
//! server would change, per attack:
//!
//! - **chosen seeds** — the hintless ranking's packing seed equal to its query seed (the
//!   attack that exposed the secret from one upload), a level's seed equal to the thumbnails',
//!   seeds of the old version-only derivation, a document that leaves out the ranking table to
//!   steer clients to the hintless ranking, a per-client version: refused before any query;
//! - **a crafted scores answer** that fails to decode exactly when the photo is in a chosen
//!   block (an imitation with the client-side effect of the crafted packed answer);
//! - **one damaged thumbnail record** — the database changed consistently (the record's bytes
//!   and the hint's rows both), so the record decodes wrong exactly when it is asked for;
//! - **one damaged hint slot** — every record at one slot of its column decodes wrong;
//! - **a damaged level record** (an imitation: the answer damaged exactly when the photo is in
//!   a chosen block).
//!
//! For each answer attack, 100 photos whose search fails and 100 whose search succeeds: the
//! server's view of every search (requests, their order, sizes and answer sizes) is the same
//! for all 200, and the client's work between the attacked answer and its next request takes
//! the same time within a stated tolerance. After a failure, the refusal stops the next search
//! before any request.

use std::time::{Duration, Instant};

use ::pir::layout::{decode_hint, encode_hint};
use ::pir::lwe::{matrix_a, LWE_N};
use client::pir_search::driver::{
    Failure, FailureKind, Found, PirCache, PirSearch, Prepared, PublicFile, Refusal, Request, Step,
};
use client::pir_search::{plan_of, rank_table, PirPlan, RankingKind};
use embed::model::Model;
use privatemail_e2e::{get_json, small_server};
use publish::partition::nearest_centroid;
use publish::pir::doc::PirDoc;
use publish::pir::seeds::{self, Purpose};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

/// What the server sees of one search: each request's method, URL, body size and the size of
/// the answer it gave.
type View = Vec<(&'static str, String, u64, usize)>;

struct Outcome {
    result: Result<Found, Failure>,
    view: View,
    /// The client's time from holding each answer to its next request (or its end).
    work: Vec<Duration>,
}

/// The real server's answer to a request.
fn forward(http: &Client, base: &str, req: &Request, body: &[u8]) -> Vec<u8> {
    let r = match req {
        Request::Get { url, .. } => http.get(format!("{base}{url}")).send(),
        Request::Post { url, .. } => http
            .post(format!("{base}{url}"))
            .header("content-type", "application/octet-stream")
            .body(body.to_vec())
            .send(),
    }
    .unwrap();
    assert!(r.status().is_success(), "{req:?}: {}", r.status());
    r.bytes().unwrap().to_vec()
}

/// One search through the driver, every answer from `serve` (the real server's, possibly
/// changed).
#[allow(clippy::too_many_arguments)]
fn search(
    part: &PartitionDoc,
    pir: &PirDoc,
    plan: &PirPlan,
    features: &[f32],
    cache: &mut PirCache,
    refusal: Option<&Refusal>,
    seed: u64,
    serve: impl FnMut(&Request, &[u8]) -> Vec<u8>,
) -> Outcome {
    let rng = ChaCha20Rng::seed_from_u64(seed);
    let prepared = Prepared::new(part, pir, plan, rng);
    search_prepared(part, pir, plan, features, cache, refusal, prepared, serve)
}

/// [`search`] with its photo-independent work done ahead (`prepared`, possibly for another
/// plan or version).
#[allow(clippy::too_many_arguments)]
fn search_prepared(
    part: &PartitionDoc,
    pir: &PirDoc,
    plan: &PirPlan,
    features: &[f32],
    cache: &mut PirCache,
    refusal: Option<&Refusal>,
    prepared: Prepared,
    mut serve: impl FnMut(&Request, &[u8]) -> Vec<u8>,
) -> Outcome {
    let (mut s, mut step) =
        PirSearch::start_prepared(part, pir, plan, features, cache, refusal, prepared);
    let (mut view, mut work) = (View::new(), Vec::new());
    loop {
        let req = match step {
            Step::Done(result) => return Outcome { result, view, work },
            Step::Send(req) => req,
        };
        let answer = serve(&req, s.body());
        view.push(match &req {
            Request::Get { url, .. } => ("GET", url.clone(), 0, answer.len()),
            Request::Post {
                url, body_bytes, ..
            } => ("POST", url.clone(), *body_bytes, answer.len()),
        });
        let t = Instant::now();
        step = s.answer(cache, &answer);
        work.push(t.elapsed());
    }
}

struct Gallery {
    http: Client,
    base: String,
    part: PartitionDoc,
    pir: PirDoc,
    /// Features of held-out Fashion-MNIST test photos, as the on-device model computes them.
    photos: Vec<Vec<f32>>,
}

fn photos(n: usize) -> Vec<Vec<f32>> {
    let dir = std::path::Path::new(data::fashion::DEFAULT_DIR);
    let test = data::fashion::load_split(dir, "t10k").unwrap();
    let model = Model::from_bytes(data::assets::QUERY_WEIGHTS).unwrap();
    // On every core: each photo's search features run the query model on nine views of it.
    use rayon::prelude::*;
    (0..n)
        .into_par_iter()
        .map(|i| model.search_features(test.images.image(i)).unwrap())
        .collect()
}

impl Gallery {
    /// The real server's documents, and `n` held-out photos.
    fn open(base: &str, n: usize) -> Gallery {
        let http = Client::new();
        Gallery {
            part: get_json(&http, base, "/api/v1/partition"),
            pir: get_json(&http, base, "/api/v1/pir"),
            http,
            base: base.to_string(),
            photos: photos(n),
        }
    }

    /// One search of `f` against this gallery's documents.
    fn search(
        &self,
        plan: &PirPlan,
        f: &[f32],
        cache: &mut PirCache,
        seed: u64,
        serve: impl FnMut(&Request, &[u8]) -> Vec<u8>,
    ) -> Outcome {
        search(&self.part, &self.pir, plan, f, cache, None, seed, serve)
    }

    /// The real server's answers, with the scores answer raised at row 0 ([`raise_row_zero`]).
    fn crafted_scores(&self) -> impl FnMut(&Request, &[u8]) -> Vec<u8> + '_ {
        |req, body| {
            let mut answer = forward(&self.http, &self.base, req, body);
            if matches!(req, Request::Post { url, .. } if url.ends_with("/scores")) {
                let shape = self.pir.scores.as_ref().expect("offered").shape();
                raise_row_zero(&mut answer, &shape);
            }
            answer
        }
    }

    /// A public file of the real server (GET `url`).
    fn public(&self, url: String, file: PublicFile) -> Vec<u8> {
        let req = Request::Get {
            url,
            bytes: 0,
            wire_bytes: 0,
            sha256: String::new(),
            file,
        };
        forward(&self.http, &self.base, &req, &[])
    }

    /// The same gallery with the thumbnail hint `hint` published in its PIR document.
    fn with_thumbs_hint(&self, hint: &[u8]) -> Gallery {
        let mut pir = self.pir.clone();
        pir.thumbs.hint_sha256 = publish::blocks::hash_hex(hint);
        Gallery {
            http: self.http.clone(),
            base: self.base.clone(),
            part: self.part.clone(),
            pir,
            photos: self.photos.clone(),
        }
    }

    fn plan(&self, kind: RankingKind) -> PirPlan {
        plan_of(&self.part, &self.pir, 8, 1e12, Some(kind)).unwrap()
    }

    fn honest(&self) -> impl FnMut(&Request, &[u8]) -> Vec<u8> + '_ {
        |req, body| forward(&self.http, &self.base, req, body)
    }
}

/// Medians of the client's work after the attacked answer must agree within 25 % or 2 ms
/// (loopback and a loaded 2-core CI machine; the work itself is the same code path).
fn assert_same_timing(what: &str, failed: &mut [Duration], passed: &mut [Duration]) {
    failed.sort();
    passed.sort();
    let (a, b) = (failed[failed.len() / 2], passed[passed.len() / 2]);
    let diff = a.abs_diff(b);
    let tolerance = Duration::from_millis(2).max(a.max(b) / 4);
    eprintln!("{what}: median client work after the answer {a:?} (failed) vs {b:?} (passed)");
    assert!(diff <= tolerance, "{what}: {a:?} vs {b:?}");
}

/// Runs `n` searches of photos that the attack makes fail and `n` it does not, checks the
/// outcome of each, that all 2n views are the same, and the timing of the step at `step`.
#[allow(clippy::too_many_arguments)]
fn indistinguishable(
    g: &Gallery,
    what: &str,
    plan: &PirPlan,
    inside: &[usize],
    outside: &[usize],
    step: usize,
    mut serve: impl FnMut(&Request, &[u8], &[f32]) -> Vec<u8>,
) {
    let n = inside.len().min(outside.len()).min(100);
    assert!(
        n >= 100,
        "{what}: {} inside, {} outside",
        inside.len(),
        outside.len()
    );
    let mut cache = PirCache::default();
    // Public files first, as any returning client holds them.
    let warm = search(
        &g.part,
        &g.pir,
        plan,
        &g.photos[outside[0]],
        &mut cache,
        None,
        1,
        |r, b| serve(r, b, &g.photos[outside[0]]),
    );
    assert!(warm.result.is_ok(), "{what}: {:?}", warm.result.err());
    let (mut views, mut failed, mut passed) = (Vec::new(), Vec::new(), Vec::new());
    for (j, (&i, &o)) in inside.iter().zip(outside).take(n).enumerate() {
        for (photo, should_fail) in [(i, true), (o, false)] {
            let f = &g.photos[photo];
            let out = search(
                &g.part,
                &g.pir,
                plan,
                f,
                &mut cache,
                None,
                10 + j as u64,
                |r, b| serve(r, b, f),
            );
            match (&out.result, should_fail) {
                (Err(e), true) => {
                    assert_eq!(e.kind, FailureKind::Hostile, "{what}: {e:?}");
                    assert!(e.refusal.is_some());
                    failed.push(out.work[step]);
                }
                (Ok(found), false) => {
                    assert_eq!(found.thumbnails.len(), 8);
                    passed.push(out.work[step]);
                }
                (r, _) => panic!(
                    "{what}: photo {photo} should_fail={should_fail}: {:?}",
                    r.as_ref().err()
                ),
            }
            views.push(out.view);
        }
    }
    assert!(
        views.iter().all(|v| v == &views[0]),
        "{what}: the server's view differs between searches"
    );
    eprintln!(
        "{what}: {} searches, one view: {:?}",
        views.len(),
        views[0].iter().map(|v| (v.0, v.2, v.3)).collect::<Vec<_>>()
    );
    assert_same_timing(what, &mut failed, &mut passed);
}

/// A scores answer that decodes cleanly to other scores: row 0 of the photo's block gets
/// `3·2³⁰` more (`Δ·3·2³⁰` added to the first packed coefficient), more than any real score
/// (unit-norm features score at most `2³⁰`), so it comes first — what a server computing
/// other scores on purpose can do.
fn raise_row_zero(answer: &mut Vec<u8>, shape: &::pir::scores::ScoreShape) {
    use ::pir::scores::{decode_answer, encode_answer};
    let n = ::lattice::N;
    let mut values = decode_answer(shape, n, answer).unwrap();
    // The first packed ciphertext's coefficient 0 is row 0.
    let q = ::lattice::modq::Q.value;
    values[0][0] = ((u128::from(values[0][0]) + (3u128 << 59)) % u128::from(q)) as u64;
    *answer = encode_answer(&values);
}

/// The thumbnail database's record `r`: its column and its rows.
fn record_rows(pir: &PirDoc, r: usize) -> (usize, std::ops::Range<usize>) {
    let s = pir.thumbs.shape;
    let per = s.rows / s.record_len;
    let at = (r % per) * s.record_len;
    (s.first_column(r), at..at + s.record_len)
}

#[test]
fn a_malicious_server_learns_nothing_within_a_search_and_at_most_once() {
    let srv = small_server("malicious", &[]);
    // Enough photos that the gallery record in the most top-8 lists is in at least 100 of them
    // (with the cnn-v2 features, whose neighbours are less concentrated: 91 of 4,000).
    let g = Gallery::open(&srv.base, 6_000);
    seeds_chosen_by_the_server_are_refused_before_any_query(&g);
    a_level_no_request_can_fetch_is_not_a_plan(&g);
    level_records_that_do_not_fit_the_blocks_are_refused_for_every_photo(&g);
    stray_bits_in_a_packed_answer_stop_the_search_alike_for_every_photo(&g);
    a_crafted_scores_answer(&g);
    a_damaged_thumbnail_record(&g);
    a_damaged_hint_slot(&g);
    a_damaged_level_record(&g);
    one_failure_stops_every_later_search(&g);
    other_scores_pass_unless_the_records_carry_features(&g);
    work_prepared_ahead_changes_nothing_the_server_sees(&g);
}

/// A search whose photo-independent work was done ahead (before the photo was known) sends
/// the same requests, of the same sizes, and finds the same items as one that does it all at
/// once; a preparation made for another plan or another version of the gallery is not used
/// (the search prepares afresh and succeeds — a stale one must never pass for a hostile answer).
fn work_prepared_ahead_changes_nothing_the_server_sees(g: &Gallery) {
    let mut other = g.part.clone();
    other.version = format!("{}x", other.version);
    for (kind, ahead_for) in [
        (RankingKind::Scores, RankingKind::Scores),
        (RankingKind::Table, RankingKind::Table),
        (RankingKind::Scores, RankingKind::Table),
    ] {
        let plan = g.plan(kind);
        let ahead = g.plan(ahead_for);
        for (i, f) in g.photos.iter().take(3).enumerate() {
            let mut cache = PirCache::default();
            let at_once = g.search(&plan, f, &mut cache, 40 + i as u64, g.honest());
            for part in [&g.part, &other] {
                let prepared = Prepared::new(
                    part,
                    &g.pir,
                    &ahead,
                    ChaCha20Rng::seed_from_u64(50 + i as u64),
                );
                let out = search_prepared(
                    &g.part,
                    &g.pir,
                    &plan,
                    f,
                    &mut cache,
                    None,
                    prepared,
                    g.honest(),
                );
                let (a, b) = (
                    at_once.result.as_ref().expect("found at once"),
                    out.result.expect("found with the work done ahead"),
                );
                assert_eq!(a.ranked.indices, b.ranked.indices, "{kind:?} photo {i}");
                let sizes = |v: &View| {
                    v.iter()
                        .filter(|r| r.0 == "POST")
                        .map(|r| (r.1.clone(), r.2, r.3))
                        .collect::<Vec<_>>()
                };
                assert_eq!(sizes(&at_once.view), sizes(&out.view));
            }
        }
    }
}

/// Without `--pir-verified-scores`, a server that computes other scores chooses what a search
/// returns, undetected (the threat model says so); the pictures are still the real ones.
fn other_scores_pass_unless_the_records_carry_features(g: &Gallery) {
    assert!(!g.pir.thumb_features);
    let plan = g.plan(RankingKind::Scores);
    let mut cache = PirCache::default();
    let f = &g.photos[7];
    let honest = g.search(&plan, f, &mut cache, 11, g.honest());
    let honest = honest.result.unwrap().ranked;
    let out = g.search(&plan, f, &mut cache, 12, g.crafted_scores());
    let crafted = out.result.unwrap().ranked;
    assert_ne!(
        crafted.indices[0], honest.indices[0],
        "the crafted score came first"
    );
}

/// With `--pir-verified-scores` every thumbnail record carries its item's features and the
/// client checks the decrypted score of each returned item: the same crafted answer fails
/// (and stops later searches), an honest one passes.
#[test]
fn verified_scores_catch_a_server_that_computes_other_scores() {
    let srv = small_server("malicious-verified", &["--pir-verified-scores"]);
    let g = Gallery::open(&srv.base, 40);
    assert!(g.pir.thumb_features);
    let plan = g.plan(RankingKind::Scores);
    let mut cache = PirCache::default();
    for (i, f) in g.photos.iter().enumerate().take(20) {
        let out = g.search(&plan, f, &mut cache, i as u64, g.honest());
        let found = out.result.unwrap();
        assert_eq!(found.ranked.scores.len(), 8);
        let out = g.search(&plan, f, &mut cache, 100 + i as u64, g.crafted_scores());
        let e = out.result.unwrap_err();
        assert_eq!(e.kind, FailureKind::Hostile, "{e:?}");
        assert!(e.message.contains("scores"), "{}", e.message);
        assert!(e.refusal.is_some());
    }
    // The table plan on the same server: records with features, thumbnails still exact.
    let out = search(
        &g.part,
        &g.pir,
        &g.plan(RankingKind::Table),
        &g.photos[0],
        &mut cache,
        None,
        9,
        g.honest(),
    );
    assert_eq!(out.result.unwrap().thumbnails.len(), 8);
}

/// Thumbnail records coded with a codebook (the operator's `--pir-thumb-bytes`, what the
/// largest galleries get by default): every plan's search fetches the codebook once, and its
/// pictures are the items' (close to their 3-bit block thumbnails). A codebook other than the
/// published one, or a published one that is malformed or draws other pictures than the
/// database's records, ends the search before any query leaves.
#[test]
fn coded_thumbnails_search_and_a_codebook_not_published_is_refused() {
    use publish::blocks::{decode, hash_hex};
    let srv = small_server("malicious-coded", &["--pir-thumb-bytes", "48"]);
    let g = Gallery::open(&srv.base, 12);
    let code = g.pir.thumbs_code.clone().expect("a codebook is published");
    assert_eq!(g.pir.thumbs.shape.record_len, 48);
    // The whole gallery as one block: its 3-bit thumbnails, for comparison.
    let whole = g
        .part
        .levels
        .iter()
        .position(|l| l.whole)
        .expect("a whole level");
    let url = format!("{}/{whole}/0", g.part.blocks_url);
    let block = decode(
        &g.public(url, PublicFile::Table),
        Some(&g.part.levels[whole].hashes[0]),
    )
    .unwrap();
    let mut cache = PirCache::default();
    for kind in [RankingKind::Scores, RankingKind::Table] {
        let plan = g.plan(kind);
        for (i, f) in g.photos.iter().enumerate().take(4) {
            let out = g.search(&plan, f, &mut cache, i as u64, g.honest());
            let found = out.result.unwrap();
            let codebooks = out.view.iter().filter(|v| v.1.ends_with("/thumbs/code"));
            // Fetched by the first search only, then held.
            assert_eq!(
                codebooks.count(),
                usize::from(i == 0 && kind == RankingKind::Scores)
            );
            let (mut se, mut n) = (0f64, 0usize);
            for (h, px) in found.ranked.hits.iter().zip(&found.thumbnails) {
                let at = block.ids.iter().position(|&id| id == h.id).unwrap();
                for (&a, &b) in px.iter().zip(block.thumbnail(at)) {
                    se += (f64::from(a) - f64::from(b)).powi(2);
                    n += 1;
                }
            }
            let psnr = 10.0 * (255f64.powi(2) * n as f64 / se).log10();
            assert!(
                n == 8 * 784 && psnr > 20.0,
                "{kind:?} photo {i}: {psnr:.1} dB"
            );
        }
    }
    // Documents that cannot be right are refused before anything is fetched: coded records
    // without a codebook, or a codebook larger than any codebook of 28×28 pictures.
    let mut pir = g.pir.clone();
    pir.thumbs_code = None;
    assert!(plan_of(&g.part, &pir, 8, 1e12, None).is_err());
    let mut pir = g.pir.clone();
    pir.thumbs_code.as_mut().unwrap().bytes = publish::thumbcode::max_file_len(28) as u64 + 1;
    assert!(plan_of(&g.part, &pir, 8, 1e12, None).is_err());
    let real = g.public(
        format!("{}/thumbs/code", g.pir.answer_url),
        PublicFile::ThumbCode,
    );
    assert_eq!(hash_hex(&real), code.sha256);
    // (1) Another codebook than the published one; (2)–(3) published but malformed (a NaN
    // mean) or of other records (another length, the database's record length unchanged).
    let mut changed = real.clone();
    let last = changed.len() - 1;
    changed[last] ^= 1;
    let mut nan = real.clone();
    nan[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut other_len = real.clone();
    other_len[10..12].copy_from_slice(&40u16.to_le_bytes());
    for (what, file, publish) in [
        ("changed", changed, false),
        ("nan", nan, true),
        ("other length", other_len, true),
    ] {
        let mut pir = g.pir.clone();
        if publish {
            pir.thumbs_code.as_mut().unwrap().sha256 = hash_hex(&file);
        }
        let plan = plan_of(&g.part, &pir, 8, 1e12, Some(RankingKind::Scores)).unwrap();
        let mut fresh = PirCache::default();
        let out = search(
            &g.part,
            &pir,
            &plan,
            &g.photos[0],
            &mut fresh,
            None,
            5,
            |req, body| {
                if matches!(req, Request::Get { url, .. } if url.ends_with("/thumbs/code")) {
                    file.clone()
                } else {
                    forward(&g.http, &g.base, req, body)
                }
            },
        );
        let e = out.result.unwrap_err();
        assert_eq!(e.kind, FailureKind::PublicFile, "{what}: {e:?}");
        assert!(
            out.view.iter().all(|v| v.0 == "GET"),
            "{what}: {:?}",
            out.view
        );
    }
}

/// Level databases whose records take more queries than one request may carry (a server
/// that offers them, by mistake or to break the search) are not plans: the planner chooses
/// among the others, and a search by level finds no plan instead of failing mid-way.
fn a_level_no_request_can_fetch_is_not_a_plan(g: &Gallery) {
    let max = shared::params::limits::MAX_PIR_QUERIES;
    let mut d = g.pir.clone();
    let mut changed = 0;
    for db in d.levels.iter_mut().flatten() {
        let s = db.shape;
        db.shape = ::pir::layout::Shape::new((max + 1) * s.rows, s.records, s.rows).unwrap();
        assert_eq!(db.shape.queries_per_record(), max + 1);
        changed += 1;
    }
    assert!(changed > 0, "the test server offers a level database");
    assert!(plan_of(&g.part, &g.pir, 8, 1e12, Some(RankingKind::Level)).is_ok());
    assert!(plan_of(&g.part, &d, 8, 1e12, Some(RankingKind::Level)).is_err());
    let any = plan_of(&g.part, &d, 8, 1e12, None).unwrap();
    assert_ne!(any.ranking.kind(), RankingKind::Level);
    // A level plan made from the honest document, run against this one: refused before any
    // query is sent (only public files, the same for every photo, may have been fetched), so
    // the server learns nothing from the failure.
    let mut cache = PirCache::default();
    let mut sent = 0;
    let plan = g.plan(RankingKind::Level);
    let out = search(
        &g.part,
        &d,
        &plan,
        &g.photos[0],
        &mut cache,
        None,
        6,
        |r, b| {
            sent += usize::from(matches!(r, Request::Post { .. }));
            forward(&g.http, &g.base, r, b)
        },
    );
    let e = out.result.unwrap_err();
    assert_eq!(e.kind, FailureKind::Refused, "{e:?}");
    assert!(
        e.message.contains("nothing about your photo was sent"),
        "{e:?}"
    );
    assert_eq!(sent, 0, "a query was sent");
}

/// Thumbnail answers travel as entries packed end to end, the last byte's spare bits zero. A
/// server that sets them (for every search: it cannot tell photos apart) gets every search
/// stopped the same way — a hostile failure with a stored refusal, after the same requests
/// as an honest search — never a panic, a transport error inviting a retry, or results.
fn stray_bits_in_a_packed_answer_stop_the_search_alike_for_every_photo(g: &Gallery) {
    let shape = g.pir.thumbs.shape;
    let spare = shape.answer_bytes() * 8 - shape.rows * shape.answer_bits() as usize;
    assert!(
        spare > 0,
        "the test gallery's thumbnail answers have spare bits"
    );
    let plan = g.plan(RankingKind::Scores);
    for (i, f) in g.photos.iter().take(6).enumerate() {
        let mut cache = PirCache::default();
        let honest = g.search(&plan, f, &mut cache, 90 + i as u64, g.honest());
        let out = g.search(&plan, f, &mut cache, 90 + i as u64, |req, body| {
            let mut answer = forward(&g.http, &g.base, req, body);
            if matches!(req, Request::Post { url, .. } if url.ends_with("/thumbs")) {
                // The top bit of each query's last byte: past its packed entries.
                for q in answer.chunks_mut(shape.answer_bytes()) {
                    *q.last_mut().unwrap() |= 0x80;
                }
            }
            answer
        });
        let e = out.result.expect_err("stray bits were accepted");
        assert_eq!(e.kind, FailureKind::Hostile, "photo {i}: {e:?}");
        assert!(e.refusal.is_some(), "photo {i}");
        // The same queries as an honest search (public files came from the cache).
        let posts = |v: &View| {
            v.iter()
                .filter(|r| r.0 == "POST")
                .map(|r| (r.1.clone(), r.2, r.3))
                .collect::<Vec<_>>()
        };
        assert_eq!(posts(&out.view), posts(&honest.view), "photo {i}");
    }
}

/// A level database whose records do not fit the level's blocks (one record short, or records
/// too short for the longest block's ranking record) would make a query impossible, or an
/// answer fail, for the photos of some blocks only: whether a search fails would depend on
/// the photo. Such documents are refused before anything secret exists, for every photo
/// alike, and nothing is fetched or sent.
fn level_records_that_do_not_fit_the_blocks_are_refused_for_every_photo(g: &Gallery) {
    let level = g.plan(RankingKind::Level);
    let client::pir_search::PirRanking::Level { level: l } = level.ranking else {
        unreachable!("a level plan")
    };
    let s = g.pir.levels[l].as_ref().unwrap().shape;
    let mut attacks = Vec::new();
    let mut d = g.pir.clone();
    let db = d.levels[l].as_mut().unwrap();
    db.shape = ::pir::layout::Shape::new(s.record_len, s.records - 1, s.rows).unwrap();
    db.record_hashes.pop();
    attacks.push(("one record short", d));
    let mut d = g.pir.clone();
    let db = d.levels[l].as_mut().unwrap();
    // One column less than each record spans (the server pads records to whole columns).
    let short = if s.record_len > s.rows {
        s.record_len - s.rows
    } else {
        s.record_len / 2
    };
    db.shape = ::pir::layout::Shape::new(short, s.records, s.rows).unwrap();
    attacks.push(("records too short for the longest block", d));
    for (what, d) in attacks {
        let mut kinds = Vec::new();
        for (i, f) in g.photos.iter().enumerate() {
            let mut cache = PirCache::default();
            let mut requests = 0;
            let out = search(
                &g.part,
                &d,
                &level,
                f,
                &mut cache,
                None,
                70 + i as u64,
                |_, _| {
                    // Nothing may be fetched or sent: no answer is given.
                    requests += 1;
                    Vec::new()
                },
            );
            let e = out.result.expect_err(what);
            assert_eq!(requests, 0, "{what}: photo {i} made a request");
            assert!(e.refusal.is_none(), "{what}: {e:?}");
            kinds.push((e.kind, e.message));
        }
        assert!(
            kinds.iter().all(|k| *k == kinds[0]) && kinds[0].0 == FailureKind::Refused,
            "{what}: {kinds:?}"
        );
        assert!(
            plan_of(&g.part, &d, 8, 1e12, Some(RankingKind::Level)).is_err(),
            "{what}"
        );
    }
}

fn seeds_chosen_by_the_server_are_refused_before_any_query(g: &Gallery) {
    let plan = g.plan(RankingKind::Scores);
    let f = &g.photos[0];
    let mut attacks: Vec<(&str, PirDoc)> = Vec::new();
    let mut d = g.pir.clone();
    let sd = d.scores.as_mut().unwrap();
    sd.packing_seed = sd.query_seed.clone();
    attacks.push(("packing seed = query seed", d.clone()));
    // The same, steering every client to the hintless ranking.
    d.rank_table = None;
    attacks.push(("no table, packing seed = query seed", d));
    let mut d = g.pir.clone();
    let level = d.levels.iter().position(Option::is_some).unwrap();
    d.levels[level].as_mut().unwrap().a_seed = d.thumbs.a_seed.clone();
    attacks.push(("a level's seed = the thumbnails'", d));
    // The seeds a server derived before: SHA-256 of a label and the version only.
    let old = |db: &str| {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"PrivateMail PIR A v1\0");
        h.update(g.part.version.as_bytes());
        h.update([0]);
        h.update(db.as_bytes());
        hex::encode(h.finalize())
    };
    let mut d = g.pir.clone();
    d.thumbs.a_seed = old("thumbs");
    let sd = d.scores.as_mut().unwrap();
    sd.query_seed = old("scores-query");
    sd.packing_seed = old("scores-packing");
    attacks.push(("seeds of the version-only derivation", d));
    for (what, doc) in &attacks {
        // The planner refuses it, and so does the driver given a plan made elsewhere.
        assert!(plan_of(&g.part, doc, 8, 1e12, None).is_err(), "{what}");
        let mut cache = PirCache::default();
        let mut sent = 0;
        let out = search(&g.part, doc, &plan, f, &mut cache, None, 3, |r, b| {
            sent += 1;
            forward(&g.http, &g.base, r, b)
        });
        let e = out.result.unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused, "{what}: {e:?}");
        assert!(
            e.message.contains("nothing about your photo was sent"),
            "{}",
            e.message
        );
        assert_eq!(sent, 0, "{what}: requests were made");
    }
    // A per-client version: the partition document's version changed (its blocks unchanged)
    // and the PIR document with it. With the seeds the server built with, refused; a server
    // that derives new seeds for each client must also build new databases for each — and
    // then it can link that client's searches, as its address lets it anyway; the photo stays
    // hidden (ARCHITECTURE.md, threat model).
    let mut part = g.part.clone();
    part.version = "f".repeat(part.version.len());
    let mut doc = g.pir.clone();
    doc.version = part.version.clone();
    assert!(plan_of(&part, &doc, 8, 1e12, None).is_err());
    let mut cache = PirCache::default();
    let out = search(
        &part,
        &doc,
        &plan,
        f,
        &mut cache,
        None,
        4,
        |_, _| unreachable!(),
    );
    assert_eq!(out.result.unwrap_err().kind, FailureKind::Refused);
    assert_ne!(
        seeds::derive(&part, Purpose::Thumbs),
        seeds::derive(&g.part, Purpose::Thumbs)
    );
    // The honest document passes.
    let mut cache = PirCache::default();
    let out = search(&g.part, &g.pir, &plan, f, &mut cache, None, 5, g.honest());
    assert!(out.result.is_ok(), "{:?}", out.result.err());
}

/// A ranking answer damaged exactly when the photo is in the block of `level` most of these
/// photos fall in (the server imitation knows the block; a real attack gets the same client-side
/// effect without it): the plan's ranking POST (`…{tail}`) is answered, then changed by `damage`.
fn a_targeted_block(
    g: &Gallery,
    what: &str,
    plan: &PirPlan,
    level: usize,
    tail: &str,
    damage: &dyn Fn(&mut Vec<u8>),
) {
    let cents = privatemail_e2e::level_centroids(&g.http, &g.base, &g.part, level);
    let block = |f: &[f32]| nearest_centroid(&cents.values, g.part.feature_dim, f) as usize;
    let mut counts = vec![0usize; g.part.levels[level].blocks as usize];
    g.photos.iter().for_each(|f| counts[block(f)] += 1);
    let target = (0..counts.len()).max_by_key(|&b| counts[b]).unwrap();
    let (inside, outside): (Vec<usize>, Vec<usize>) =
        (0..g.photos.len()).partition(|&i| block(&g.photos[i]) == target);
    // Once the files are held, the ranking query is the first request (work index 0).
    indistinguishable(g, what, plan, &inside, &outside, 0, |req, body, f| {
        let mut answer = forward(&g.http, &g.base, req, body);
        if matches!(req, Request::Post { url, .. } if url.ends_with(tail)) && block(f) == target {
            damage(&mut answer);
        }
        answer
    });
}

fn a_crafted_scores_answer(g: &Gallery) {
    let level = g.pir.scores.as_ref().unwrap().level;
    // A coefficient far off every multiple of Δ: what a crafted answer for the target block
    // does to the photos in it, and only to them.
    a_targeted_block(
        g,
        "crafted scores answer",
        &g.plan(RankingKind::Scores),
        level,
        "/scores",
        &|a| {
            // 2²⁷ added to a coefficient in the middle: half of Δ = 2²⁹ from any multiple of it.
            use ::pir::scores::{decode_answer, encode_answer};
            let shape = g.pir.scores.as_ref().unwrap().shape();
            let mut v = decode_answer(&shape, ::lattice::N, a).unwrap();
            let (c, i) = (v.len() / 2, v[0].len() / 2);
            let q = ::lattice::modq::Q.value;
            v[c][i] = ((u128::from(v[c][i]) + (1u128 << 27)) % u128::from(q)) as u64;
            *a = encode_answer(&v);
        },
    );
}

fn a_damaged_thumbnail_record(g: &Gallery) {
    let plan = g.plan(RankingKind::Table);
    let table = g.public(format!("{}/rank", g.pir.answer_url), PublicFile::Table);
    let top = |f: &[f32]| rank_table(&g.pir, &table, f, 8).unwrap().indices;
    let tops: Vec<Vec<u32>> = g.photos.iter().map(|f| top(f)).collect();
    // The record in the most top-8 lists.
    let mut counts = vec![0usize; g.part.gallery_size];
    tops.iter().flatten().for_each(|&r| counts[r as usize] += 1);
    let target = (0..counts.len()).max_by_key(|&r| counts[r]).unwrap();
    let (inside, outside): (Vec<usize>, Vec<usize>) =
        (0..g.photos.len()).partition(|&i| tops[i].contains(&(target as u32)));
    // The database with record `target` changed by +1 in every byte, consistently: each
    // answer gets δ·q[c] on the record's rows, and the hint δ·A[c] on the same rows.
    let (col, rows) = record_rows(&g.pir, target);
    let shape = g.pir.thumbs.shape;
    let a = matrix_a(&seeds::derive(&g.part, Purpose::Thumbs), shape.cols);
    let hint_url = format!("{}/thumbs/hint", g.pir.answer_url);
    let mut hint = decode_hint(&g.public(
        hint_url.clone(),
        PublicFile::Hint {
            db: "thumbs".into(),
        },
    ))
    .unwrap();
    for i in rows.clone() {
        for j in 0..LWE_N {
            hint[i * LWE_N + j] = hint[i * LWE_N + j].wrapping_add(a[col * LWE_N + j]);
        }
    }
    let hint = encode_hint(&hint);
    let g2 = g.with_thumbs_hint(&hint);
    indistinguishable(
        &g2,
        "one damaged thumbnail record",
        &plan,
        &inside,
        &outside,
        0,
        |req, body, _| match req {
            Request::Get { url, .. } if url == &hint_url => hint.clone(),
            Request::Post { url, .. } if url.ends_with("/thumbs") => {
                let mut ans = shape
                    .decode_answer(&forward(&g.http, &g.base, req, body))
                    .unwrap();
                let q = shape.decode_queries(body).unwrap();
                for k in 0..q.len() / shape.cols {
                    let qc = q[k * shape.cols + col];
                    for i in rows.clone() {
                        ans[k * shape.rows + i] = ans[k * shape.rows + i].wrapping_add(qc);
                    }
                }
                shape.encode_answer(&ans)
            }
            _ => forward(&g.http, &g.base, req, body),
        },
    );
}

/// A hint damaged in the rows of one record slot: each unit's digest covers every row of the
/// database, so the damage fails every search alike — whichever records a photo wants and
/// however records are stacked in a column — and tells the server nothing about the photo.
fn a_damaged_hint_slot(g: &Gallery) {
    let plan = g.plan(RankingKind::Table);
    let shape = g.pir.thumbs.shape;
    let hint_url = format!("{}/thumbs/hint", g.pir.answer_url);
    let mut hint = decode_hint(&g.public(
        hint_url.clone(),
        PublicFile::Hint {
            db: "thumbs".into(),
        },
    ))
    .unwrap();
    // Random changes on every row of the first slot: whatever the query's secret, some byte of
    // every record stacked there decodes wrong.
    let mut rng = ChaCha20Rng::seed_from_u64(77);
    for row in 0..shape.record_len {
        for j in 0..4 {
            let v = &mut hint[row * LWE_N + j];
            *v = v.wrapping_add(rand::RngCore::next_u32(&mut rng));
        }
    }
    let hint = encode_hint(&hint);
    let g2 = g.with_thumbs_hint(&hint);
    let mut cache = PirCache::default();
    let mut views = Vec::new();
    for (j, f) in g.photos.iter().take(100).enumerate() {
        let out = search(
            &g2.part,
            &g2.pir,
            &plan,
            f,
            &mut cache,
            None,
            200 + j as u64,
            |req, body| match req {
                Request::Get { url, .. } if url == &hint_url => hint.clone(),
                _ => forward(&g.http, &g.base, req, body),
            },
        );
        assert_eq!(out.result.unwrap_err().kind, FailureKind::Hostile);
        views.push(
            out.view
                .into_iter()
                .filter(|v| v.0 == "POST")
                .collect::<Vec<_>>(),
        );
    }
    assert!(views.iter().all(|v| v == &views[0]));
    eprintln!(
        "one damaged hint slot ({} record(s) a column): 100 of 100 searches fail alike",
        shape.rows / shape.record_len
    );
}

fn a_damaged_level_record(g: &Gallery) {
    let plan = plan_of(&g.part, &g.pir, 8, 1e12, Some(RankingKind::Level)).unwrap();
    let client::pir_search::PirRanking::Level { level } = plan.ranking else {
        panic!("the server offers a level database");
    };
    // Record bytes off by a multiple of Δ: the record's hash check fails.
    a_targeted_block(
        g,
        "damaged level record",
        &plan,
        level,
        &format!("/{level}"),
        &|a| {
            a[100] = a[100].wrapping_add(1);
            a[103] = a[103].wrapping_add(2);
        },
    );
}

fn one_failure_stops_every_later_search(g: &Gallery) {
    let plan = g.plan(RankingKind::Table);
    let mut cache = PirCache::default();
    let f = &g.photos[1];
    let out = search(
        &g.part,
        &g.pir,
        &plan,
        f,
        &mut cache,
        None,
        7,
        |req, body| {
            let mut answer = forward(&g.http, &g.base, req, body);
            if matches!(req, Request::Post { .. }) {
                answer[11] ^= 0x40; // 64·Δ on the first record's third byte
            }
            answer
        },
    );
    let e = out.result.unwrap_err();
    assert_eq!(e.kind, FailureKind::Hostile);
    assert!(
        e.message
            .contains("Do not search the same photo here again"),
        "{}",
        e.message
    );
    let refusal = e.refusal.expect("a hostile failure carries its refusal");
    // The next search, of any photo, sends nothing and says why.
    let mut sent = 0;
    let out = search(
        &g.part,
        &g.pir,
        &plan,
        &g.photos[2],
        &mut cache,
        Some(&refusal),
        8,
        |r, b| {
            sent += 1;
            forward(&g.http, &g.base, r, b)
        },
    );
    let e = out.result.unwrap_err();
    assert_eq!((e.kind, sent), (FailureKind::Locked, 0));
    assert!(e.message.contains("stopped"), "{}", e.message);
    // A transport failure is not a refusal: it happened before the answer met a secret.
    let rng = ChaCha20Rng::seed_from_u64(9);
    let (mut s, step) = PirSearch::start(&g.part, &g.pir, &plan, f, &cache, None, rng);
    assert!(matches!(step, Step::Send(_)));
    match s.transport_failed("HTTP 503") {
        Step::Done(Err(e)) => {
            assert_eq!(e.kind, FailureKind::Transport);
            assert!(e.refusal.is_none());
        }
        other => panic!("{other:?}"),
    }
}
