//! The page, from this machine: `privatemail page` serves the release bundle built into this
//! binary (`web/dist/`, by `build.rs`) on 127.0.0.1, so the gallery serves the browser only
//! data and none of the code that handles the photo; `privatemail verify-page` compares a
//! page served anywhere with that bundle, file by file (docs/page.md).
//!
//! The local server is small and strict: `GET`/`HEAD` of the bundle's files only, a `Host` of
//! 127.0.0.1 or localhost at its port (so no other site can reach it by DNS rebinding), request
//! heads bounded in bytes and time, a bounded number of connections, every answer with the
//! bundle's Content-Security-Policy.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pagebundle::Manifest;

use crate::error::{CliError, Result};
use crate::http::{BodyLimit, Server, Timeouts};

mod bundle {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"));
}

/// The page's default port: keep it, so this browser keeps the page's state (the privacy it
/// has spent, refusals) from one run to the next — a browser keeps such state per origin.
pub const DEFAULT_PORT: u16 = 8765;

/// The longest request head the local server reads.
const MAX_HEAD_BYTES: usize = 16 << 10;
/// Connections served at once at most (a browser opens about six).
const MAX_CONNECTIONS: usize = 64;

/// The bundle built into this binary.
pub fn manifest() -> Result<Manifest> {
    let text = bundle::MANIFEST.ok_or_else(|| {
        CliError::Usage(
            "this privatemail was built without the page: run scripts/build-web.sh, then build the CLI again".into(),
        )
    })?;
    Manifest::parse(text).map_err(|e| CliError::Malformed(format!("the built-in page: {e}")))
}

fn file(name: &str) -> Option<&'static [u8]> {
    bundle::FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}

/// A gallery's URL as the page takes it: http(s), no user, query or fragment, no trailing `/`.
pub fn gallery_url(s: &str) -> Result<String> {
    let u = reqwest::Url::parse(s)
        .map_err(|e| CliError::Usage(format!("--server {s:?} is not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https")
        || u.host_str().is_none()
        || !u.username().is_empty()
        || u.password().is_some()
        || u.query().is_some()
        || u.fragment().is_some()
    {
        return Err(CliError::Usage(format!(
            "--server {s:?} must be an http(s) URL without user, query or fragment"
        )));
    }
    let origin = u.origin().ascii_serialization();
    Ok(format!("{origin}{}", u.path().trim_end_matches('/')))
}

/// `s` for a URL's fragment or query: everything but `A-Za-z0-9-._~` percent-encoded.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Whether `gallery` answers CORS to `origin` (a preflight-free GET of its configuration, as
/// the page's first request is): a warning, not an error — the gallery may simply be down now.
fn gallery_allows(gallery: &str, origin: &str) -> std::result::Result<(), String> {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let resp = http
        .get(format!("{gallery}/api/v1/config"))
        .header(reqwest::header::ORIGIN, origin)
        .send()
        .map_err(|e| format!("cannot reach it ({})", e.without_url()))?;
    let allowed = resp
        .headers()
        .get(reqwest::header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .and_then(|v| v.to_str().ok());
    if allowed == Some(origin) {
        Ok(())
    } else {
        Err(format!(
            "it does not list {origin} as a page origin (its operator adds it with `server --page-origin {origin}`); the page cannot search it until then"
        ))
    }
}

/// Serve the built-in page for `gallery` on 127.0.0.1:`port` until interrupted, opening the
/// browser at it when `open`.
pub fn serve(gallery: &str, port: u16, open: bool) -> Result<()> {
    let m = manifest()?;
    let gallery = gallery_url(gallery)?;
    let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|e| {
        CliError::Usage(format!(
            "cannot listen on 127.0.0.1:{port}: {e} (another `privatemail page` may be running; --port picks another, at the cost of a fresh browser state for the page)"
        ))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| CliError::Usage(e.to_string()))?
        .port();
    let origin = format!("http://127.0.0.1:{port}");
    let url = format!("{origin}/#gallery={}", percent(&gallery));
    if let Err(why) = gallery_allows(&gallery, &origin) {
        eprintln!("warning: the gallery at {gallery}: {why}");
    }
    println!(
        "the page (index.html sha256 {}) from this machine, searching {gallery}",
        m.page_sha256()
    );
    // Tests and scripts read this line.
    println!("serving the page at {url}");
    let _ = std::io::stdout().flush();
    if open {
        open_browser(&url);
    }
    let hosts = Arc::new([format!("127.0.0.1:{port}"), format!("localhost:{port}")]);
    let live = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            continue; // dropped: the browser retries
        }
        let (hosts, live) = (Arc::clone(&hosts), Arc::clone(&live));
        std::thread::spawn(move || {
            let _ = answer(stream, &hosts[..]);
            live.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

/// The system's way to open a URL, if it has one; the URL is printed either way.
fn open_browser(url: &str) {
    let cmd: Option<(&str, Vec<&str>)> = if cfg!(target_os = "macos") {
        Some(("open", vec![url]))
    } else if cfg!(target_os = "windows") {
        Some(("cmd", vec!["/C", "start", "", url]))
    } else if cfg!(unix) {
        Some(("xdg-open", vec![url]))
    } else {
        None
    };
    let opened = cmd.is_some_and(|(c, args)| {
        std::process::Command::new(c)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .is_ok()
    });
    if !opened {
        eprintln!("open {url} in your browser");
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("csv") => "text/csv; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// One request on `stream`, then the connection is closed.
fn answer(stream: TcpStream, hosts: &[String]) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new((&stream).take(MAX_HEAD_BYTES as u64));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut host = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("host") {
                host = Some(v.trim().to_ascii_lowercase());
            }
        }
    }
    let mut out = &stream;
    let reply = |out: &mut &TcpStream, status: &str, kind: &str, body: &[u8], extra: &str| {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
             Content-Security-Policy: {}; frame-ancestors 'none'\r\n\
             X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n\
             Cross-Origin-Opener-Policy: same-origin\r\n{extra}Connection: close\r\n\r\n",
            body.len(),
            pagebundle::CSP
        );
        out.write_all(head.as_bytes())?;
        if method != "HEAD" {
            out.write_all(body)?;
        }
        out.flush()
    };
    if !host.as_ref().is_some_and(|h| hosts.contains(h)) {
        return reply(
            &mut out,
            "421 Misdirected Request",
            "text/plain",
            b"wrong host\n",
            "",
        );
    }
    if method != "GET" && method != "HEAD" {
        return reply(
            &mut out,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
            "Allow: GET, HEAD\r\n",
        );
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    let name = match path.strip_prefix('/') {
        Some("") => pagebundle::ENTRY,
        Some(n) => n,
        None => "",
    };
    match file(name) {
        Some(body) => {
            // Hashed names never change their bytes; the entry is revalidated.
            let cache = if name == pagebundle::ENTRY {
                "Cache-Control: no-cache\r\n"
            } else {
                "Cache-Control: public, max-age=31536000, immutable\r\n"
            };
            reply(&mut out, "200 OK", content_type(name), body, cache)
        }
        None => reply(&mut out, "404 Not Found", "text/plain", b"not found\n", ""),
    }
}

/// One file of the bundle that the served page does not match.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    pub file: String,
    pub what: String,
}

/// What `verify-page` found.
#[derive(Debug, serde::Serialize)]
pub struct Verified {
    pub url: String,
    pub page_sha256: String,
    pub files: usize,
    pub differences: Vec<Difference>,
}

/// Fetch every file of the built-in bundle from the page at `url` (its entry at `url` itself)
/// and compare each with the bundle's SHA-256.
pub fn verify(url: &str, timeouts: Timeouts) -> Result<Verified> {
    let m = manifest()?;
    let base = url
        .strip_suffix(pagebundle::ENTRY)
        .unwrap_or(url)
        .trim_end_matches('/');
    let server = Server::new(base, timeouts)?;
    let mut differences = Vec::new();
    for (name, entry) in &m.files {
        // The entry as a browser loads it: the page's own URL.
        let path = if name == &m.entry {
            "/".to_string()
        } else {
            format!("/{name}")
        };
        // Room for a changed file a little longer than this version's (it is then hashed and
        // reported like any other change), and for gzip's overhead on the wire.
        let decoded = entry.bytes + (1 << 20);
        let limit = BodyLimit {
            wire: decoded + decoded / 8 + 4096,
            decoded,
        };
        let what = match server.get_bounded(&path, limit) {
            Ok(body) => {
                let got = pagebundle::sha256_hex(&body.bytes);
                if got == entry.sha256 {
                    continue;
                }
                format!(
                    "changed: sha256 {got} ({} bytes), this version's is {} ({} bytes)",
                    body.bytes.len(),
                    entry.sha256,
                    entry.bytes
                )
            }
            Err(CliError::Refused { status, .. }) => format!("missing: HTTP {status}"),
            Err(e @ (CliError::Unreachable { .. } | CliError::TimedOut { .. })) => return Err(e),
            Err(e) => format!("changed or unreadable: {e}"),
        };
        differences.push(Difference {
            file: name.clone(),
            what,
        });
    }
    Ok(Verified {
        url: format!("{base}/"),
        page_sha256: m.page_sha256().to_string(),
        files: m.files.len(),
        differences,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gallery_url_is_kept_plain() {
        assert_eq!(
            gallery_url("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            gallery_url("https://Gallery.Example:443/pm/").unwrap(),
            "https://gallery.example/pm"
        );
        for bad in [
            "ftp://x",
            "https://u:p@x",
            "https://x/?a=1",
            "https://x/#f",
            "x",
        ] {
            assert!(gallery_url(bad).is_err(), "{bad}");
        }
        assert_eq!(percent("http://a:1/b c"), "http%3A%2F%2Fa%3A1%2Fb%20c");
    }
}
