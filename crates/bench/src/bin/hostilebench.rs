//! `hostilebench`: a running server measured against hostile clients on loopback
//! (`scripts/hostilebench.sh` starts a release server at 10,000 images and runs this):
//!
//! 1. **Half-sent requests**: 3,000 connections that never finish (half of them a request
//!    head, half a body), from 300 each of ten addresses: `/api/v1/config`'s latency while they are open, how long until the
//!    server has closed every one, and its RSS growth.
//! 2. **Stalled uploads**: 256 connections each declaring 16 MiB of PIR query (refused unread),
//!    256 sending all but the last byte of a valid scores query, 256 all but the last byte of
//!    a 1 MiB JSON body: RSS growth of each, and what the server answered.
//! 3. **Fairness**: one client (127.0.0.1) with 10 connections sending scores queries back to
//!    back while another (127.0.0.2) runs whole hintless searches: its success rate and p99
//!    against the same searches unloaded.
//! 4. **Hostile addresses** (each client its own 127.0.0.x; issue #63's probes): one address
//!    opening 4,300 stalled searches, 64 slow 1 MiB bodies from 8 addresses, 300 slow readers,
//!    one address hammering the most expensive searches, hyper's own refusals, and 90
//!    addresses' PIR queries and then their whole hintless searches, paced (one every twice an unloaded one's time in all), with
//!    and without one hostile address running 10 PIR loops: the ratio over all their
//!    queries, a failure counted as an infinite latency.
//! 5. **SIGTERM** with 600 half-sent requests open (from two addresses): seconds until the process is gone.
//!
//! Prints one line per figure (`name: value`), for the README.

use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use privatemail_e2e::pirsearch::{held_out_features, Ahead, ScoresSearch};
use privatemail_e2e::raw;
use publish::pir::doc::PirDoc;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use reqwest::blocking::Client;
use shared::api::PartitionDoc;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    /// The server's process id (RSS from /proc; SIGTERM at the end).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 3000)]
    half_sent: usize,
    #[arg(long, default_value_t = 256)]
    uploads: usize,
    /// Searches of the other client, unloaded and under attack.
    #[arg(long, default_value_t = 40)]
    searches: usize,
    /// Connections the one hostile address opens (probe 4).
    #[arg(long, default_value_t = 4300)]
    address_conns: usize,
    /// Addresses whose PIR queries are timed with and without a hostile address (probe 4).
    #[arg(long, default_value_t = 90)]
    victims: usize,
    /// Only the hostile-address probes (4), then SIGTERM unless --keep-running.
    #[arg(long)]
    addresses_only: bool,
    /// Skip the SIGTERM step (the server keeps running).
    #[arg(long)]
    keep_running: bool,
    /// Only the latency ratio under one hostile address (the end of probe 4); the server
    /// keeps running.
    #[arg(long)]
    ratio_only: bool,
}

fn rss_mb(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

/// Samples the server's RSS every 50 ms while `work` runs; (before, peak) in MB.
fn with_rss_peak<T>(pid: u32, work: impl FnOnce() -> T) -> (T, f64, f64) {
    let before = rss_mb(pid);
    let stop = AtomicBool::new(false);
    let (out, peak) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = before;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss_mb(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        });
        let out = work();
        stop.store(true, Ordering::Relaxed);
        (out, sampler.join().unwrap())
    });
    (out, before, peak)
}

fn raise_own_file_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

fn open(addr: &str, bytes: &[u8]) -> Option<TcpStream> {
    raw::half_sent(addr, bytes).ok()
}

/// Connections a crowd probe opens from one address: below the default per-address share
/// (4,096 / 8), so the probe measures the server's global bounds, not the address cap that
/// probe 4 measures.
const CROWD_PER_ADDRESS: usize = 300;

/// The `i`-th connection of a crowd probe (127.0.2.x, [`CROWD_PER_ADDRESS`] each), half-sent.
fn open_in_crowd(addr: &str, i: usize, bytes: &[u8]) -> Option<TcpStream> {
    let host = u8::try_from(1 + i / CROWD_PER_ADDRESS).expect("a crowd of at most 76,500");
    raw::half_sent_from(addr, ip(2, host), bytes).ok()
}

/// Reads until the server closes `s`: when, and its status line.
fn wait_closed(s: &mut TcpStream, deadline: Instant) -> Option<(Instant, String)> {
    raw::read_until_closed(s, deadline).map(|(t, sent)| {
        let line = sent
            .lines()
            .next()
            .unwrap_or("(closed without an answer)")
            .to_string();
        (t, line)
    })
}

fn timed_get(http: &Client, url: &str) -> Duration {
    let t = Instant::now();
    let r = http.get(url).send().expect("the server answers");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let _ = r.bytes();
    t.elapsed()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn counts(lines: &[String]) -> String {
    let mut m = std::collections::BTreeMap::<String, usize>::new();
    for l in lines {
        let k = l.split(' ').take(2).collect::<Vec<_>>().join(" ");
        *m.entry(k).or_default() += 1;
    }
    m.iter()
        .map(|(k, v)| format!("{v}× {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn half_sent(a: &Args, addr: &str, http: &Client) {
    let body_head =
        b"POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                      Content-Length: 100000\r\n\r\n{\"k\": 8, \"query_rows\": [";
    let ((socks, config_ms), before, peak) = with_rss_peak(a.pid, || {
        let socks: Vec<TcpStream> = (0..a.half_sent)
            .filter_map(|i| {
                if i % 2 == 0 {
                    open_in_crowd(
                        addr,
                        i,
                        b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\nAccept: */",
                    )
                } else {
                    open_in_crowd(addr, i, body_head)
                }
            })
            .collect();
        let mut ms: Vec<f64> = (0..20)
            .map(|_| timed_get(http, &format!("{}/api/v1/config", a.base)).as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        (socks, ms)
    });
    let opened = Instant::now();
    let n = socks.len();
    let deadline = opened + Duration::from_secs(60);
    let mut closed = Vec::new();
    let mut lines = Vec::new();
    for mut s in socks {
        if let Some((t, line)) = wait_closed(&mut s, deadline) {
            closed.push(t.duration_since(opened).as_secs_f64());
            lines.push(line);
        }
    }
    closed.sort_by(f64::total_cmp);
    println!("half-sent requests open: {n} of {}", a.half_sent);
    println!(
        "half-sent: /api/v1/config while open: median {:.1} ms, max {:.1} ms",
        pct(&config_ms, 0.5),
        config_ms.last().unwrap()
    );
    println!(
        "half-sent: closed by the server within 60 s: {} of {n}; the last {:.1} s after all were open",
        closed.len(),
        closed.last().copied().unwrap_or(f64::NAN)
    );
    println!("half-sent: answers: {}", counts(&lines));
    println!(
        "half-sent: server RSS {before:.0} MB before, peak {peak:.0} MB (+{:.0} MB), {:.0} MB after",
        peak - before,
        rss_mb(a.pid)
    );
}

/// `count` connections sending `head` and then `body_len - 1` bytes of zeros, stalled; what
/// the server answered and its RSS growth.
fn stalled(a: &Args, addr: &str, what: &str, head: &str, sent: usize) {
    let (socks, before, peak) = with_rss_peak(a.pid, || {
        let socks: Vec<TcpStream> = (0..a.uploads)
            .filter_map(|_| {
                let mut s = open(addr, head.as_bytes())?;
                // The server may answer (and stop reading) before all of it is sent.
                let _ = s.write_all(&vec![0u8; sent]);
                Some(s)
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        socks
    });
    let n = socks.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    let lines: Vec<String> = socks
        .into_iter()
        .filter_map(|mut s| wait_closed(&mut s, deadline).map(|x| x.1))
        .collect();
    println!(
        "stalled {what}: {n} open; server RSS {before:.0} MB before, peak {peak:.0} MB (+{:.0} MB), {:.0} MB after; answers: {}",
        peak - before,
        rss_mb(a.pid),
        counts(&lines)
    );
}

fn from(ip: &str) -> Client {
    Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .no_gzip()
        .build()
        .unwrap()
}

/// Whole searches of the other client: (latencies in s, failures).
fn searches(s: &ScoresSearch, feats: &[Vec<f32>], n: usize, seed: u64) -> (Vec<f64>, usize) {
    let http = from("127.0.0.2");
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let (mut lat, mut failed) = (Vec::new(), 0);
    for i in 0..n {
        let t = Instant::now();
        match s.search(&http, &feats[i % feats.len()], &mut rng) {
            Some(()) => lat.push(t.elapsed().as_secs_f64()),
            None => failed += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    (lat, failed)
}

fn fairness(a: &Args, http: &Client, part: &PartitionDoc, pir: &PirDoc) {
    let s = ScoresSearch::new(http, &a.base, part, pir);
    let feats = held_out_features(100);
    let (calm, calm_failed) = searches(&s, &feats, a.searches, 1);
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let bodies: Vec<Vec<u8>> = (0..10)
        .map(|i| s.scores_body(&feats[50 + i], &mut rng))
        .collect();
    let stop = AtomicBool::new(false);
    let ((loaded, loaded_failed), attacker) = std::thread::scope(|scope| {
        let hammers: Vec<_> = bodies
            .iter()
            .map(|body| {
                let (stop, url) = (&stop, &s.scores_url);
                scope.spawn(move || {
                    let http = from("127.0.0.1");
                    let (mut ok, mut refused, mut other) = (0usize, 0usize, 0usize);
                    while !stop.load(Ordering::Relaxed) {
                        let r = http
                            .post(url)
                            .header("content-type", "application/octet-stream")
                            .body(body.clone())
                            .send();
                        match r.map(|r| r.status().as_u16()) {
                            Ok(200) => ok += 1,
                            Ok(503) => refused += 1,
                            _ => other += 1,
                        }
                    }
                    (ok, refused, other)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        let r = searches(&s, &feats, a.searches, 3);
        stop.store(true, Ordering::Relaxed);
        let att = hammers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0, 0), |x, y| (x.0 + y.0, x.1 + y.1, x.2 + y.2));
        (r, att)
    });
    let p99 = |l: &[f64]| if l.is_empty() { f64::NAN } else { pct(l, 0.99) };
    println!(
        "fairness: unloaded: {} searches, {calm_failed} failed, p50 {:.0} ms, p99 {:.0} ms",
        calm.len(),
        pct(&calm, 0.5) * 1e3,
        p99(&calm) * 1e3
    );
    println!(
        "fairness: with one client hammering scores on 10 connections: {} of {} searches succeeded ({:.0} %), p50 {:.0} ms, p99 {:.0} ms ({:.2}× unloaded)",
        loaded.len(),
        a.searches,
        100.0 * loaded.len() as f64 / a.searches as f64,
        if loaded.is_empty() { f64::NAN } else { pct(&loaded, 0.5) * 1e3 },
        p99(&loaded) * 1e3,
        p99(&loaded) / p99(&calm),
    );
    println!(
        "fairness: the hammering client: {} answered, {} refused with 503, {} other ({loaded_failed} of the other client's searches failed)",
        attacker.0, attacker.1, attacker.2
    );
}

fn sigterm(a: &Args, addr: &str) {
    let _socks: Vec<TcpStream> = (0..600)
        .filter_map(|i| {
            if i % 6 == 0 {
                open_in_crowd(addr, i, &raw::stalled_search(1000))
            } else {
                open_in_crowd(addr, i, b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\n")
            }
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    // SAFETY: kill with a valid signal on a pid we were given.
    unsafe { libc::kill(a.pid as i32, libc::SIGTERM) };
    while alive(a.pid) && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "sigterm with 600 half-sent requests open: the process {} after {:.2} s",
        if alive(a.pid) {
            "still runs"
        } else {
            "was gone"
        },
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    let a = Args::parse();
    raise_own_file_limit();
    let http = Client::builder().no_gzip().build().unwrap();
    let addr = a
        .base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let part: PartitionDoc = http
        .get(format!("{}/api/v1/partition", a.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let pir: PirDoc = http
        .get(format!("{}/api/v1/pir", a.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    eprintln!("hostilebench: {} items", part.gallery_size);
    if a.ratio_only {
        latency_ratio(&a, &part, &pir);
        return;
    }
    if a.addresses_only {
        addresses(&a, &addr, &part, &pir);
        if !a.keep_running {
            sigterm(&a, &addr);
        }
        return;
    }
    half_sent(&a, &addr, &http);
    let big = (16 << 20) - 1;
    stalled(
        &a,
        &addr,
        "16 MiB PIR uploads",
        &format!(
            "POST {}/thumbs HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {big}\r\n\r\n",
            pir.answer_url
        ),
        1 << 20,
    );
    if let Some(sd) = &pir.scores {
        let n = sd.upload_bytes as usize;
        stalled(
            &a,
            &addr,
            &format!("valid scores uploads ({} KiB)", n / 1024),
            &format!(
                "POST {}/scores HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\n\r\n",
                pir.answer_url
            ),
            n - 1,
        );
    }
    let json = (1 << 20) - 1;
    stalled(
        &a,
        &addr,
        "1 MiB JSON searches",
        &format!(
            "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {json}\r\n\r\n"
        ),
        json - 1,
    );
    fairness(&a, &http, &part, &pir);
    addresses(&a, &addr, &part, &pir);
    let status: serde_json::Value = http
        .get(format!("{}/api/v1/status", a.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    println!("refusals counted in /status: {}", status["refusals"]);
    if !a.keep_running {
        sigterm(&a, &addr);
    }
}

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(127, 0, a, b))
}

fn client_at(ip: IpAddr) -> Client {
    Client::builder()
        .local_address(ip)
        .no_gzip()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// `n` GETs of `path` from `ip`, one after another: (answered 200, sorted latencies in ms).
fn gets(base: &str, ip: IpAddr, path: &str, n: usize) -> (usize, Vec<f64>) {
    let http = client_at(ip);
    let mut ms = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        if let Ok(r) = http.get(format!("{base}{path}")).send() {
            if r.status().is_success() && r.bytes().is_ok() {
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    ms.sort_by(f64::total_cmp);
    (ms.len(), ms)
}

fn refusal(base: &str, kind: &str) -> u64 {
    let st: serde_json::Value = client_at(ip(0, 250))
        .get(format!("{base}/api/v1/status"))
        .send()
        .and_then(|r| r.json())
        .unwrap_or_default();
    st["refusals"][kind].as_u64().unwrap_or(0)
}

/// The first line of what the server sends on a raw request (read until it closes).
fn raw_status(addr: &str, bytes: &[u8]) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "(no connection)".into();
    };
    let _ = s.write_all(bytes);
    let got = raw::read_until_closed(&mut s, Instant::now() + Duration::from_secs(10))
        .map(|x| x.1)
        .unwrap_or_default();
    let json = got
        .to_ascii_lowercase()
        .contains("content-type: application/json");
    format!(
        "{} ({})",
        got.lines().next().unwrap_or("(closed without an answer)"),
        if json { "JSON" } else { "not JSON" }
    )
}

/// Timed operations from `victims` addresses (127.0.1.x), `rounds` each, paced: operation
/// `j` of all (address `j % victims`, its round `j / victims`) starts `j × gap` after the
/// start (or when that address's previous one ended, if later), so the light load itself
/// offers one operation per `gap` and does not overrun the queue (90 addresses sending at
/// once overran its 16 places: 265 of 450 refused unloaded). `op(http, j)` runs operation `j`
/// over its address's client. Every operation counts: a failure (a refusal included) is an
/// infinite latency, so a percentile it reaches is infinite. Sorted latencies (ms, failures as
/// `inf`) and the number of failures.
fn victims_timed(
    victims: usize,
    rounds: usize,
    gap: Duration,
    op: &(dyn Fn(&Client, usize) -> Result<(), String> + Sync),
) -> (Vec<f64>, usize) {
    let start = Instant::now();
    let why_failed = std::sync::Mutex::new(Vec::new());
    let out: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..victims)
            .map(|v| {
                let why_failed = &why_failed;
                scope.spawn(move || {
                    let http = client_at(ip(1, 1 + v as u8));
                    let mut ms = Vec::new();
                    for i in 0..rounds {
                        let j = i * victims + v;
                        let due = start + gap * j as u32;
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        let t = Instant::now();
                        match op(&http, j) {
                            Ok(()) => ms.push(t.elapsed().as_secs_f64() * 1e3),
                            Err(why) => {
                                ms.push(f64::INFINITY);
                                why_failed.lock().unwrap().push(why);
                            }
                        }
                    }
                    ms
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ms: Vec<f64> = out.into_iter().flatten().collect();
    ms.sort_by(f64::total_cmp);
    let failed = ms.iter().filter(|m| m.is_infinite()).count();
    let why = why_failed.into_inner().unwrap();
    if !why.is_empty() {
        println!(
            "addresses: why victims' operations failed: {}",
            counts(&why)
        );
    }
    (ms, failed)
}

/// One PIR thumbnail query (a well-formed one of `shape`, its fill by `j`) to `url`.
fn thumb_query(
    http: &Client,
    url: &str,
    shape: &pir::layout::Shape,
    j: usize,
) -> Result<(), String> {
    http.post(url)
        .header("content-type", "application/octet-stream")
        .body(raw::pir_query(shape, (j % 7) as u8))
        .send()
        .map_err(|e| format!("{e:?}"))
        .and_then(|r| match r.status().as_u16() {
            200 => r.bytes().map(|_| ()).map_err(|e| format!("{e:?}")),
            s => Err(format!("HTTP {s}")),
        })
}

fn addresses(a: &Args, addr: &str, part: &PartitionDoc, pir: &PirDoc) {
    let base = a.base.as_str();
    // 1. One address, 4,300 stalled searches (a whole head declaring one byte that never comes).
    let head = b"POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n";
    let socks: Vec<TcpStream> = (0..a.address_conns)
        .filter_map(|_| raw::half_sent_from(addr, ip(0, 1), head).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = socks.iter().filter(|s| !raw::closed_or_answered(s)).count();
    let (ok, ms) = gets(base, ip(0, 2), "/api/v1/config", 100);
    println!(
        "addresses: one address opening {} stalled searches: {open} still open (its share); another address's /api/v1/config: {ok} of 100 answered, p50 {:.1} ms, max {:.1} ms; refusals address_cap {}, evicted_idle {}",
        socks.len(),
        pct(&ms, 0.5),
        ms.last().copied().unwrap_or(f64::NAN),
        refusal(base, "address_cap"),
        refusal(base, "evicted_idle")
    );
    drop(socks);
    std::thread::sleep(Duration::from_secs(1));
    // 2. 64 bodies declaring 1 MiB, sent at 1 KB/s from 8 addresses, while another searches.
    let config: shared::api::ConfigResponse = client_at(ip(0, 2))
        .get(format!("{base}/api/v1/config"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let search = serde_json::json!({
        "query_rows": vec![vec![0.1; config.frame_dim]; 10],
        "k": 8,
        "noise_std": 0.5,
    });
    let json_head = format!(
        "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        1 << 20
    );
    let t0 = Instant::now();
    let (searched, cut) = std::thread::scope(|scope| {
        let slow: Vec<_> = (0..64u8)
            .map(|i| {
                let head = json_head.clone();
                scope.spawn(move || {
                    let mut s =
                        raw::half_sent_from(addr, ip(0, 3 + i % 8), head.as_bytes()).ok()?;
                    let t = Instant::now();
                    // 1 KB/s until the server cuts the body (or 40 s).
                    while t.elapsed() < Duration::from_secs(40) {
                        if s.write_all(&[b' '; 100]).is_err() || raw::closed_or_answered(&s) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    let line =
                        raw::read_until_closed(&mut s, Instant::now() + Duration::from_secs(5))
                            .map(|x| x.1.lines().next().unwrap_or("").to_string())
                            .unwrap_or_default();
                    Some((t.elapsed().as_secs_f64(), line))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let http = client_at(ip(0, 11));
        let ok = (0..30)
            .filter(|_| {
                http.post(format!("{base}/api/v1/search"))
                    .json(&search)
                    .send()
                    .is_ok_and(|r| r.status().as_u16() == 200)
            })
            .count();
        let cut: Vec<(f64, String)> = slow.into_iter().filter_map(|h| h.join().unwrap()).collect();
        (ok, cut)
    });
    let lines: Vec<String> = cut.iter().map(|c| c.1.clone()).collect();
    let latest = cut.iter().map(|c| c.0).fold(0.0, f64::max);
    println!(
        "addresses: 64 bodies declaring 1 MiB at 1 KB/s from 8 addresses: another address's searches meanwhile {searched} of 30 answered 200; the slow bodies: {} (the last cut {latest:.1} s after it began; {:.1} s in all)",
        counts(&lines),
        t0.elapsed().as_secs_f64()
    );
    // 3. 300 slow readers of the largest hint: 16 KB every 3 s.
    let hint_path = format!("{}/thumbs/hint", pir.answer_url);
    let hint_size = client_at(ip(0, 12))
        .get(format!("{base}{hint_path}"))
        .send()
        .and_then(|r| r.bytes())
        .map_or(0, |b| b.len());
    let t0 = Instant::now();
    let readers: Vec<f64> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..300)
            .map(|_| {
                let path = hint_path.clone();
                scope.spawn(move || {
                    let mut s = raw::connect_from(addr, ip(0, 12), Some(16 << 10)).ok()?;
                    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                        .ok()?;
                    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                    let t = Instant::now();
                    let mut buf = vec![0u8; 16 << 10];
                    while t.elapsed() < Duration::from_secs(60) {
                        match std::io::Read::read(&mut s, &mut buf) {
                            Ok(0) | Err(_) => return Some(t.elapsed().as_secs_f64()),
                            Ok(_) => std::thread::sleep(Duration::from_secs(3)),
                        }
                    }
                    None
                })
            })
            .collect();
        hs.into_iter().filter_map(|h| h.join().unwrap()).collect()
    });
    let latest = readers.iter().copied().fold(0.0, f64::max);
    println!(
        "addresses: 300 readers of a {:.1} MB hint at 16 KB every 3 s from one address: {} cut within 60 s, the last after {latest:.1} s ({:.1} s in all); refusals slow_readers {}",
        hint_size as f64 / 1e6,
        readers.len(),
        t0.elapsed().as_secs_f64(),
        refusal(base, "slow_readers")
    );
    // 4. One address hammering the most expensive searches on 20 connections.
    let heavy_search = serde_json::json!({
        "query_rows": vec![vec![0.1; config.frame_dim]; config.limits.max_query_rows],
        "k": config.limits.max_k,
        "noise_std": 0.5,
    });
    let (_, calm_ms) = gets(base, ip(0, 14), "/api/v1/config", 100);
    let stop = AtomicBool::new(false);
    let ((ok, loaded_ms), hammer) = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..20)
            .map(|_| {
                let (stop, search) = (&stop, &heavy_search);
                scope.spawn(move || {
                    let http = client_at(ip(0, 13));
                    let (mut ok, mut refused) = (0usize, 0usize);
                    while !stop.load(Ordering::Relaxed) {
                        match http
                            .post(format!("{base}/api/v1/search"))
                            .json(search)
                            .send()
                        {
                            Ok(r) if r.status().as_u16() == 200 => ok += 1,
                            Ok(r) if r.status().as_u16() == 503 => refused += 1,
                            _ => {}
                        }
                    }
                    (ok, refused)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let t = Instant::now();
        let r = gets(base, ip(0, 14), "/api/v1/config", 200);
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let h = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
        (r, (h.0 as f64 / (secs + 1.0), h.1))
    });
    println!(
        "addresses: one address hammering {}-row searches on 20 connections: {:.0} answered a second, {} refused with 503; another address's /api/v1/config: {ok} of 200, p95 {:.1} ms (unloaded {:.1} ms)",
        config.limits.max_query_rows,
        hammer.0,
        hammer.1,
        pct(&loaded_ms, 0.95),
        pct(&calm_ms, 0.95)
    );
    // 5. hyper's own refusals.
    let long_uri = format!(
        "GET /api/v1/config?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70 << 10)
    );
    let fields: String = (0..301).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET /api/v1/config HTTP/1.1\r\nHost: x\r\n{fields}\r\n");
    println!(
        "addresses: hyper's refusals: malformed head {}; 70 KiB URI {}; 301 header fields {}; gallery POST without token, body unsent: {}",
        raw_status(addr, b"GET /api/v1/config HTTP/1.1\r\nHost x\r\n\r\n"),
        raw_status(addr, long_uri.as_bytes()),
        raw_status(addr, many.as_bytes()),
        raw_status(addr, b"POST /api/v1/gallery HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"),
    );
    latency_ratio(a, part, pir);
}

/// Probe 4's last part (alone with `--ratio-only`): 90 other addresses' light PIR queries,
/// then their whole hintless searches (the probe), with and without one address
/// running 10 loops of the heaviest PIR answer.
fn latency_ratio(a: &Args, part: &PartitionDoc, pir: &PirDoc) {
    let url = format!("{}{}/thumbs", a.base, pir.answer_url);
    let shape = &pir.thumbs.shape;
    under_hostile(a, pir, "thumbnail queries", &|http, j| {
        thumb_query(http, &url, shape, j)
    });
    if pir.scores.is_none() {
        println!("addresses: no hintless ranking offered: whole searches not timed");
        return;
    }
    let http = client_at(ip(1, 250));
    let s = ScoresSearch::new(&http, &a.base, part, pir);
    let feats = held_out_features(100);
    // Each search's photo-independent parts are prepared before the clock starts, as the page
    // does before a photo is chosen: what is timed is the photo's work and the server's.
    let mut rng = ChaCha20Rng::seed_from_u64(63);
    let ahead: Vec<std::sync::Mutex<Option<Ahead>>> = (0..10 + 2 * a.victims * RATIO_ROUNDS)
        .map(|_| std::sync::Mutex::new(Some(s.prepare(&mut rng))))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    under_hostile(a, pir, "whole hintless searches", &|http, j| {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let prepared = ahead[i]
            .lock()
            .unwrap()
            .take()
            .expect("one preparation a search");
        let mut rng = ChaCha20Rng::seed_from_u64(i as u64);
        s.search_prepared(http, &feats[j % feats.len()], prepared, &mut rng)
            .ok_or_else(|| "search failed".to_string())
    });
}

/// Rounds each victim address runs in each phase of [`under_hostile`].
const RATIO_ROUNDS: usize = 5;

/// `op` from [`Args::victims`] addresses, paced (one per twice an unloaded one's time, the
/// median of 10 run one after another, so the light load alone keeps the server about half
/// busy), unloaded and then beside one address running 10 loops of the heaviest PIR answer
/// (all `MAX_PIR_QUERIES` thumbnail queries): the ratio over all of them.
fn under_hostile(
    a: &Args,
    pir: &PirDoc,
    what: &str,
    op: &(dyn Fn(&Client, usize) -> Result<(), String> + Sync),
) {
    let url = format!("{}{}/thumbs", a.base, pir.answer_url);
    let (one, _) = victims_timed(1, 10, Duration::ZERO, op);
    let gap = Duration::from_secs_f64(pct(&one, 0.5) * 2e-3);
    let (calm, calm_failed) = victims_timed(a.victims, RATIO_ROUNDS, gap, op);
    let heavy =
        raw::pir_query(&pir.thumbs.shape, 1).repeat(shared::params::limits::MAX_PIR_QUERIES);
    let stop = AtomicBool::new(false);
    let ((loaded, failed), hostile) = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let (stop, url, heavy) = (&stop, &url, &heavy);
                scope.spawn(move || {
                    let http = client_at(ip(0, 15));
                    let (mut ok, mut refused) = (0usize, 0usize);
                    while !stop.load(Ordering::Relaxed) {
                        match http
                            .post(url)
                            .header("content-type", "application/octet-stream")
                            .body(heavy.clone())
                            .send()
                        {
                            Ok(r) if r.status().as_u16() == 200 => ok += 1,
                            Ok(_) => refused += 1,
                            _ => {}
                        }
                    }
                    (ok, refused)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let r = victims_timed(a.victims, RATIO_ROUNDS, gap, op);
        stop.store(true, Ordering::Relaxed);
        let h = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
        (r, h)
    });
    let p = |v: &[f64], q: f64| if v.is_empty() { f64::NAN } else { pct(v, q) };
    println!(
        "addresses: {} addresses' {what} ({RATIO_ROUNDS} each, one every {:.1} ms in all; failures count as infinite): unloaded p50 {:.0} ms, p95 {:.0} ms ({calm_failed} failed); with one address running 10 PIR loops: p50 {:.0} ms ({:.2}×, target ≤ 3×), p95 {:.0} ms ({:.2}×, target ≤ 4×), {failed} failed; the hostile address: {} answered, {} refused",
        a.victims,
        gap.as_secs_f64() * 1e3,
        p(&calm, 0.5),
        p(&calm, 0.95),
        p(&loaded, 0.5),
        p(&loaded, 0.5) / p(&calm, 0.5),
        p(&loaded, 0.95),
        p(&loaded, 0.95) / p(&calm, 0.95),
        hostile.0,
        hostile.1
    );
}
