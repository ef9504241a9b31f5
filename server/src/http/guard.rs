//! The outermost API middleware: bounds on a request's head, its body's arrival and its
//! answer's time, and the JSON error format for every error status, including those the
//! framework and tower layers produce with a text or empty body.
//!
//! - A URI over [`MAX_URI_BYTES`]: 414; a header section over [`MAX_HEADERS`] fields or
//!   [`MAX_HEAD_BYTES`]: 431 (hyper's own, bodiless limits are set well above these, in
//!   `net`).
//! - A body not received within the body timeout of the head: 408 and the connection closed
//!   (the body is cut off where it stands, whatever the handler was doing with it).
//! - An answer not ready within the request timeout: 408.
//! - Every 503 carries `Retry-After`.

use std::collections::HashMap;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use shared::api::ErrorCode;

use super::error::plain_error;
use crate::net::client::ClientKey;
use crate::ops::refusals::{Refusal, Refusals};
use crate::partition::pir::PIR_PREFIX;

/// Longest URI (path and query) accepted.
pub const MAX_URI_BYTES: usize = 8 << 10;
/// Most header fields, and most bytes of names and values, in one request.
pub const MAX_HEADERS: usize = 100;
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// `Retry-After` of a 503 that did not set its own.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 5;

/// What the middleware needs.
#[derive(Clone)]
pub struct Guard {
    pub body_timeout: Duration,
    pub request_timeout: Duration,
    pub refusals: Arc<Refusals>,
    /// Bytes of (non-PIR) request bodies in flight at most; a body is counted at its declared
    /// length, or at `max_body_bytes` when it declares none.
    pub body_budget: Arc<BodyBudget>,
    pub max_body_bytes: usize,
    /// `--client-address-header` (see `net::client`).
    pub client_address_header: Option<String>,
}

/// Bytes of request bodies in flight, bounded: thousands of connections each stalling a body
/// just under the limit would otherwise pin gigabytes. One client may hold at most
/// 1/[`CLIENT_SHARE_DIVISOR`] of the budget, so it cannot use it up for everyone else. PIR
/// answers have their own budget (`net::admission`) and are not counted here.
#[derive(Debug)]
pub struct BodyBudget {
    cap: usize,
    /// Bytes reserved in all, and by client.
    used: std::sync::Mutex<(usize, HashMap<ClientKey, usize>)>,
}

/// A client may reserve at most this fraction of the body budget.
pub const CLIENT_SHARE_DIVISOR: usize = 8;

/// Reserved bytes, returned when the request is done.
struct Reserved<'a>(&'a BodyBudget, ClientKey, usize);

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let mut u = self.0.lock();
        u.0 -= self.2;
        if let Some(c) = u.1.get_mut(&self.1) {
            *c -= self.2;
            if *c == 0 {
                u.1.remove(&self.1);
            }
        }
    }
}

impl BodyBudget {
    pub fn new(cap: usize) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            cap,
            used: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<ClientKey, usize>)> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reserve(&self, client: ClientKey, bytes: usize) -> Option<Reserved<'_>> {
        if bytes == 0 {
            return Some(Reserved(self, client, 0));
        }
        let mut u = self.lock();
        let mine = u.1.get(&client).copied().unwrap_or(0);
        if u.0.saturating_add(bytes) > self.cap
            || mine.saturating_add(bytes) > self.cap / CLIENT_SHARE_DIVISOR
        {
            return None;
        }
        u.0 += bytes;
        *u.1.entry(client).or_default() += bytes;
        Some(Reserved(self, client, bytes))
    }
}

/// `Retry-After` of a request refused for the body budget.
const BODY_BUDGET_RETRY_SECS: u64 = 2;

/// A request body that ends with an error once its deadline passes, flagging that it did,
/// and flagging when it was read to its end.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request body did not arrive in time",
            )))));
        }
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) {
            self.ended.store(true, Ordering::Release);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn head_error(refusals: &Refusals, status: StatusCode, message: &str) -> Response {
    refusals.record(Refusal::HeadTooLarge);
    plain_error(status, ErrorCode::HeadTooLarge, message)
}

fn timeout_error(refusals: &Refusals, kind: Refusal, message: &str) -> Response {
    refusals.record(kind);
    // The rest of a late body may still be on its way: not worth reading, close.
    closing(plain_error(
        StatusCode::REQUEST_TIMEOUT,
        ErrorCode::Timeout,
        message,
    ))
}

/// `resp` with `Connection: close`. A response sent before its request's body was read to
/// the end ends its connection (hyper will not read an unknown rest to find the next
/// request), and saying so keeps a client from sending its next request down a connection
/// being closed under it (which it sees as a broken message, not an answer).
pub fn closing(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A request's declared `Content-Length`, if it is one number.
pub fn declared_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

pub async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return head_error(
            &g.refusals,
            StatusCode::URI_TOO_LONG,
            &format!("the URI is {uri_len} bytes; at most {MAX_URI_BYTES} are accepted"),
        );
    }
    let h = req.headers();
    let head_bytes: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
    if h.len() > MAX_HEADERS || head_bytes > MAX_HEAD_BYTES {
        return head_error(
            &g.refusals,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!(
                "{} header fields of {head_bytes} bytes; at most {MAX_HEADERS} fields and \
                 {MAX_HEAD_BYTES} bytes are accepted",
                h.len()
            ),
        );
    }
    // Bytes a body may pin: its declared length (hyper enforces it), else the route limit.
    let pir = req.method() == axum::http::Method::POST && req.uri().path().starts_with(PIR_PREFIX);
    let declared = declared_length(req.headers());
    let has_body = declared.map_or(req.headers().contains_key(header::TRANSFER_ENCODING), |n| {
        n > 0
    });
    let pinned = if has_body && !pir {
        declared.unwrap_or(g.max_body_bytes).min(g.max_body_bytes)
    } else {
        0
    };
    // Computed once here; handlers read it from the request (`Extension<ClientKey>`).
    let client = ClientKey::from_request(
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0),
        req.headers(),
        g.client_address_header.as_deref(),
    );
    let mut req = req;
    req.extensions_mut().insert(client);
    let Some(_reserved) = g.body_budget.reserve(client, pinned) else {
        g.refusals.record(Refusal::BodyBudget);
        let mut r = plain_error(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Busy,
            "too many request bytes are being received; retry later",
        );
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(BODY_BUDGET_RETRY_SECS),
        );
        return if has_body { closing(r) } else { r };
    };
    let expired = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    let deadline = Box::pin(tokio::time::sleep(g.body_timeout));
    let (expired_flag, ended_flag) = (Arc::clone(&expired), Arc::clone(&ended));
    let req = req.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline,
            expired: expired_flag,
            ended: ended_flag,
        })
    });
    let resp = match tokio::time::timeout(g.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            return timeout_error(
                &g.refusals,
                Refusal::RequestTimeout,
                "the answer was not ready in time; retry later",
            )
        }
    };
    if expired.load(Ordering::Acquire) {
        return timeout_error(
            &g.refusals,
            Refusal::BodyTimeout,
            &format!(
                "the request body did not arrive within {} s",
                g.body_timeout.as_secs()
            ),
        );
    }
    let resp = as_json_error(resp);
    // PIR answers linger over a refused body themselves (`http::pir`) and keep the connection.
    if has_body && !pir && !ended.load(Ordering::Acquire) {
        return closing(resp);
    }
    resp
}

/// An error response not already in the JSON format (the framework's 405/413, a layer's
/// 408, a static file's 404, …) rewritten into it; every 503 given a `Retry-After`.
fn as_json_error(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let mut resp = if is_json {
        resp
    } else {
        let code = match status {
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::REQUEST_TIMEOUT => ErrorCode::Timeout,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::URI_TOO_LONG | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
                ErrorCode::HeadTooLarge
            }
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => ErrorCode::Busy,
            s if s.is_server_error() => ErrorCode::Internal,
            _ => ErrorCode::InvalidInput,
        };
        let message = status.canonical_reason().unwrap_or("error").to_lowercase();
        let retry = resp.headers().get(header::RETRY_AFTER).cloned();
        let mut r = plain_error(status, code, &message);
        if let Some(v) = retry {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    };
    if status == StatusCode::SERVICE_UNAVAILABLE
        && !resp.headers().contains_key(header::RETRY_AFTER)
    {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(DEFAULT_RETRY_AFTER_SECS),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    #[test]
    fn one_client_cannot_take_the_whole_body_budget() {
        let b = BodyBudget::new(800);
        let (a, c) = (
            ClientKey("10.0.0.1".parse().unwrap()),
            ClientKey("10.0.0.2".parse().unwrap()),
        );
        let held: Vec<_> = (0..10).map_while(|_| b.reserve(a, 30)).collect();
        assert_eq!(held.len(), 100 / 30, "a's share is 800 / 8");
        let other = b.reserve(c, 100).expect("another client has its own share");
        assert!(b.reserve(c, 1).is_none());
        drop(held);
        assert!(b.reserve(a, 100).is_some());
        drop(other);
        assert_eq!(b.lock().0, 0);
        assert!(b.lock().1.is_empty());
    }

    #[test]
    fn framework_errors_become_json_and_every_503_says_when_to_retry() {
        let text = (StatusCode::METHOD_NOT_ALLOWED, "nope").into_response();
        let r = as_json_error(text);
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE].to_str().unwrap(),
            "application/json"
        );
        let busy = as_json_error(StatusCode::SERVICE_UNAVAILABLE.into_response());
        assert_eq!(busy.headers()[header::RETRY_AFTER], "5");
        let ok = as_json_error((StatusCode::OK, "fine").into_response());
        assert!(!ok.headers().contains_key(header::RETRY_AFTER));
        assert_eq!(
            ok.headers()[header::CONTENT_TYPE].to_str().unwrap(),
            "text/plain; charset=utf-8"
        );
    }
}
