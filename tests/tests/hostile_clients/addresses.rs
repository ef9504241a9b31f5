//! Hostile clients, each its own loopback address (127.0.0.x): no single address can hold
//! the server. One address holds at most its share of the connections, and when the server
//! is full the address holding the most gives one up, busy or not; hyper's own refusals of a
//! head are JSON; a gallery change without its token is refused before its body is read;
//! request bodies are charged as their bytes arrive; searches are admitted fairly by address
//! with `Retry-After`; bodies and downloads slower than the minimum rate are cut; and under
//! one hostile address every other address is served. Bounded in count and time (seconds);
//! `hostilebench` gives the figures at 10,000 images (docs/operations.md).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use privatemail_e2e::raw::{self, closed_or_answered, connect_from, half_sent_from};
use privatemail_e2e::{get_json, small_server, status_json, Server};
use publish::pir::doc::PirDoc;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use shared::api::{ConfigResponse, ErrorCode, ErrorResponse};

fn addr(srv: &Server) -> String {
    srv.base.trim_start_matches("http://").to_string()
}

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A client from 127.0.0.`last` that keeps no idle connection.
fn from(last: u8) -> Client {
    Client::builder()
        .local_address(ip(last))
        .pool_max_idle_per_host(0)
        .no_gzip()
        .build()
        .unwrap()
}

fn refusals(http: &Client, srv: &Server, kind: &str) -> u64 {
    status_json(http, &srv.base)["refusals"][kind]
        .as_u64()
        .unwrap_or_else(|| panic!("/status has no refusals.{kind}"))
}

/// `n` stalled searches from 127.0.0.`last` (a head declaring a body of which one byte came).
fn stalled_from(srv: &Server, last: u8, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| half_sent_from(&addr(srv), ip(last), &raw::stalled_search(1000)).unwrap())
        .collect()
}

fn open_count(socks: &[TcpStream]) -> usize {
    socks.iter().filter(|s| !closed_or_answered(s)).count()
}

/// Reads the whole answer on `s` until the server closes it, within `limit`.
fn answer_within(s: &mut TcpStream, limit: Duration) -> String {
    let (_, got) = raw::read_until_closed(s, Instant::now() + limit)
        .unwrap_or_else(|| panic!("no answer and no close within {limit:?}"));
    got
}

/// The status line and JSON error of a raw answer.
fn json_error(answer: &str) -> (String, ErrorResponse) {
    let status = answer.lines().next().unwrap_or("").to_string();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:.200}"));
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let e = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:.200}"));
    (status, e)
}

#[test]
fn one_address_holds_its_share_and_when_full_the_largest_holder_makes_room() {
    let srv = small_server(
        "addr-cap",
        &[
            "--max-connections",
            "32",
            "--max-connections-per-address",
            "4",
            "--header-timeout-secs",
            "60",
            "--body-timeout-secs",
            "60",
            "--min-rate-grace-secs",
            "60",
        ],
    );
    // One address opens three times its share of stalled bodies: it keeps four.
    let mut first = Vec::new();
    for _ in 0..12 {
        first.extend(stalled_from(&srv, 1, 1));
        std::thread::sleep(Duration::from_millis(30));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(open_count(&first), 4, "127.0.0.1 holds exactly its share");
    let status = from(2);
    assert!(refusals(&status, &srv, "address_cap") + refusals(&status, &srv, "evicted_idle") >= 8);
    let (_, others_config) = (0, status.get(format!("{}/api/v1/config", srv.base)).send());
    assert_eq!(others_config.unwrap().status(), StatusCode::OK);
    std::thread::sleep(Duration::from_millis(200));
    // Fill the server, every connection busy: 127.0.0.1 holds 4, nine addresses 3 each, one
    // address 1 (32).
    let first: Vec<TcpStream> = first
        .into_iter()
        .filter(|s| !closed_or_answered(s))
        .collect();
    let mut rest: Vec<TcpStream> = (2..=10).flat_map(|a| stalled_from(&srv, a, 3)).collect();
    rest.extend(stalled_from(&srv, 11, 1));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        open_count(&first) + open_count(&rest),
        32,
        "the server is full"
    );
    // A new address is served: the largest holder (127.0.0.1) gives up a busy connection.
    let newcomer = Client::builder().local_address(ip(20)).build().unwrap();
    let t = Instant::now();
    let r = newcomer
        .get(format!("{}/api/v1/config", srv.base))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(open_count(&first), 3, "127.0.0.1 gave up one connection");
    assert_eq!(open_count(&rest), 28, "no other address lost one");
    assert!(refusals(&newcomer, &srv, "evicted_busy") >= 1);
}

#[test]
fn hypers_own_refusals_are_json_and_a_gallery_change_without_token_is_refused_unread() {
    let srv = small_server("hyper-json", &["--admin-token", "secret"]);
    let a = addr(&srv);
    let send = |bytes: &[u8]| {
        let mut s = TcpStream::connect(&a).unwrap();
        // The server may answer before all of it is read.
        let _ = s.write_all(bytes);
        answer_within(&mut s, Duration::from_secs(5))
    };
    // A URI beyond hyper's read buffer (70 KiB), 301 header fields, malformed heads.
    let long_uri = format!(
        "GET /api/v1/config?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70 << 10)
    );
    let fields: String = (0..301).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET /api/v1/config HTTP/1.1\r\nHost: x\r\n{fields}\r\n");
    let cases: [(&[u8], &str, ErrorCode); 4] = [
        (long_uri.as_bytes(), "414", ErrorCode::HeadTooLarge),
        (many.as_bytes(), "431", ErrorCode::HeadTooLarge),
        (
            b"GET /api/v1/config HTTP/1.1\r\nHost x\r\n\r\n",
            "400",
            ErrorCode::InvalidInput,
        ),
        (b"G\x01T / HTTP/1.1\r\n\r\n", "400", ErrorCode::InvalidInput),
    ];
    for (raw, status, code) in cases {
        let got = send(raw);
        let (line, e) = json_error(&got);
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
        assert_eq!(e.error.code, code, "{line}");
    }
    // A gallery change without (or with a wrong) token: 401 at once, its body never sent.
    for auth in ["", "Authorization: Bearer wrong\r\n"] {
        let head = format!(
            "POST /api/v1/gallery HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             {auth}Content-Length: 100000\r\n\r\n"
        );
        let mut s = TcpStream::connect(&a).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let t = Instant::now();
        let got = answer_within(&mut s, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let (line, e) = json_error(&got);
        assert!(line.starts_with("HTTP/1.1 401"), "{line}");
        assert_eq!(e.error.code, ErrorCode::Unauthorized);
    }
}

/// A JSON body over the limit, sent whole in one write before the answer is read (as a client
/// library does): the client reads the JSON 413, not a reset — the server shuts its side and
/// reads on what is still coming before it closes (lingering close, `net::io`).
#[test]
fn a_too_large_body_sent_whole_gets_its_413_read_not_a_reset() {
    let srv = small_server("linger", &[]);
    let http = Client::new();
    let config: ConfigResponse = get_json(&http, &srv.base, "/api/v1/config");
    let len = config.limits.max_body_bytes + (256 << 10);
    let mut req = format!(
        "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\n\r\n"
    )
    .into_bytes();
    req.extend(std::iter::repeat_n(b' ', len));
    for i in 0..5u8 {
        let mut s = raw::connect_from(&addr(&srv), ip(40 + i), Some(64 << 10)).unwrap();
        s.write_all(&req)
            .expect("the whole body is taken (read and discarded)");
        let got = answer_within(&mut s, Duration::from_secs(5));
        let (line, e) = json_error(&got);
        assert!(line.starts_with("HTTP/1.1 413"), "{line}");
        assert_eq!(e.error.code, ErrorCode::PayloadTooLarge, "{line}");
    }
}

#[test]
fn bodies_are_charged_as_they_arrive_and_slow_ones_are_cut() {
    let srv = small_server("body-rate", &["--min-rate-grace-secs", "3"]);
    let a = addr(&srv);
    let config: ConfigResponse = get_json(&Client::new(), &srv.base, "/api/v1/config");
    // 64 bodies declaring 1 MiB (the JSON limit) from 8 addresses, 100 bytes of each sent:
    // charged at their declared length they would hold the whole 64 MiB budget.
    let head = format!(
        "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{}",
        (1 << 20) - 1,
        " ".repeat(100)
    );
    let held: Vec<TcpStream> = (1..=8u8)
        .flat_map(|i| (0..8).map(move |_| i))
        .map(|i| half_sent_from(&a, ip(i), head.as_bytes()).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let search = serde_json::json!({
        "query_rows": vec![vec![0.1; config.frame_dim]; 10],
        "k": 8,
        "noise_std": 0.5,
    });
    let other = from(9);
    for _ in 0..5 {
        let r = other
            .post(format!("{}/api/v1/search", srv.base))
            .json(&search)
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{}", r.text().unwrap());
    }
    assert_eq!(open_count(&held), 64, "the 64 bodies were held meanwhile");
    // Each of them is then cut after the grace for coming too slowly: 408 in JSON, well
    // before the 30 s body timeout.
    let t = Instant::now();
    for mut s in held.into_iter().take(4) {
        let got = answer_within(&mut s, Duration::from_secs(10));
        let (line, e) = json_error(&got);
        assert!(line.starts_with("HTTP/1.1 408"), "{line}");
        assert_eq!(e.error.code, ErrorCode::Timeout);
    }
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // A body dripping 5 bytes a second (under 2,048 B/s) is cut likewise.
    let mut s = TcpStream::connect(&a).unwrap();
    s.write_all(&raw::stalled_search(4000)).unwrap();
    let t = Instant::now();
    let cut = loop {
        if s.write_all(b" ").is_err() || closed_or_answered(&s) {
            break t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(12),
            "the dripping body was not cut"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        cut >= Duration::from_millis(2500),
        "cut before the grace: {cut:?}"
    );
    let http = Client::new();
    assert!(refusals(&http, &srv, "slow_bodies") >= 5);
}

#[test]
fn searches_are_admitted_fairly_by_address_with_retry_after() {
    let srv = small_server("search-fair", &[]);
    let config: ConfigResponse = get_json(&Client::new(), &srv.base, "/api/v1/config");
    let search = serde_json::json!({
        "query_rows": vec![vec![0.1; config.frame_dim]; 32],
        "k": config.limits.max_k,
        "noise_std": 0.5,
    });
    let url = format!("{}/api/v1/search", srv.base);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (hostile, victim) = std::thread::scope(|scope| {
        let loops: Vec<_> = (0..12)
            .map(|_| {
                let (url, search, stop) = (&url, &search, &stop);
                scope.spawn(move || {
                    let http = Client::builder().local_address(ip(1)).build().unwrap();
                    let (mut ok, mut refused) = (0usize, 0usize);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let r = http.post(url).json(search).send().unwrap();
                        match r.status() {
                            StatusCode::OK => ok += 1,
                            StatusCode::SERVICE_UNAVAILABLE => {
                                let secs: u64 = r.headers()["retry-after"]
                                    .to_str()
                                    .unwrap()
                                    .parse()
                                    .unwrap();
                                assert!((1..=30).contains(&secs));
                                let e: ErrorResponse = r.json().unwrap();
                                assert_eq!(e.error.code, ErrorCode::Busy);
                                refused += 1;
                            }
                            s => panic!("unexpected {s}"),
                        }
                    }
                    (ok, refused)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let other = Client::builder().local_address(ip(2)).build().unwrap();
        let served = (0..20)
            .filter(|_| {
                let r = other.post(&url).json(&search).send().unwrap();
                r.status() == StatusCode::OK
            })
            .count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let hostile = loops
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (hostile, served)
    });
    assert_eq!(victim, 20, "the other address was served every search");
    assert!(hostile.0 > 0, "the hostile address is served its share");
    assert!(hostile.1 > 0, "and refused beyond it");
    assert!(refusals(&Client::new(), &srv, "search_client_limit") >= hostile.1 as u64);
}

#[test]
fn a_download_read_slower_than_the_minimum_rate_is_cut_and_a_fast_one_is_not() {
    let srv = small_server("slow-reader", &["--min-rate-grace-secs", "2"]);
    let http = Client::builder().no_gzip().build().unwrap();
    let pir: PirDoc = get_json(&http, &srv.base, "/api/v1/pir");
    let path = format!("{}/thumbs/hint", pir.answer_url);
    let fast = http.get(format!("{}{path}", srv.base)).send().unwrap();
    assert_eq!(fast.status(), StatusCode::OK);
    let size = fast.bytes().unwrap().len();
    // Four of it, pipelined: more than the server's send buffer and the reader's receive
    // buffer together.
    let pipelined = 4;
    assert!(pipelined * size > 2 << 20, "the hint is {size} bytes");
    // 512 bytes every 0.5 s (1 KB/s) through a 4 KiB receive buffer.
    let mut s = connect_from(&addr(&srv), ip(3), Some(4096)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(request.repeat(pipelined).as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut got = 0usize;
    let mut buf = [0u8; 512];
    let cut = loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break t.elapsed(),
            Ok(n) => got += n,
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "still sending after {got} bytes"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(got < pipelined * size, "every answer was read");
    assert!(
        cut >= Duration::from_secs(2),
        "cut before the grace: {cut:?}"
    );
    assert!(refusals(&http, &srv, "slow_readers") >= 1);
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// The pictures a default search asks for in its one thumbnail request (the CLI's and the
/// page's k).
const SEARCH_PICTURES: usize = 8;

/// `victims` addresses (127.0.0.10…) each sending `rounds` thumbnail requests one after
/// another, all at once: every latency in seconds, sorted, and how many were not a 200. Each
/// request is what a search sends for its pictures, [`SEARCH_PICTURES`] queries: a probe of
/// one query took under a millisecond unloaded, so the scheduler's own delays of a
/// millisecond or two made its ratio (3.98× p50 once, 1.07–1.98× on reruns of one build).
fn victims_round(
    url: &str,
    shape: &pir::layout::Shape,
    victims: u8,
    rounds: usize,
) -> (Vec<f64>, usize) {
    let results: Vec<(Vec<f64>, usize)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..victims)
            .map(|v| {
                scope.spawn(move || {
                    let http = Client::builder().local_address(ip(10 + v)).build().unwrap();
                    let (mut lat, mut failed) = (Vec::new(), 0);
                    for i in 0..rounds {
                        let t = Instant::now();
                        let r = http
                            .post(url)
                            .header("content-type", "application/octet-stream")
                            .body(raw::pir_query(shape, (i % 7) as u8).repeat(SEARCH_PICTURES))
                            .send()
                            .unwrap();
                        let ok = r.status() == StatusCode::OK;
                        let _ = r.bytes();
                        if ok {
                            lat.push(t.elapsed().as_secs_f64());
                        } else {
                            failed += 1;
                        }
                    }
                    (lat, failed)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut lat: Vec<f64> = results.iter().flat_map(|r| r.0.clone()).collect();
    lat.sort_by(f64::total_cmp);
    (lat, results.iter().map(|r| r.1).sum())
}

/// The suite's bounded load test: one hostile address (127.0.0.1) runs 5 loops of the most
/// expensive PIR queries and 5 of the most expensive searches, each retrying a 503 at once,
/// and holds stalled bodies, while 10 other addresses each ask for a search's pictures, one
/// request at a time. Every one of their
/// queries is answered, and their latency against the same queries unloaded stays within
/// the README's targets (≤ 3× p50, ≤ 4× p95): with one answer per address while others are
/// active (`net::admission`), a light query runs beside one of the hostile address's passes,
/// and the hostile address's refusals are paced (`net::pace`), so retrying at once gets it
/// held refusals, not work from the server.
/// Measured 2026-12-06 (test build, 2 cores, idle machine): 0.96–1.19× p50, 1.38–1.90× p95
/// in four runs; with the probe of one query a request, without the pacing, 3.0–6.6× p50 and
/// 1.9–5.3× p95 (about 2,500 refusals a second); 11× and 14.7× when one address could run
/// half the slots.
#[test]
fn under_one_hostile_address_every_other_address_is_served() {
    let srv = small_server("one-hostile", &["--pir-concurrency", "4"]);
    let http = Client::new();
    let pir: PirDoc = get_json(&http, &srv.base, "/api/v1/pir");
    let config: ConfigResponse = get_json(&http, &srv.base, "/api/v1/config");
    let url = format!("{}{}/thumbs", srv.base, pir.answer_url);
    // 200 queries each way: the p95 of 50 moved by 2× between runs of one build.
    let (victims, rounds) = (10u8, 20);
    // Connections, pages and caches warmed first, so neither measurement pays for them.
    victims_round(&url, &pir.thumbs.shape, victims, 5);
    let (calm, calm_failed) = victims_round(&url, &pir.thumbs.shape, victims, rounds);
    assert_eq!(calm_failed, 0);
    let heavy =
        raw::pir_query(&pir.thumbs.shape, 1).repeat(shared::params::limits::MAX_PIR_QUERIES);
    let search = serde_json::json!({
        "query_rows": vec![vec![0.1; config.frame_dim]; 32],
        "k": config.limits.max_k,
        "noise_std": 0.5,
    });
    let stop = std::sync::atomic::AtomicBool::new(false);
    let ((loaded, loaded_failed), hostile, loaded_for) = std::thread::scope(|scope| {
        let _stalled = stalled_from(&srv, 1, 50);
        let mut loops = Vec::new();
        for i in 0..10 {
            let (url, heavy, search, stop, base) = (&url, &heavy, &search, &stop, &srv.base);
            loops.push(scope.spawn(move || {
                // A request still queued when the test ends is given up, not awaited.
                let http = Client::builder()
                    .local_address(ip(1))
                    .timeout(Duration::from_secs(3))
                    .build()
                    .unwrap();
                let (mut ok, mut refused) = (0usize, 0usize);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = if i % 2 == 0 {
                        http.post(url)
                            .header("content-type", "application/octet-stream")
                            .body(heavy.clone())
                            .send()
                    } else {
                        http.post(format!("{base}/api/v1/search"))
                            .json(search)
                            .send()
                    };
                    match r.map(|r| r.status()) {
                        Ok(StatusCode::OK) => ok += 1,
                        Ok(StatusCode::SERVICE_UNAVAILABLE) => refused += 1,
                        Err(e) if e.is_timeout() => {}
                        other => panic!("the hostile address got {other:?}"),
                    }
                }
                (ok, refused)
            }));
        }
        // Past the first second, the hostile loops' refusals are held at their steady pace.
        std::thread::sleep(Duration::from_millis(1500));
        let loaded_at = Instant::now();
        let r = victims_round(&url, &pir.thumbs.shape, victims, rounds);
        let loaded_for = loaded_at.elapsed() + Duration::from_millis(1500);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let hostile = loops
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (r, hostile, loaded_for)
    });
    println!(
        "10 addresses' picture requests ({SEARCH_PICTURES} queries): unloaded p50 {:.1} ms, \
         p95 {:.1} ms; with one hostile address: p50 {:.1} ms ({:.2}×), p95 {:.1} ms ({:.2}×); \
         the hostile address: {} answered, {} refused with 503",
        pct(&calm, 0.5) * 1e3,
        pct(&calm, 0.95) * 1e3,
        pct(&loaded, 0.5) * 1e3,
        pct(&loaded, 0.5) / pct(&calm, 0.5),
        pct(&loaded, 0.95) * 1e3,
        pct(&loaded, 0.95) / pct(&calm, 0.95),
        hostile.0,
        hostile.1
    );
    assert_eq!(loaded_failed, 0, "every other address's query was answered");
    assert_eq!(loaded.len(), victims as usize * rounds);
    assert!(hostile.0 > 0 && hostile.1 > 0, "{hostile:?}");
    // Paced: the prompt refusals of each second, and one held refusal per loop per hold.
    let paced = (f64::from(privatemail_server::net::pace::PROMPT_PER_SECOND)
        + 10.0 / privatemail_server::net::pace::MAX_HOLD.as_secs_f64())
        * loaded_for.as_secs_f64().ceil()
        + 10.0;
    assert!(
        hostile.1 as f64 <= paced,
        "{} refusals in {loaded_for:?}: more than the pace allows ({paced})",
        hostile.1
    );
    let (r50, r95) = (
        pct(&loaded, 0.5) / pct(&calm, 0.5),
        pct(&loaded, 0.95) / pct(&calm, 0.95),
    );
    assert!(r50 <= 3.0, "p50 ratio {r50:.2}× over the 3× target");
    assert!(r95 <= 4.0, "p95 ratio {r95:.2}× over the 4× target");
}
