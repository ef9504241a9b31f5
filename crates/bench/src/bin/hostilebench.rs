//! `hostilebench`: a running server measured against hostile clients on loopback
//! (`scripts/hostilebench.sh` starts a release server at 10,000 images and runs this):
//!
//! 1. **Half-sent requests**: 3,000 connections that never finish (half of them a request
//!    head, half a body): `/api/v1/config`'s latency while they are open, how long until the
//!    server has closed every one, and its RSS growth.
//! 2. **Stalled uploads**: 256 connections each declaring 16 MiB of PIR query (refused unread),
//!    256 sending all but the last byte of a valid scores query, 256 all but the last byte of
//!    a 1 MiB JSON body: RSS growth of each, and what the server answered.
//! 3. **Fairness**: one client (127.0.0.1) with 10 connections sending scores queries back to
//!    back while another (127.0.0.2) runs whole hintless searches: its success rate and p99
//!    against the same searches unloaded.
//! 4. **SIGTERM** with 600 half-sent requests open: seconds until the process is gone.
//!
//! Prints one line per figure (`name: value`), for the README.

use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use privatemail_e2e::pirsearch::{held_out_features, ScoresSearch};
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
    /// Skip the SIGTERM step (the server keeps running).
    #[arg(long)]
    keep_running: bool,
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
                    open(
                        addr,
                        b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\nAccept: */",
                    )
                } else {
                    open(addr, body_head)
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
                open(addr, &raw::stalled_search(1000))
            } else {
                open(addr, b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\n")
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
