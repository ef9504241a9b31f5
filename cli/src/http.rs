//! The server, over HTTP: typed errors for unreachable servers, refusals and malformed answers.
//!
//! A server is not trusted with this process's memory or time. Every answer is read as a
//! stream and abandoned past its [`BodyLimit`] (on the wire and after gzip, which this client
//! decodes itself so it can count both); every request has a connect timeout, a first-byte
//! timeout (also the longest pause inside an answer) and one deadline for the whole command;
//! redirects stay within the origin that was asked, at most `limits::MAX_REDIRECTS` of them.
//! A server's error message is shown cut and without control characters.

use std::io::Read;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING};
use reqwest::redirect;
use serde::de::DeserializeOwned;
use shared::api::ErrorResponse;
use shared::params::limits;
use shared::text::excerpt;

use crate::error::{CliError, Result};

/// How long to wait (the `--*-timeout` flags).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(limits::CONNECT_TIMEOUT_SECS),
            first_byte: Duration::from_secs(limits::FIRST_BYTE_TIMEOUT_SECS),
            total: Duration::from_secs(limits::TOTAL_TIMEOUT_SECS),
        }
    }
}

/// The most one answer may be: bytes on the wire, and bytes once decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    pub wire: u64,
    pub decoded: u64,
}

impl BodyLimit {
    /// The same bound on the wire and decoded (JSON answers).
    pub const fn both(n: u64) -> Self {
        BodyLimit {
            wire: n,
            decoded: n,
        }
    }
}

/// An answer's bytes (decoded) and how many came over the wire.
#[derive(Debug)]
pub struct Body {
    pub bytes: Vec<u8>,
    pub wire: u64,
}

pub struct Server {
    pub base: String,
    /// The addresses the server's name resolved to, once, here: every request to that name
    /// goes to them, and the refusal is keyed by them (`crate::identity`).
    addresses: Vec<std::net::SocketAddr>,
    http: reqwest::blocking::Client,
    deadline: Instant,
    timeouts: Timeouts,
}

/// Why a body read stopped early (carried through `std::io::Error`).
#[derive(Debug, thiserror::Error)]
enum Abort {
    #[error("more than {0} bytes on the wire")]
    Wire(u64),
    #[error("the deadline passed")]
    Deadline,
}

/// Counts the bytes read from the wire and stops past the limit or the deadline.
struct Wire<R> {
    inner: R,
    read: u64,
    limit: u64,
    deadline: Instant,
}

impl<R: Read> Read for Wire<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if Instant::now() >= self.deadline {
            return Err(std::io::Error::other(Abort::Deadline));
        }
        // Never ask for more than one byte past the limit.
        let room = self
            .limit
            .saturating_add(1)
            .saturating_sub(self.read)
            .min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..room.max(1)])?;
        self.read += n as u64;
        if self.read > self.limit {
            return Err(std::io::Error::other(Abort::Wire(self.limit)));
        }
        Ok(n)
    }
}

/// Read `resp` to its end within `limit`, decoding gzip when `gzip`, by `deadline`. Generic
/// over what is read, so every kind of answer (JSON, blocks, PIR answers) is held to its own
/// published or fixed size the same way.
pub fn read_bounded<R: Read>(
    resp: R,
    gzip: bool,
    limit: BodyLimit,
    deadline: Instant,
) -> std::io::Result<Body> {
    let mut wire = Wire {
        inner: resp,
        read: 0,
        limit: limit.wire,
        deadline,
    };
    let mut bytes = Vec::new();
    let cap = limit.decoded.saturating_add(1);
    let got = if gzip {
        flate2::read::MultiGzDecoder::new(&mut wire)
            .take(cap)
            .read_to_end(&mut bytes)
    } else {
        (&mut wire).take(cap).read_to_end(&mut bytes)
    };
    got?;
    if bytes.len() as u64 > limit.decoded {
        return Err(std::io::Error::other(format!(
            "more than {} bytes once decompressed",
            limit.decoded
        )));
    }
    Ok(Body {
        bytes,
        wire: wire.read,
    })
}

fn origin(u: &reqwest::Url) -> reqwest::Url {
    let mut o = u.clone();
    o.set_path("/");
    o.set_query(None);
    o.set_fragment(None);
    let _ = o.set_username("");
    let _ = o.set_password(None);
    o
}

/// Redirects only to the origin the request was made to, and only a few.
fn same_origin_policy() -> redirect::Policy {
    redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(origin);
        let to = origin(attempt.url());
        if attempt.previous().len() > limits::MAX_REDIRECTS {
            let n = attempt.previous().len();
            attempt.error(format!(
                "more than {} redirects ({n})",
                limits::MAX_REDIRECTS
            ))
        } else if first.as_ref() != Some(&to) {
            let to = excerpt(to.as_str(), 100);
            attempt.error(format!("a redirect to another origin ({to})"))
        } else {
            attempt.follow()
        }
    })
}

impl Server {
    pub fn new(base: &str, timeouts: Timeouts) -> Result<Self> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--server must be an http:// or https:// URL, got {base:?}"
            )));
        }
        let (addresses, domain) = resolve(&base)?;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let mut builder = reqwest::blocking::Client::builder();
        if let Some(domain) = domain {
            // The addresses the refusal was checked against are the ones connected to: the
            // name is not resolved a second time, where its DNS could answer otherwise.
            builder = builder.resolve_to_addrs(&domain, &addresses);
        }
        let http = builder
            // This client decodes gzip itself, counting the bytes on both sides.
            .no_gzip()
            .default_headers(headers)
            // In the blocking client this bounds the wait for the answer and for each read.
            .timeout(timeouts.first_byte)
            .connect_timeout(timeouts.connect)
            .redirect(same_origin_policy())
            .build()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(Server {
            base,
            addresses,
            http,
            deadline: Instant::now() + timeouts.total,
            timeouts,
        })
    }

    /// The addresses the server's name resolved to.
    pub fn addresses(&self) -> &[std::net::SocketAddr] {
        &self.addresses
    }

    /// An absolute URL for a server path or an absolute URL the server published.
    pub fn url(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            path.to_string()
        } else {
            format!("{}{}", self.base, path)
        }
    }

    fn timed_out(&self, url: &str) -> CliError {
        if Instant::now() >= self.deadline {
            CliError::TimedOut {
                url: url.to_string(),
                reason: format!(
                    "the whole command took longer than --timeout {} s",
                    self.timeouts.total.as_secs_f64()
                ),
            }
        } else {
            CliError::TimedOut {
                url: url.to_string(),
                reason: format!(
                    "no answer for --first-byte-timeout {} s",
                    self.timeouts.first_byte.as_secs_f64()
                ),
            }
        }
    }

    fn send_error(&self, url: &str, e: reqwest::Error) -> CliError {
        if e.is_timeout() {
            self.timed_out(url)
        } else if e.is_redirect() {
            CliError::Malformed(format!("{url}: refused {}", source_text(&e)))
        } else {
            CliError::Unreachable {
                url: url.to_string(),
                reason: e.without_url().to_string(),
            }
        }
    }

    fn read_error(&self, url: &str, e: std::io::Error) -> CliError {
        let inner = e.get_ref();
        if inner
            .and_then(|i| i.downcast_ref::<Abort>())
            .is_some_and(|a| matches!(a, Abort::Deadline))
            || inner
                .and_then(|i| i.downcast_ref::<reqwest::Error>())
                .is_some_and(reqwest::Error::is_timeout)
        {
            return self.timed_out(url);
        }
        CliError::Malformed(format!("{url}: {}", excerpt(&e.to_string(), 200)))
    }

    /// Send `req`, then read a successful answer within `limit`; an error answer becomes a
    /// typed refusal quoting at most a short, sanitised part of the server's message.
    fn exchange(
        &self,
        url: &str,
        req: reqwest::blocking::RequestBuilder,
        limit: BodyLimit,
    ) -> Result<Body> {
        if Instant::now() >= self.deadline {
            return Err(self.timed_out(url));
        }
        let resp = req.send().map_err(|e| self.send_error(url, e))?;
        let gzip = match resp
            .headers()
            .get(CONTENT_ENCODING)
            .map(HeaderValue::as_bytes)
        {
            None | Some(b"identity") => false,
            Some(b"gzip") | Some(b"x-gzip") => true,
            Some(other) => {
                return Err(CliError::Malformed(format!(
                    "{url}: unsupported Content-Encoding {}",
                    excerpt(&String::from_utf8_lossy(other), 40)
                )))
            }
        };
        let status = resp.status();
        if !status.is_success() {
            let limit = BodyLimit::both(limits::MAX_ERROR_BODY_BYTES);
            let text = read_bounded(resp, gzip, limit, self.deadline)
                .map(|b| String::from_utf8_lossy(&b.bytes).into_owned())
                .unwrap_or_default();
            return Err(refusal(status.as_u16(), &text));
        }
        if resp.content_length().is_some_and(|n| n > limit.wire) {
            return Err(CliError::Malformed(format!(
                "{url}: the answer is larger than {} bytes",
                limit.wire
            )));
        }
        read_bounded(resp, gzip, limit, self.deadline).map_err(|e| self.read_error(url, e))
    }

    /// `GET` an answer of at most `limit` (a block at its published sizes, a PIR answer…).
    pub fn get_bounded(&self, path: &str, limit: BodyLimit) -> Result<Body> {
        let url = self.url(path);
        self.exchange(&url, self.http.get(&url), limit)
    }

    /// `GET` a JSON answer of at most `max_bytes`.
    pub fn get_json_within<T: DeserializeOwned>(&self, path: &str, max_bytes: u64) -> Result<T> {
        let url = self.url(path);
        let body = self.exchange(&url, self.http.get(&url), BodyLimit::both(max_bytes))?;
        parse(&url, &body.bytes)
    }

    pub fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.get_json_within(path, limits::MAX_JSON_BYTES)
    }

    /// `POST` raw bytes (a PIR query); the answer must be exactly `expect` bytes (its size is
    /// fixed by the query), read within that bound like every other answer.
    pub fn post_bytes(&self, path: &str, body: Vec<u8>, expect: usize) -> Result<Vec<u8>> {
        let url = self.url(path);
        let req = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        let got = self.exchange(&url, req, BodyLimit::both(expect as u64))?;
        if got.bytes.len() != expect {
            return Err(CliError::Malformed(format!(
                "{url}: answer of {} bytes, expected {expect}",
                got.bytes.len()
            )));
        }
        Ok(got.bytes)
    }

    /// `POST` a body a search driver made (its bytes and content type, sent as they are);
    /// the answer is read within `max_bytes`.
    pub fn post_body(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        max_bytes: u64,
    ) -> Result<Vec<u8>> {
        let url = self.url(path);
        let req = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        Ok(self.exchange(&url, req, BodyLimit::both(max_bytes))?.bytes)
    }

    pub fn post_json<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        token: Option<&str>,
    ) -> Result<T> {
        let url = self.url(path);
        let mut req = self.http.post(&url).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let body = self.exchange(&url, req, BodyLimit::both(limits::MAX_JSON_BYTES))?;
        parse(&url, &body.bytes)
    }

    pub fn delete_json<T: DeserializeOwned>(&self, path: &str, token: Option<&str>) -> Result<T> {
        let url = self.url(path);
        let mut req = self.http.delete(&url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let body = self.exchange(&url, req, BodyLimit::both(limits::MAX_JSON_BYTES))?;
        parse(&url, &body.bytes)
    }
}

/// The socket addresses `base`'s host resolves to (an IP address is its own), and the domain
/// name to pin them to in the HTTP client (none for an IP address). A name that does not
/// resolve has no addresses: the refusal's other keys are still checked before its first
/// request, which then fails as unreachable.
fn resolve(base: &str) -> Result<(Vec<std::net::SocketAddr>, Option<String>)> {
    use std::net::ToSocketAddrs;
    let url =
        reqwest::Url::parse(base).map_err(|e| CliError::Usage(format!("--server {base}: {e}")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    match url.host() {
        Some(url::Host::Ipv4(a)) => Ok((vec![(a, port).into()], None)),
        Some(url::Host::Ipv6(a)) => Ok((vec![(a, port).into()], None)),
        Some(url::Host::Domain(d)) => {
            let addrs: Vec<_> = (d, port)
                .to_socket_addrs()
                .map(Iterator::collect)
                .unwrap_or_default();
            let pin = (!addrs.is_empty()).then(|| d.to_string());
            Ok((addrs, pin))
        }
        None => Err(CliError::Usage(format!("--server {base}: no host"))),
    }
}

fn parse<T: DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| CliError::Malformed(format!("{url}: {}", excerpt(&e.to_string(), 200))))
}

/// The innermost message of an error (reqwest's redirect errors carry the policy's text).
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(s) = cur.source() {
        cur = s;
    }
    excerpt(&cur.to_string(), 200)
}

/// A refusal from an error answer: its code and a short, sanitised part of its message.
fn refusal(status: u16, text: &str) -> CliError {
    let cut = |m: &str| excerpt(m, limits::MAX_ERROR_MESSAGE_CHARS);
    match serde_json::from_str::<ErrorResponse>(text) {
        Ok(e) => CliError::Refused {
            status,
            code: format!(
                ", {}",
                serde_json::to_value(e.error.code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ),
            message: cut(&e.error.message),
        },
        Err(_) => CliError::Refused {
            status,
            code: String::new(),
            message: cut(text),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn bodies_are_held_to_their_limits_on_the_wire_and_decoded() {
        let plain = vec![7u8; 1000];
        let b = read_bounded(&plain[..], false, BodyLimit::both(1000), later()).unwrap();
        assert_eq!((b.bytes.len(), b.wire), (1000, 1000));
        assert!(read_bounded(&plain[..], false, BodyLimit::both(999), later()).is_err());
        // A gzip bomb: 64 MiB of zeros in a few KiB stops at the decoded limit.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 100_000);
        let limit = BodyLimit {
            wire: 1 << 20,
            decoded: 4096,
        };
        let e = read_bounded(&bomb[..], true, limit, later()).unwrap_err();
        assert!(e.to_string().contains("decompressed"), "{e}");
        // The declared wire size binds the compressed bytes.
        let small = gz(&plain);
        let limit = BodyLimit {
            wire: small.len() as u64 - 1,
            decoded: 1000,
        };
        assert!(read_bounded(&small[..], true, limit, later()).is_err());
        let limit = BodyLimit {
            wire: small.len() as u64,
            decoded: 1000,
        };
        let b = read_bounded(&small[..], true, limit, later()).unwrap();
        assert_eq!((b.bytes, b.wire), (plain, small.len() as u64));
        // Past the deadline nothing more is read.
        let e = read_bounded(&[1u8][..], false, BodyLimit::both(1), Instant::now()).unwrap_err();
        assert!(matches!(
            e.get_ref().and_then(|i| i.downcast_ref::<Abort>()),
            Some(Abort::Deadline)
        ));
    }

    #[test]
    fn refusals_quote_a_short_clean_message() {
        let long = format!("\u{1b}[2J{}", "x".repeat(10_000_000));
        let body = serde_json::json!({"error": {"code": "not_found", "message": long}});
        let e = refusal(404, &body.to_string());
        let shown = e.to_string();
        assert!(
            shown.len() < 1_000 && !shown.contains('\u{1b}'),
            "{}",
            shown.len()
        );
        assert!(refusal(500, &long).to_string().len() < 1_000);
    }
}
