//! Hostile clients: a server that no client can hold. Connections that never finish their
//! head or body are closed within the timeouts while others are served; at the connection
//! cap idle connections make room; one client hammering PIR answers cannot starve another,
//! and every refusal says when to retry; cheap checks come before any queue; head limits and
//! timeouts answer in the JSON format; SIGTERM ends on time with half-sent requests open.
//! The load figures (3,000 half-sent requests, 256 stalled uploads, 10 hammering connections
//! at 10,000 images) are `hostilebench`'s, in the README.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use privatemail_e2e::raw;
use privatemail_e2e::{
    get_json, small_server, start_server_logged, status_json, temp_store, Server,
};
use publish::pir::doc::PirDoc;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use shared::api::{ErrorCode, ErrorResponse};

fn addr(srv: &Server) -> String {
    srv.base.trim_start_matches("http://").to_string()
}

/// A raw connection that has sent `bytes` and then nothing more.
fn half_sent(srv: &Server, bytes: &[u8]) -> TcpStream {
    raw::half_sent(&addr(srv), bytes).unwrap()
}

/// [`half_sent`], with when it was sent (a timeout runs from there: opening hundreds of
/// connections at once can take a second, a SYN retried).
fn half_sent_at(srv: &Server, bytes: &[u8]) -> (TcpStream, Instant) {
    let s = half_sent(srv, bytes);
    (s, Instant::now())
}

/// Waits up to `limit` from `started` for the server to close `s`: when (from `started`) and
/// what it sent before closing.
fn closed_within(
    s: &mut TcpStream,
    started: Instant,
    limit: Duration,
) -> Option<(Duration, String)> {
    raw::read_until_closed(s, started + limit).map(|(t, sent)| (t - started, sent))
}

/// The status line the server sends on `s` within `limit`, if any.
fn status_line_within(s: &mut TcpStream, limit: Duration) -> Option<String> {
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(2).any(|w| w == b"\r\n") {
        let left = limit.checked_sub(t.elapsed())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.lines().next().map(str::to_string)
}

fn refusals(http: &Client, srv: &Server, kind: &str) -> u64 {
    status_json(http, &srv.base)["refusals"][kind]
        .as_u64()
        .unwrap_or_else(|| panic!("/status has no refusals.{kind}"))
}

fn timed_get(http: &Client, url: &str) -> (StatusCode, Duration) {
    let t = Instant::now();
    let r = http.get(url).send().unwrap();
    let st = r.status();
    let _ = r.bytes();
    (st, t.elapsed())
}

#[test]
fn half_sent_heads_and_bodies_are_closed_within_their_timeouts_while_others_are_served() {
    // Two answer slots: a client's upload share is then 3 (`Shares::for_concurrency`).
    let srv = small_server(
        "half-sent",
        &[
            "--header-timeout-secs",
            "2",
            "--body-timeout-secs",
            "3",
            "--pir-concurrency",
            "2",
        ],
    );
    let http = Client::new();
    let pir: PirDoc = get_json(&http, &srv.base, "/api/v1/pir");
    let heads: Vec<_> = (0..300)
        .map(|_| {
            half_sent_at(
                &srv,
                b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\nAccept: */",
            )
        })
        .collect();
    let idle: Vec<_> = (0..50).map(|_| half_sent_at(&srv, b"")).collect();
    let json_bodies: Vec<_> = (0..50)
        .map(|_| {
            half_sent_at(
                &srv,
                b"POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                  Content-Length: 100000\r\n\r\n{\"k\": 8, ",
            )
        })
        .collect();
    let per = pir.thumbs.shape.query_bytes();
    // As many PIR bodies as one client may upload at once (its share, `net::admission`).
    let pir_bodies: Vec<_> = (0..3)
        .map(|_| {
            let head = format!(
                "POST {}/thumbs HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
                 Content-Length: {per}\r\n\r\n",
                pir.answer_url
            );
            let mut s = half_sent(&srv, head.as_bytes());
            s.write_all(&vec![0u8; per / 2]).unwrap();
            (s, Instant::now())
        })
        .collect();
    // The server reads the heads in its own order: the three hold the share once it has.
    let held = Instant::now();
    // Charged as they arrive: the half of each body sent, not its declared length.
    while status_json(&http, &srv.base)["pir_load"]["upload_bytes"].as_u64()
        != Some(3 * (per / 2) as u64)
    {
        assert!(
            held.elapsed() < Duration::from_secs(2),
            "the three uploads are not all being received: {}",
            status_json(&http, &srv.base)["pir_load"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Beyond that share, and with a length no query has, the refusal comes at once although
    // the body is still on its way (it is read and dropped behind the answer).
    let stalled_pir = |len: usize| {
        let head = format!(
            "POST {}/thumbs HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {len}\r\n\r\n",
            pir.answer_url
        );
        let mut s = half_sent(&srv, head.as_bytes());
        s.write_all(&vec![0u8; len / 2]).unwrap();
        s
    };
    for (len, want) in [(per, "HTTP/1.1 503"), (per + 4, "HTTP/1.1 422")] {
        let mut s = stalled_pir(len);
        // An answer that waited for the body would be the body timeout's 408 (at 3 s), so the
        // status itself shows the refusal did not wait; the wait allows a loaded machine's
        // scheduling on top of the timeout, as the checks below do.
        let line = status_line_within(&mut s, Duration::from_secs(3) + Duration::from_secs(2))
            .unwrap_or_else(|| panic!("no answer to a refused stalled upload of {len}"));
        assert!(line.starts_with(want), "{line}");
    }
    // One client dripping its head a byte at a time: the header timeout is for the whole head.
    let drip = {
        let a = addr(&srv);
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(a).unwrap();
            let t = Instant::now();
            for b in b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
                if s.write_all(&[*b]).is_err() {
                    return Some(t.elapsed());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            (!String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 200")).then(|| t.elapsed())
        })
    };
    // Others are served meanwhile, promptly.
    for _ in 0..5 {
        let (st, took) = timed_get(&http, &format!("{}/api/v1/config", srv.base));
        assert_eq!(st, StatusCode::OK);
        assert!(took < Duration::from_secs(1), "config took {took:?}");
    }
    let margin = Duration::from_secs(2);
    for (mut s, started) in heads.into_iter().chain(idle) {
        let (when, sent) = closed_within(&mut s, started, Duration::from_secs(2) + margin)
            .expect("a connection without a whole head is closed after the header timeout");
        assert!(
            when >= Duration::from_millis(1500),
            "closed early: {when:?}"
        );
        assert!(
            sent.is_empty() || sent.starts_with("HTTP/1.1 408"),
            "{sent}"
        );
    }
    for (i, (mut s, started)) in json_bodies.into_iter().chain(pir_bodies).enumerate() {
        let (when, sent) = closed_within(&mut s, started, Duration::from_secs(3) + margin)
            .unwrap_or_else(|| {
                panic!(
                    "stalled body {i} is not cut off after the body timeout ({:?})",
                    started.elapsed()
                )
            });
        assert!(
            when >= Duration::from_millis(2500),
            "closed early: {when:?}"
        );
        assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
        let body = &sent[sent.find("\r\n\r\n").unwrap() + 4..];
        let e: ErrorResponse = serde_json::from_str(body).unwrap();
        assert_eq!(e.error.code, ErrorCode::Timeout);
    }
    let dripped = drip
        .join()
        .unwrap()
        .expect("the dripping head is not served");
    assert!(dripped < Duration::from_secs(2) + margin, "{dripped:?}");
    assert!(refusals(&http, &srv, "header_timeouts") >= 351);
    assert!(refusals(&http, &srv, "body_timeouts") >= 53);
    // Nothing was lost meanwhile: the server still answers at once.
    let (st, took) = timed_get(&http, &format!("{}/api/v1/config", srv.base));
    assert_eq!(st, StatusCode::OK);
    assert!(took < Duration::from_secs(1));
}

#[test]
fn at_the_connection_cap_idle_connections_make_room_and_busy_ones_are_kept() {
    let srv = small_server(
        "conn-cap",
        &[
            "--max-connections",
            "16",
            // All from one address here: the global cap, not the address's share.
            "--max-connections-per-address",
            "16",
            "--header-timeout-secs",
            "60",
            "--body-timeout-secs",
            "4",
        ],
    );
    let fresh = || Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..16).map(|_| half_sent(&srv, b"GET /")).collect();
    // A new client is served: the oldest idle connection was closed for it.
    let (st, _) = timed_get(&fresh(), &format!("{}/api/v1/config", srv.base));
    assert_eq!(st, StatusCode::OK);
    let (when, _) = closed_within(&mut idle[0], started, Duration::from_secs(5))
        .expect("the oldest idle connection makes room");
    assert!(when < Duration::from_secs(5));
    assert!(refusals(&fresh(), &srv, "evicted_idle") >= 1);
    drop(idle);
    // Every connection busy (stalled bodies in their handlers): a new one is closed at once,
    // and once the bodies time out the server serves again.
    std::thread::sleep(Duration::from_millis(300));
    let busy: Vec<TcpStream> = (0..16)
        .map(|_| half_sent(&srv, &raw::stalled_search(1000)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let mut extra = half_sent(&srv, b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\n\r\n");
    let (_, sent) = closed_within(&mut extra, t, Duration::from_secs(2))
        .expect("at the cap with every connection busy, a new one is closed at once");
    assert!(sent.is_empty(), "{sent}");
    drop(busy);
    std::thread::sleep(Duration::from_millis(300));
    let (st, _) = timed_get(&fresh(), &format!("{}/api/v1/config", srv.base));
    assert_eq!(st, StatusCode::OK);
    // One address holds them all here: the refusal is counted as its share's.
    assert!(
        refusals(&fresh(), &srv, "connection_cap") + refusals(&fresh(), &srv, "address_cap") >= 1
    );
}

fn post_pir(http: &Client, url: &str, body: Vec<u8>) -> reqwest::blocking::Response {
    http.post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .unwrap()
}

#[test]
fn one_client_hammering_pir_cannot_starve_another_and_refusals_say_when_to_retry() {
    let srv = small_server("fair", &["--pir-concurrency", "2"]);
    let http = Client::new();
    let pir: PirDoc = get_json(&http, &srv.base, "/api/v1/pir");
    let url = format!("{}{}/thumbs", srv.base, pir.answer_url);
    let per = pir.thumbs.shape.query_bytes();
    let heavy = vec![1u8; per * shared::params::limits::MAX_PIR_QUERIES];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let from = |ip: &str| {
        Client::builder()
            .local_address(ip.parse::<IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let (attacker, victim) = std::thread::scope(|scope| {
        let hammers: Vec<_> = (0..10)
            .map(|_| {
                let (url, heavy, stop) = (&url, &heavy, &stop);
                scope.spawn(move || {
                    let http = from("127.0.0.1");
                    let (mut ok, mut refused) = (0usize, 0usize);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let r = post_pir(&http, url, heavy.clone());
                        match r.status() {
                            StatusCode::OK => ok += 1,
                            StatusCode::SERVICE_UNAVAILABLE => {
                                let retry = r.headers().get("retry-after").cloned();
                                let e: ErrorResponse = r.json().unwrap();
                                assert_eq!(e.error.code, ErrorCode::Busy);
                                let secs: u64 = retry
                                    .expect("every 503 says when to retry")
                                    .to_str()
                                    .unwrap()
                                    .parse()
                                    .unwrap();
                                assert!((1..=30).contains(&secs));
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
        // Another client's searches, and its malformed requests, meanwhile.
        let other = from("127.0.0.2");
        let mut served = 0;
        for i in 0..40 {
            let r = post_pir(&other, &url, vec![(i % 7) as u8; per]);
            if r.status() == StatusCode::OK {
                served += 1;
            }
        }
        // Cheap checks come before the queue: never a 503 for a request that cannot be
        // answered.
        let wrong_length = post_pir(&other, &url, vec![0u8; per + 4]);
        assert_eq!(wrong_length.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let wrong_type = other
            .post(&url)
            .header("content-type", "text/plain")
            .body(vec![0u8; per])
            .send()
            .unwrap();
        assert_eq!(wrong_type.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let chunked = other
            .post(&url)
            .header("content-type", "application/octet-stream")
            .body(reqwest::blocking::Body::new(std::io::Cursor::new(vec![
                0u8;
                per
            ])))
            .send()
            .unwrap();
        assert_eq!(chunked.status(), StatusCode::LENGTH_REQUIRED);
        let old = post_pir(
            &other,
            &format!("{}/api/v1/pir/not-a-version/thumbs", srv.base),
            vec![0u8; per],
        );
        assert_eq!(old.status(), StatusCode::NOT_FOUND);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let attacker = hammers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (attacker, served)
    });
    // The other client was never refused: its one request at a time is within its share.
    assert_eq!(victim, 40, "served {victim} of 40");
    assert!(attacker.0 > 0, "the hammering client is served its share");
    assert!(attacker.1 > 0, "and refused beyond it");
    let http = Client::new();
    assert!(refusals(&http, &srv, "pir_client_limit") >= attacker.1 as u64);
}

#[test]
fn head_limits_and_unknown_methods_answer_in_json() {
    let srv = small_server("head-limits", &[]);
    let send = |raw: String| {
        let mut s = half_sent(&srv, raw.as_bytes());
        let (_, got) = closed_within(&mut s, Instant::now(), Duration::from_secs(5))
            .unwrap_or_else(|| {
                // Keep-alive: the answer came but the connection stays; read what came.
                (Duration::ZERO, String::new())
            });
        got
    };
    let long_uri = format!(
        "GET /api/v1/config?{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "a".repeat(9 << 10)
    );
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET /api/v1/config HTTP/1.1\r\nHost: x\r\n{many}Connection: close\r\n\r\n");
    let big = format!(
        "GET /api/v1/config HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "b".repeat(20 << 10)
    );
    for (raw, status) in [(long_uri, "414"), (many, "431"), (big, "431")] {
        let got = send(raw);
        assert!(got.starts_with(&format!("HTTP/1.1 {status}")), "{got:.200}");
        let body = &got[got.find("\r\n\r\n").unwrap() + 4..];
        let e: ErrorResponse = serde_json::from_str(body).unwrap();
        assert_eq!(e.error.code, ErrorCode::HeadTooLarge);
    }
    let http = Client::new();
    let r = http
        .delete(format!("{}/api/v1/config", srv.base))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let _: ErrorResponse = r.json().unwrap();
    assert!(refusals(&http, &srv, "head_too_large") >= 3);
}

#[test]
fn sigterm_with_half_sent_requests_ends_within_the_grace_and_closes_the_store() {
    let store = temp_store("sigterm-half");
    let mut srv = start_server_logged(
        &[
            "--gallery-size",
            "1000",
            "--anchors",
            "200",
            "--store",
            store.to_str().unwrap(),
            "--header-timeout-secs",
            "120",
            "--body-timeout-secs",
            "120",
            "--shutdown-grace-secs",
            "3",
        ],
        &[("RUST_LOG", "warn,server=info,privatemail_server=info")],
    );
    let _heads: Vec<TcpStream> = (0..50)
        .map(|_| half_sent(&srv, b"GET /api/v1/config HTTP/1.1\r\nHost: x\r\n"))
        .collect();
    let _bodies: Vec<TcpStream> = (0..10)
        .map(|_| half_sent(&srv, &raw::stalled_search(1000)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    srv.terminate();
    let status = srv
        .wait_exit(Duration::from_secs(10))
        .expect("the server exits within 10 s of SIGTERM");
    let took = t.elapsed();
    let log = srv.log_text();
    assert!(status.success(), "exit status {status:?}; log:\n{log}");
    assert!(took < Duration::from_secs(3 + 2), "took {took:?}");
    assert!(log.contains("store closed"), "log:\n{log}");
    assert!(!log.contains("panicked"), "log:\n{log}");
}
