//! `loadgen`: a load benchmark for `POST /api/v1/search` on loopback. Builds one real private
//! query (10 rows: the real one and 9 dummies; either protocol) with the native client, then
//! replays it from
//! several threads over keep-alive connections for a fixed time, and reports throughput,
//! client-side latency percentiles and the server's own p50/p99 from `/api/v1/status`.
//! Bounded in count and time; only ever talks to the address it is given (loopback).
//!
//! `--protocol blocks` benchmarks private block retrieval instead: it fetches
//! `/api/v1/partition` once, then GETs uniformly random blocks of one level (the finest by
//! default) from every thread, gzip accepted as a browser would, and reports requests/s,
//! latency percentiles, errors (a non-200 or a body of the wrong length) and bytes/s.
//!
//! `--protocol page` runs the page's whole block-search flow from `--clients` concurrent
//! clients (document revalidated by ETag, plan, release, the released blocks, hash check,
//! rank; see `privatemail_e2e::pageload`), with `--churn-token` an operator adding and
//! removing an image meanwhile, and reports searches/s, requests/s, p50/p99 and errors.

use std::time::{Duration, Instant};

use clap::Parser;
use paper::privatemail::privatize;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::api::StatusResponse;
use shared::Params;

#[derive(Parser)]
struct Args {
    /// Server base URL (loopback), e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    /// Client threads (default 4 for searches, 2 for blocks).
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Hard cap on requests per thread.
    #[arg(long, default_value_t = 200_000)]
    max_requests: usize,
    #[arg(long, default_value_t = 8)]
    k: usize,
    /// Which request to replay: `frame` (the page's: 10 frame rows with the noise std, ranked
    /// by posterior), `aligned` (Algorithm 1: 10 rows + the anchor rows, aligned) or `blocks`
    /// (GET random block files).
    #[arg(long, default_value = "frame")]
    protocol: String,
    /// Blocks only: the level to fetch from (default: the finest).
    #[arg(long)]
    level: Option<usize>,
    /// Page flow only: concurrent clients.
    #[arg(long, default_value_t = 100)]
    clients: usize,
    /// Page flow only: ε of each search and its byte budget (KiB).
    #[arg(long, default_value_t = 8.0)]
    epsilon: f64,
    #[arg(long, default_value_t = 512.0)]
    budget_kib: f64,
    /// Page flow only: the admin token; with it an operator adds and removes an image every
    /// `--churn-secs` during the load.
    #[arg(long)]
    churn_token: Option<String>,
    #[arg(long, default_value_t = 5.0)]
    churn_secs: f64,
    /// Blocks only: accept gzip (`true`, as browsers do) or ask for the plain bytes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    gzip: bool,
}

/// Latency percentile (ms) of sorted microsecond samples.
fn pct(lat: &[u32], q: f64) -> f64 {
    lat[((q * lat.len() as f64) as usize).min(lat.len() - 1)] as f64 / 1000.0
}

fn blocks(args: &Args, http: &reqwest::blocking::Client) -> Result<(), Box<dyn std::error::Error>> {
    use rand::Rng;
    let doc: shared::api::PartitionDoc = http
        .get(format!("{}/api/v1/partition", args.base))
        .send()?
        .error_for_status()?
        .json()?;
    let li = args.level.unwrap_or(doc.levels.len() - 1);
    let level = doc.levels.get(li).ok_or("no such level")?;
    let expected = if args.gzip {
        &level.transfer_bytes
    } else {
        &level.bytes
    };
    let threads = args.threads.unwrap_or(2);
    println!(
        "partition {}: level {li}, B = {}, mean block {:.0} bytes ({:.0} gzip), gzip {}",
        doc.version,
        level.blocks,
        level.bytes.iter().sum::<u64>() as f64 / level.blocks as f64,
        level.transfer_bytes.iter().sum::<u64>() as f64 / level.blocks as f64,
        args.gzip
    );
    let prefix = format!("{}{}/{li}", args.base, doc.blocks_url);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let results: Vec<(Vec<u32>, usize, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let prefix = &prefix;
                s.spawn(move || {
                    // The bytes as sent (no automatic gzip decoding, which the workspace's
                    // reqwest has for the CLI).
                    let http = reqwest::blocking::Client::builder()
                        .no_gzip()
                        .build()
                        .expect("client");
                    let mut rng = ChaCha20Rng::seed_from_u64(t as u64);
                    let (mut lat, mut errors, mut bytes) = (Vec::new(), 0usize, 0u64);
                    while Instant::now() < deadline && lat.len() < args.max_requests {
                        let b = rng.random_range(0..expected.len());
                        let t = Instant::now();
                        let mut req = http.get(format!("{prefix}/{b}"));
                        if args.gzip {
                            req = req.header("accept-encoding", "gzip");
                        }
                        let got = req.send().and_then(|r| {
                            let ok = r.status().is_success();
                            r.bytes().map(|body| (ok, body.len() as u64))
                        });
                        lat.push(t.elapsed().as_micros() as u32);
                        match got {
                            Ok((true, n)) if n == expected[b] => bytes += n,
                            _ => errors += 1,
                        }
                    }
                    (lat, errors, bytes)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut lat: Vec<u32> = results
        .iter()
        .flat_map(|(l, _, _)| l.iter().copied())
        .collect();
    let errors: usize = results.iter().map(|(_, e, _)| e).sum();
    let bytes: u64 = results.iter().map(|(_, _, b)| b).sum();
    if lat.is_empty() {
        return Err("no requests were made".into());
    }
    lat.sort_unstable();
    println!(
        "{} block GETs in {secs:.1} s with {threads} threads: {:.0} requests/s, {errors} errors, \
         {:.1} MiB/s ({:.0} bytes per response)",
        lat.len(),
        lat.len() as f64 / secs,
        bytes as f64 / secs / (1 << 20) as f64,
        bytes as f64 / (lat.len() - errors).max(1) as f64
    );
    println!(
        "client latency ms: p50 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let http = reqwest::blocking::Client::new();
    if args.protocol == "blocks" {
        return blocks(&args, &http);
    }
    if args.protocol == "page" {
        let r = privatemail_e2e::pageload::run(&privatemail_e2e::pageload::LoadSettings {
            base: args.base.clone(),
            clients: args.clients.clamp(1, 1000),
            duration: Duration::from_secs(args.seconds),
            until_versions: 0,
            max_duration: Duration::from_secs(args.seconds),
            epsilon: args.epsilon,
            max_bytes: args.budget_kib * 1024.0,
            churn_token: args.churn_token.clone(),
            churn_every: Duration::from_secs_f64(args.churn_secs.max(0.1)),
        });
        println!(
            "page flow, ε = {}, budget {} KiB: {}",
            args.epsilon,
            args.budget_kib,
            r.summary()
        );
        for e in &r.error_samples {
            println!("  error: {e}");
        }
        return if r.errors == 0 {
            Ok(())
        } else {
            Err(format!("{} errors", r.errors).into())
        };
    }
    let threads = args.threads.unwrap_or(4);
    let (config, a) = privatemail_e2e::fetch_client(&http, &args.base)?;
    let query: Vec<f64> = (0..config.feature_dim)
        .map(|i| ((i * 37) % 255) as f64 / 255.0)
        .collect();
    let params = Params {
        smlq: config.smlq,
        ..Params::default()
    };
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let req = match args.protocol.as_str() {
        "aligned" => {
            let r = privatize(&query, 0, &a, &params, &mut rng)?;
            privatemail_e2e::search_request(&r, args.k)
        }
        "frame" => {
            let anchors: shared::api::AnchorsResponse = http
                .get(format!("{}/api/v1/anchors", args.base))
                .send()?
                .json()?;
            let rows = shared::DMatrix::from_row_iterator(
                anchors.frame_rows.len(),
                config.frame_dim,
                anchors.frame_rows.iter().flatten().copied(),
            );
            let frame =
                paper::frame::AnchorFrame::new(a.features(), &rows, config.frame_kernel_scale)?;
            let r = paper::frame::privatize_in_frame(&query, &frame, 9, &params.privacy, &mut rng)?;
            paper::frame::search_request(&r, args.k, shared::api::Ranking::Proportional)
        }
        other => {
            return Err(format!("unknown protocol `{other}` (frame, aligned or blocks)").into())
        }
    };
    let body = serde_json::to_vec(&req)?;
    println!(
        "request: {} query rows, {} anchor rows, k = {}, {} bytes",
        req.query_rows.len(),
        req.anchor_rows.as_ref().map_or(0, Vec::len),
        req.k,
        body.len()
    );

    let before: StatusResponse = http
        .get(format!("{}/api/v1/status", args.base))
        .send()?
        .json()?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let url = format!("{}/api/v1/search", args.base);
    let start = Instant::now();
    let results: Vec<(Vec<u32>, usize)> = std::thread::scope(|s| {
        // The server admits searches fairly by address (`net::admission`): on loopback each
        // client is its own 127.0.x.y, as real clients would be.
        let loopback = args.base.contains("://127.");
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (url, body) = (&url, &body);
                s.spawn(move || {
                    let mut b = reqwest::blocking::Client::builder();
                    if loopback {
                        b = b.local_address(std::net::IpAddr::V4(std::net::Ipv4Addr::new(
                            127,
                            0,
                            (1 + i / 250) as u8,
                            (1 + i % 250) as u8,
                        )));
                    }
                    let http = b.build().expect("a client");
                    let mut lat = Vec::new();
                    let mut errors = 0;
                    while Instant::now() < deadline && lat.len() < args.max_requests {
                        let t = Instant::now();
                        let ok = http
                            .post(url)
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .and_then(|r| {
                                let ok = r.status().is_success();
                                r.bytes().map(|_| ok)
                            })
                            .unwrap_or(false);
                        lat.push(t.elapsed().as_micros() as u32);
                        if !ok {
                            errors += 1;
                        }
                    }
                    (lat, errors)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut lat: Vec<u32> = results
        .iter()
        .flat_map(|(l, _)| l.iter().copied())
        .collect();
    let errors: usize = results.iter().map(|(_, e)| e).sum();
    lat.sort_unstable();
    let pct = |q: f64| pct(&lat, q);
    let after: StatusResponse = http
        .get(format!("{}/api/v1/status", args.base))
        .send()?
        .json()?;
    println!(
        "{} searches in {secs:.1} s with {} threads: {:.0} searches/s, {errors} errors",
        lat.len(),
        threads,
        lat.len() as f64 / secs
    );
    println!(
        "client latency ms: p50 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "server-side (since start, {} searches): p50 {} µs, p99 {} µs",
        after.search_latency.count - before.search_latency.count.min(after.search_latency.count),
        after.search_latency.p50_us,
        after.search_latency.p99_us
    );
    Ok(())
}
