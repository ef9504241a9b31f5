//! `pirbench`: PIR, DP block retrieval and the whole gallery, measured side by side on held-out
//! photos against a running server (loopback): fidelity@8 against the exact top 8 of the whole
//! gallery, bytes up and down per search, one-time bytes, the server's core-ms per search
//! (from `/api/v1/status`) and the client's ms (native: query generation, decoding, checks,
//! ranking) after the photo is known, with the work a client does before it
//! (`client_ahead_ms`: the prepared secrets, masks and key bodies of `driver::Prepared`) apart.
//! Prints CSV rows (`--header` for the header line) and a summary on stderr.
//!
//! Held-out photos: the Fashion-MNIST training images the demo gallery never holds, at any size
//! (`data::reserved_train`).

use std::collections::HashSet;
use std::time::Instant;

use ::pir::client::Hint;
use clap::Parser;
use client::block_search::{block_url, release_blocks, verify_and_rank};
use client::pir_search::{
    rank_level, rank_query, rank_table, thumbs_decode, thumbs_prepare, thumbs_query_prepared,
    Ranked,
};
use publish::blocks::{decode, rank, Block};
use publish::pir::doc::PirDoc;
use publish::pir::hintless::{self, ScoresKeys, ScoresPublic};
use publish::plan::plan;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

use privatemail_e2e::pirsearch::{get, held_out_features, try_post, ScoresSearch};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    /// Held-out photos.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// DP blocks: the byte budget per search (KiB) and the ε values. Default: the largest of
    /// the page's budgets (128 KiB … 4 MiB) below the whole gallery's bytes on the wire, so a
    /// DP row is a real release, never the whole gallery in disguise.
    #[arg(long)]
    budget_kib: Option<f64>,
    #[arg(long, value_delimiter = ',', default_value = "8,4,2,1")]
    epsilons: Vec<f64>,
    /// Print the CSV header first.
    #[arg(long)]
    header: bool,
    /// Throughput instead of the table: this many concurrent clients (at most 200), each from
    /// its own loopback address, run whole hintless-scores searches (query, scores, ranking, 8
    /// thumbnails, checks) for `--seconds`, and the searches/s, latencies, failures and server
    /// core-ms per search are printed.
    #[arg(long)]
    throughput: Option<usize>,
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// With `--throughput`: each client first prepares this many searches' photo-independent
    /// parts (as the page does before a photo is chosen), outside the timed window, so the
    /// clients' CPU in the window is only the photo-dependent work (a client that runs out
    /// prepares the rest inside it). 0: everything inside the window.
    #[arg(long, default_value_t = 0)]
    ahead: usize,
    /// Write each PIR search's top 8 here, one line a search: `method<TAB>photo<TAB>ids` (to
    /// compare a front over row shards with one process, `scripts/shardbench.sh`).
    #[arg(long)]
    top_out: Option<std::path::PathBuf>,
    /// Sum the server core-ms of these servers' `/api/v1/status` instead of `--base`'s (a
    /// front's row shards: the front sends every PIR answer request to each of them).
    #[arg(long, value_delimiter = ',')]
    status_base: Vec<String>,
}

/// The servers whose work counters a run reads: `--status-base`, or `--base` alone.
static STATUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

fn status_bases(base: &str) -> Vec<String> {
    STATUS
        .get()
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![base.to_string()])
}

#[derive(Default)]
struct Acc {
    fidelity: f64,
    up: f64,
    down: f64,
    /// Client work after the photo is known.
    client_ms: f64,
    /// Client work done before it (`driver::Prepared`: fresh secrets, masks, key bodies).
    ahead_ms: f64,
    server_ms: f64,
    n: usize,
}

fn post(http: &Client, url: &str, body: Vec<u8>) -> Vec<u8> {
    try_post(http, url, body).unwrap_or_else(|| panic!("POST {url} failed"))
}

/// `/status`'s PIR object.
fn pir_status(http: &Client, base: &str) -> serde_json::Value {
    let s: serde_json::Value = http
        .get(format!("{base}/api/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    s["pir"].clone()
}

/// Core-ms of PIR answers so far, summed over the servers counted ([`status_bases`]).
fn server_core_ms(http: &Client, base: &str) -> f64 {
    status_bases(base)
        .iter()
        .map(|b| {
            let p = pir_status(http, b);
            p["core_ms_per_request"].as_f64().unwrap_or(0.0) * p["requests"].as_f64().unwrap_or(0.0)
        })
        .sum()
}

/// Hintless scores queries answered and the batches they were answered in, so far (of the
/// first server counted: every row shard answers every query).
fn score_batches(http: &Client, base: &str) -> (f64, f64) {
    let p = pir_status(http, &status_bases(base)[0]);
    let get = |k: &str| p[k].as_f64().unwrap_or(0.0);
    (get("score_queries"), get("score_batches"))
}

/// Each PIR search's top 8: (method, photo, ids).
type Tops = Vec<(String, usize, Vec<u64>)>;

fn share(got: &[u64], truth: &[u64]) -> f64 {
    let t: HashSet<u64> = truth.iter().copied().collect();
    got.iter().filter(|i| t.contains(i)).count() as f64 / truth.len().max(1) as f64
}

/// The PIR rows: the ranking table and each offered level's database, each followed by the
/// thumbnail round a search makes.
#[allow(clippy::too_many_arguments)]
fn pir_rows(
    http: &Client,
    base: &str,
    part: &PartitionDoc,
    pir: &PirDoc,
    feats: &[Vec<f32>],
    truth: &[Vec<u64>],
    rng: &mut ChaCha20Rng,
    rows: &mut Vec<(String, Acc, f64)>,
    tops: &mut Tops,
) {
    // Hints (one-time bytes).
    let hint_of = |db: &str, d: &publish::pir::doc::PirDbDoc| {
        let b = get(http, &format!("{base}{}/{db}/hint", pir.answer_url));
        Hint::from_bytes(&d.shape, &b, &d.hint_sha256).unwrap()
    };
    let th = hint_of("thumbs", &pir.thumbs);
    // The codebook, where the records are coded: once a version with the thumbnail hint.
    let book = privatemail_e2e::pirsearch::thumb_codebook(http, base, pir);
    let code = privatemail_e2e::pirsearch::thumb_code(part, &book);
    let thumbs_once = pir.thumbs.shape.hint_bytes() as u64
        + pir.thumbs_code.as_ref().map_or(0, |c| c.transfer_bytes);
    // A level's centroids, fetched once by the plans that rank at it.
    let cents_once = |l: usize| part.levels[l].centroids_bytes;
    let thumbs_round = |r: &Ranked, rng: &mut ChaCha20Rng, acc: &mut Acc| {
        let t = Instant::now();
        let prepared = thumbs_prepare(part, pir, 8, rng).unwrap();
        acc.ahead_ms += t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let (body, pending) = thumbs_query_prepared(pir, prepared, Some(r), 8, rng).unwrap();
        acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
        acc.up += body.len() as f64;
        let ans = post(http, &format!("{base}{}/thumbs", pir.answer_url), body);
        acc.down += ans.len() as f64;
        let t = Instant::now();
        thumbs_decode(&pending, &th, &ans, r, &code).unwrap();
        acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
    };

    // PIR with the ranking table.
    if let Some(tdoc) = &pir.rank_table {
        let table = get(http, &format!("{base}{}/rank", pir.answer_url));
        let mut acc = Acc::default();
        let s0 = server_core_ms(http, base);
        for (i, (q, tr)) in feats.iter().zip(truth).enumerate() {
            let t = Instant::now();
            let r = rank_table(pir, &table, q, 8).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            let ids: Vec<u64> = r.hits.iter().map(|h| h.id).collect();
            acc.fidelity += share(&ids, tr);
            tops.push(("pir-table".into(), i, ids));
            thumbs_round(&r, rng, &mut acc);
            acc.n += 1;
        }
        acc.server_ms = server_core_ms(http, base) - s0;
        let once = (tdoc.transfer_bytes + thumbs_once) as f64;
        rows.push(("pir-table".into(), acc, once));
    }
    // PIR with the hintless ranking of the capped level (the public file and the keys' masks
    // once per version, as the page keeps them; the CLI redoes them per search).
    if let Some(sd) = &pir.scores {
        let file = get(http, &format!("{base}{}/scores/hint", pir.answer_url));
        let t = Instant::now();
        let public = ScoresPublic::decode(sd, part, &file).unwrap();
        let keys = ScoresKeys::new(part, sd).unwrap();
        eprintln!(
            "pirbench: hintless ranking at level {} ({} blocks of at most {} rows): public file {} KiB ({} KiB gzip), decoded with the keys' masks in {:.0} ms",
            sd.level,
            sd.blocks,
            sd.rows,
            sd.public.bytes / 1024,
            sd.public.transfer_bytes / 1024,
            t.elapsed().as_secs_f64() * 1e3
        );
        let cents = privatemail_e2e::level_centroids(http, base, part, sd.level);
        let url = format!("{base}{}/scores", pir.answer_url);
        let mut acc = Acc::default();
        let s0 = server_core_ms(http, base);
        for (i, (q, tr)) in feats.iter().zip(truth).enumerate() {
            let t = Instant::now();
            let prepared = hintless::prepare(part, sd, &keys, rng).unwrap();
            acc.ahead_ms += t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let (body, pending) = hintless::query_prepared(part, sd, prepared, &cents, q).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            acc.up += body.len() as f64;
            let ans = post(http, &url, body);
            acc.down += ans.len() as f64;
            let t = Instant::now();
            let r =
                hintless::rank(sd, &pir.thumbs.shape, &keys, &public, &pending, &ans, 8).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            let ids: Vec<u64> = r.hits.iter().map(|h| h.id).collect();
            acc.fidelity += share(&ids, tr);
            tops.push(("pir-scores".into(), i, ids));
            thumbs_round(&r, rng, &mut acc);
            acc.n += 1;
        }
        acc.server_ms = server_core_ms(http, base) - s0;
        let once = (sd.public.transfer_bytes + thumbs_once + cents_once(sd.level)) as f64;
        rows.push((format!("pir-scores-B{}", sd.blocks), acc, once));
    }
    // PIR with each offered level's database.
    for (l, db) in pir.levels.iter().enumerate() {
        let Some(db) = db else { continue };
        let lh = hint_of(&l.to_string(), db);
        let cents = privatemail_e2e::level_centroids(http, base, part, l);
        let mut acc = Acc::default();
        let s0 = server_core_ms(http, base);
        for (i, (q, tr)) in feats.iter().zip(truth).enumerate() {
            let t = Instant::now();
            let (body, pending) = rank_query(part, pir, l, &cents, q, rng).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            acc.up += body.len() as f64;
            let ans = post(http, &format!("{base}{}/{l}", pir.answer_url), body);
            acc.down += ans.len() as f64;
            let t = Instant::now();
            let r = rank_level(pir, l, &pending, &lh, &ans, q, 8).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            let ids: Vec<u64> = r.hits.iter().map(|h| h.id).collect();
            acc.fidelity += share(&ids, tr);
            tops.push((format!("pir-level-{l}"), i, ids));
            thumbs_round(&r, rng, &mut acc);
            acc.n += 1;
        }
        acc.server_ms = server_core_ms(http, base) - s0;
        let once = (db.shape.hint_bytes() as u64 + thumbs_once + cents_once(l)) as f64;
        rows.push((format!("pir-level-B{}", part.levels[l].blocks), acc, once));
    }
}

/// `clients` threads, each running whole hintless-scores searches of held-out photos back to
/// back for `seconds` (the public file, the keys' masks and the thumbnail hint fetched once,
/// as the page keeps them). A search counts when every answer came back and was checked.
/// With `ahead`, each client prepares that many searches' photo-independent parts before the
/// window opens (all clients start together).
fn throughput(
    http: &Client,
    base: &str,
    part: &PartitionDoc,
    pir: &PirDoc,
    clients: usize,
    seconds: u64,
    ahead: usize,
) {
    let searcher = ScoresSearch::new(http, base, part, pir);
    let feats = held_out_features(200);
    let ready = std::sync::Barrier::new(clients + 1);
    let window = std::time::Duration::from_secs(seconds);
    let (mut s0, mut b0, mut t0) = (0.0, (0.0, 0.0), Instant::now());
    // Per client: (latencies of the searches done, failures, searches not prepared ahead).
    let per_client: Vec<(Vec<f64>, usize, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (searcher, feats, ready) = (&searcher, &feats, &ready);
                scope.spawn(move || {
                    // Each client its own address (127.0.0.10, .11, …): the server's admission is
                    // fair by client address, and these are distinct users, not one.
                    let http = Client::builder()
                        .local_address(std::net::IpAddr::from([127, 0, 0, 10 + c as u8]))
                        .no_gzip()
                        .build()
                        .unwrap();
                    let mut rng = ChaCha20Rng::seed_from_u64(100 + c as u64);
                    let mut prepared: Vec<_> =
                        (0..ahead).map(|_| searcher.prepare(&mut rng)).collect();
                    ready.wait();
                    let deadline = Instant::now() + window;
                    let (mut done, mut failed, mut inline) = (Vec::new(), 0usize, 0usize);
                    let mut i = c;
                    while Instant::now() < deadline {
                        let q = &feats[i % feats.len()];
                        i += clients;
                        let t = Instant::now();
                        let ok = match prepared.pop() {
                            Some(a) => searcher.search_prepared(&http, q, a, &mut rng),
                            None if ahead > 0 => {
                                inline += 1;
                                searcher.search(&http, q, &mut rng)
                            }
                            None => searcher.search(&http, q, &mut rng),
                        };
                        match ok {
                            Some(_) => done.push(t.elapsed().as_secs_f64()),
                            None => {
                                failed += 1;
                                // A refused client comes back no sooner than `Retry-After`
                                // (at least a second), as the page and the CLI would.
                                std::thread::sleep(std::time::Duration::from_secs(1));
                            }
                        }
                    }
                    (done, failed, inline)
                })
            })
            .collect();
        ready.wait();
        (s0, b0, t0) = (
            server_core_ms(http, base),
            score_batches(http, base),
            Instant::now(),
        );
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = per_client.iter().flat_map(|(d, ..)| d.clone()).collect();
    let failed: usize = per_client.iter().map(|(_, f, _)| f).sum();
    let inline: usize = per_client.iter().map(|(.., n)| n).sum();
    let how = if ahead > 0 {
        format!(", {ahead} searches a client prepared ahead ({inline} prepared in the window)")
    } else {
        String::new()
    };
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)));
    let core_ms = (server_core_ms(http, base) - s0) / lat.len().max(1) as f64;
    let (q1, b1) = score_batches(http, base);
    let batch = (q1 - b0.0) / (b1 - b0.1).max(1.0);
    println!(
        "pirbench throughput: {} items, hintless scores (level {}, {} blocks of at most {} rows), {clients} clients{how}, {wall:.1} s: {} searches, {:.3} searches/s, p50 {:.2} s, p99 {:.2} s, {failed} failed, server {core_ms:.0} core-ms per search, rankings answered in batches of {batch:.2} on average",
        part.gallery_size,
        searcher.sd.level,
        searcher.sd.blocks,
        searcher.sd.rows,
        lat.len(),
        lat.len() as f64 / wall,
        pct(0.5).copied().unwrap_or(0.0),
        pct(0.99).copied().unwrap_or(0.0),
    );
}

fn main() {
    let a = Args::parse();
    let _ = STATUS.set(a.status_base.clone());
    let http = Client::builder().no_gzip().build().unwrap();
    let base = a.base.trim_end_matches('/');
    // A server whose partition build failed serves without one: say so, not a decode error.
    let r = http
        .get(format!("{base}/api/v1/partition"))
        .send()
        .expect("the server answers");
    if !r.status().is_success() {
        eprintln!(
            "pirbench: the server has no partition ({}): {}",
            r.status(),
            r.text().unwrap_or_default()
        );
        std::process::exit(1);
    }
    let part: PartitionDoc = r.json().expect("the partition document");
    // Absent where the server offers no PIR (above `MAX_PIR_ITEMS`): the other rows still run.
    let pir: Option<PirDoc> = http
        .get(format!("{base}/api/v1/pir"))
        .send()
        .ok()
        .filter(|r| r.status().is_success())
        .map(|r| r.json().expect("PIR document"));
    let n = part.gallery_size;
    if let Some(clients) = a.throughput {
        if !(1..=200).contains(&clients) {
            eprintln!("pirbench: --throughput takes 1 to 200 clients");
            std::process::exit(2);
        }
        let pir = pir.expect("throughput needs a server that offers PIR");
        throughput(&http, base, &part, &pir, clients, a.seconds, a.ahead);
        return;
    }
    let feats = held_out_features(a.queries);

    // The exact top 8 over the same i16 features every client ranks: the whole gallery's block,
    // or (1,000,000 items publish no whole level) the PIR ranking table, which holds them all.
    let t = Instant::now();
    let whole_l = part.levels.iter().position(|l| l.whole);
    let whole: Option<Block> = whole_l.map(|l| {
        let raw = get(&http, &format!("{base}{}", block_url(&part, l, 0)));
        decode(&raw, Some(&part.levels[l].hashes[0])).unwrap()
    });
    let table: Option<Vec<u8>> = match (&whole, &pir) {
        (None, Some(pir)) if pir.rank_table.is_some() => {
            Some(get(&http, &format!("{base}{}/rank", pir.answer_url)))
        }
        _ => None,
    };
    let exact = |q: &[f32]| -> Vec<u64> {
        let hits = match (&whole, &table, &pir) {
            (Some(w), _, _) => rank(q, std::slice::from_ref(w), 8).unwrap(),
            (None, Some(t), Some(pir)) => rank_table(pir, t, q, 8).unwrap().hits,
            _ => panic!("no whole level and no ranking table: the exact top 8 is unknown"),
        };
        hits.iter().map(|h| h.id).collect()
    };
    let truth: Vec<Vec<u64>> = feats.iter().map(|q| exact(q)).collect();
    eprintln!(
        "pirbench: {} items, {} held-out photos, exact top 8 from the {} in {:.1} s",
        n,
        feats.len(),
        if whole.is_some() {
            "whole gallery"
        } else {
            "ranking table"
        },
        t.elapsed().as_secs_f64()
    );
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut rows: Vec<(String, Acc, f64)> = Vec::new();
    let mut tops = Tops::new();
    match &pir {
        Some(pir) => pir_rows(
            &http, base, &part, pir, &feats, &truth, &mut rng, &mut rows, &mut tops,
        ),
        None => eprintln!("pirbench: this server offers no PIR"),
    }
    if let Some(path) = &a.top_out {
        let lines: String = tops
            .iter()
            .map(|(m, i, ids)| {
                let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                format!("{m}\t{i}\t{}\n", ids.join(","))
            })
            .collect();
        std::fs::write(path, lines).expect("write --top-out");
    }
    // DP blocks at each ε within the budget (bytes: the blocks' gzip sizes on the wire).
    let whole_kib = whole_l.map_or(f64::INFINITY, |l| {
        part.levels[l].transfer_bytes[0] as f64 / 1024.0
    });
    let budget_kib = a.budget_kib.unwrap_or_else(|| {
        [128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0]
            .into_iter()
            .rfind(|&b| b < whole_kib)
            .unwrap_or(128.0)
    });
    for &eps in &a.epsilons {
        let Ok(p) = plan(&part, eps, budget_kib * 1024.0) else {
            eprintln!("pirbench: no block plan at ε = {eps} within {budget_kib} KiB");
            continue;
        };
        let cents = (p.size < p.blocks)
            .then(|| privatemail_e2e::level_centroids(&http, base, &part, p.level));
        let mut acc = Acc::default();
        for (q, tr) in feats.iter().zip(&truth) {
            let t = Instant::now();
            let req = release_blocks(&part, &p, cents.as_ref(), q, &mut rng).unwrap();
            let mut ms = t.elapsed().as_secs_f64() * 1e3;
            let fetched: Vec<(u32, Vec<u8>)> = req
                .fetch
                .iter()
                .map(|&b| {
                    acc.down += part.levels[req.level].transfer_bytes[b as usize] as f64;
                    (
                        b,
                        get(&http, &format!("{base}{}", block_url(&part, req.level, b))),
                    )
                })
                .collect();
            let refs: Vec<(u32, &[u8])> = fetched.iter().map(|(b, v)| (*b, v.as_slice())).collect();
            let t = Instant::now();
            let (hits, _) = verify_and_rank(&part, req.level, &refs, q, 8).unwrap();
            ms += t.elapsed().as_secs_f64() * 1e3;
            acc.client_ms += ms;
            acc.fidelity += share(&hits.iter().map(|h| h.id).collect::<Vec<_>>(), tr);
            acc.n += 1;
        }
        rows.push((format!("blocks-eps{eps}-{budget_kib}KiB"), acc, 0.0));
    }
    // The whole gallery, fetched once and kept: per search nothing (where it is offered).
    if let (Some(l), Some(w)) = (whole_l, &whole) {
        let mut acc = Acc::default();
        for (q, tr) in feats.iter().zip(&truth) {
            let t = Instant::now();
            let hits = rank(q, std::slice::from_ref(w), 8).unwrap();
            acc.client_ms += t.elapsed().as_secs_f64() * 1e3;
            acc.fidelity += share(&hits.iter().map(|h| h.id).collect::<Vec<_>>(), tr);
            acc.n += 1;
        }
        let once = part.levels[l].transfer_bytes[0] as f64;
        rows.push(("whole-gallery".into(), acc, once));
    }
    if a.header {
        println!("gallery,method,queries,fidelity_at_8,kib_up,kib_down,one_time_kib,server_core_ms,client_ms,client_ahead_ms");
    }
    for (name, acc, once) in &rows {
        let k = acc.n.max(1) as f64;
        println!(
            "{n},{name},{},{:.4},{:.1},{:.1},{:.0},{:.1},{:.2},{:.2}",
            acc.n,
            acc.fidelity / k,
            acc.up / k / 1024.0,
            acc.down / k / 1024.0,
            once / 1024.0,
            acc.server_ms / k,
            acc.client_ms / k,
            acc.ahead_ms / k
        );
    }
}
