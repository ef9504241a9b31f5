//! The outermost API middleware: bounds on a request's head, its body's arrival and its
//! answer's time, and the JSON error format for every error status, including those the
//! framework and tower layers produce with a text or empty body.
//!
//! - A URI over [`MAX_URI_BYTES`]: 414; a header section over [`MAX_HEADERS`] fields or
//!   [`MAX_HEAD_BYTES`]: 431 (hyper's own, bodiless limits are set well above these, in
//!   `net`).
//! - A body not received within the body timeout of the head, or coming slower than the
//!   minimum rate after its grace: 408 and the connection closed (the body is cut off where
//!   it stands, whatever the handler was doing with it).
//! - A body's bytes are charged to the body budget as they arrive: beyond it (or the client's
//!   share of it), 503 with `Retry-After` and the connection closed.
//! - An answer not ready within the request timeout: 408.
//! - Every 503 carries `Retry-After`, and is held while its client is refused faster than
//!   `net::pace` answers (a client ignoring `Retry-After` waits instead of making work).

use std::collections::HashMap;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
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
use crate::net::pace::RefusalPace;
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
    /// A body must arrive at `min_rate` bytes a second on average once `rate_grace` has
    /// passed since its head (0: no minimum); slower, it is cut with a 408.
    pub min_rate: u64,
    pub rate_grace: Duration,
    pub refusals: Arc<Refusals>,
    /// Bytes of (non-PIR) request bodies received and held at most.
    pub body_budget: Arc<BodyBudget>,
    /// `--client-address-header` (see `net::client`).
    pub client_address_header: Option<String>,
    /// When each client's next refusal may be sent.
    pub pace: Arc<RefusalPace>,
}

/// Bytes of request bodies received and not yet released, bounded: thousands of connections
/// each sending a body just under the limit would otherwise pin gigabytes. Bytes are charged
/// as they arrive, never at a declared length: 64 bodies declaring 1 MiB and sent at 1 KB/s
/// once held the whole budget, and every other client's search got 503 for 30 s. One client
/// may hold at most 1/[`CLIENT_SHARE_DIVISOR`] of the budget, so it cannot use it up for
/// everyone else. PIR queries have their own budget (`net::admission`) and are not counted.
#[derive(Debug)]
pub struct BodyBudget {
    cap: usize,
    /// Bytes charged in all, and by client.
    used: std::sync::Mutex<(usize, HashMap<ClientKey, usize>)>,
}

/// A client may hold at most this fraction of the body budget.
pub const CLIENT_SHARE_DIVISOR: usize = 8;

/// The bytes one request's body has been charged; returned when the request is done (the
/// guard holds it until its answer is built, so a body read into memory stays counted).
struct Charge {
    budget: Arc<BodyBudget>,
    client: ClientKey,
    bytes: std::sync::atomic::AtomicUsize,
}

impl Charge {
    /// Charges `n` more bytes; false (nothing charged) if that would pass a limit.
    fn add(&self, n: usize) -> bool {
        let ok = self.budget.charge(self.client, n);
        if ok {
            self.bytes.fetch_add(n, Ordering::AcqRel);
        }
        ok
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.client, *self.bytes.get_mut());
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

    fn charge(&self, client: ClientKey, bytes: usize) -> bool {
        if bytes == 0 {
            return true;
        }
        let mut u = self.lock();
        let mine = u.1.get(&client).copied().unwrap_or(0);
        if u.0.saturating_add(bytes) > self.cap
            || mine.saturating_add(bytes) > self.cap / CLIENT_SHARE_DIVISOR
        {
            return false;
        }
        u.0 += bytes;
        *u.1.entry(client).or_default() += bytes;
        true
    }

    fn release(&self, client: ClientKey, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut u = self.lock();
        u.0 -= bytes;
        if let Some(c) = u.1.get_mut(&client) {
            *c -= bytes;
            if *c == 0 {
                u.1.remove(&client);
            }
        }
    }

    /// Bytes charged now, in all.
    pub fn used(&self) -> usize {
        self.lock().0
    }
}

/// `Retry-After` of a request refused for the body budget.
const BODY_BUDGET_RETRY_SECS: u64 = 2;
/// How often a body's rate is checked while it is awaited, after the grace.
const RATE_CHECK_EVERY: Duration = Duration::from_millis(500);

/// Why a body was cut off.
const CUT_NONE: u8 = 0;
const CUT_DEADLINE: u8 = 1;
const CUT_SLOW: u8 = 2;
const CUT_BUDGET: u8 = 3;

/// A request body bounded in time (a deadline, a minimum rate after a grace) and in bytes
/// held (charged to the budget as they arrive); it ends with an error when cut, recording
/// why, and flags when it was read to its end.
struct GuardedBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    started: tokio::time::Instant,
    received: u64,
    min_rate: u64,
    rate_grace: Duration,
    check: Pin<Box<tokio::time::Sleep>>,
    /// `None` for PIR queries (charged by `net::admission`).
    charge: Option<Arc<Charge>>,
    cut: Arc<AtomicU8>,
    ended: Arc<AtomicBool>,
}

impl GuardedBody {
    fn cut_off(
        &self,
        why: u8,
        message: &str,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        self.cut.store(why, Ordering::Release);
        Poll::Ready(Some(Err(axum::Error::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            message.to_string(),
        )))))
    }

    /// Below the minimum rate once past the grace?
    fn too_slow(&self) -> bool {
        let elapsed = self.started.elapsed();
        self.min_rate > 0
            && elapsed >= self.rate_grace
            && (self.received as f64) < self.min_rate as f64 * elapsed.as_secs_f64()
    }
}

impl http_body::Body for GuardedBody {
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
            return self.cut_off(CUT_DEADLINE, "the request body did not arrive in time");
        }
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        match &frame {
            Poll::Ready(None) => self.ended.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(f))) => {
                let n = f.data_ref().map_or(0, |d| d.len());
                self.received += n as u64;
                if let Some(c) = &self.charge {
                    if !c.add(n) {
                        return self.cut_off(CUT_BUDGET, "the body budget is used up");
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => {}
            Poll::Pending => {
                if self.too_slow() {
                    return self.cut_off(CUT_SLOW, "the request body came too slowly");
                }
                if self.min_rate > 0 {
                    let now = tokio::time::Instant::now();
                    let grace_end = self.started + self.rate_grace;
                    let next = if now < grace_end {
                        grace_end
                    } else {
                        now + RATE_CHECK_EVERY
                    };
                    self.check.as_mut().reset(next);
                    if self.check.as_mut().poll(cx).is_ready() {
                        cx.waker().wake_by_ref();
                    }
                }
            }
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

pub async fn guard(State(g): State<Guard>, mut req: Request, next: Next) -> Response {
    // Computed once here; handlers read it from the request (`Extension<ClientKey>`).
    let client = ClientKey::from_request(
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0),
        req.headers(),
        g.client_address_header.as_deref(),
    );
    req.extensions_mut().insert(client);
    let resp = guarded(&g, client, req, next).await;
    if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
        let hold = g.pace.hold(client, std::time::Instant::now());
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
    }
    resp
}

async fn guarded(g: &Guard, client: ClientKey, req: Request, next: Next) -> Response {
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
    let pir = req.method() == axum::http::Method::POST && req.uri().path().starts_with(PIR_PREFIX);
    let declared = declared_length(req.headers());
    let has_body = declared.map_or(req.headers().contains_key(header::TRANSFER_ENCODING), |n| {
        n > 0
    });
    let charge = (!pir).then(|| {
        Arc::new(Charge {
            budget: Arc::clone(&g.body_budget),
            client,
            bytes: Default::default(),
        })
    });
    let cut = Arc::new(AtomicU8::new(CUT_NONE));
    let ended = Arc::new(AtomicBool::new(false));
    let now = tokio::time::Instant::now();
    let (body_charge, cut_flag, ended_flag) =
        (charge.clone(), Arc::clone(&cut), Arc::clone(&ended));
    let req = req.map(|inner| {
        Body::new(GuardedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(g.body_timeout)),
            started: now,
            received: 0,
            min_rate: g.min_rate,
            rate_grace: g.rate_grace,
            check: Box::pin(tokio::time::sleep_until(now + g.rate_grace)),
            charge: body_charge,
            cut: cut_flag,
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
    // The body's bytes stay charged until its answer is built.
    drop(charge);
    match cut.load(Ordering::Acquire) {
        CUT_DEADLINE => {
            return timeout_error(
                &g.refusals,
                Refusal::BodyTimeout,
                &format!(
                    "the request body did not arrive within {} s",
                    g.body_timeout.as_secs()
                ),
            )
        }
        CUT_SLOW => {
            return timeout_error(
                &g.refusals,
                Refusal::SlowBody,
                &format!(
                    "the request body came slower than {} bytes a second",
                    g.min_rate
                ),
            )
        }
        CUT_BUDGET => {
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
            return closing(r);
        }
        _ => {}
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
    use http_body::Body as _;

    #[test]
    fn one_client_cannot_take_the_whole_body_budget() {
        let b = BodyBudget::new(800);
        let (a, c) = (
            ClientKey("10.0.0.1".parse().unwrap()),
            ClientKey("10.0.0.2".parse().unwrap()),
        );
        let held = (0..10).take_while(|_| b.charge(a, 30)).count();
        assert_eq!(held, 100 / 30, "a's share is 800 / 8");
        assert!(b.charge(c, 100), "another client has its own share");
        assert!(!b.charge(c, 1));
        b.release(a, 30 * held);
        assert!(b.charge(a, 100));
        b.release(a, 100);
        b.release(c, 100);
        assert_eq!(b.used(), 0);
        assert!(b.lock().1.is_empty());
    }

    /// A body whose bytes have not come is charged nothing, and one that comes is charged
    /// what came, until the charge is dropped.
    #[tokio::test]
    async fn a_body_is_charged_the_bytes_received_not_its_declared_length() {
        let budget = BodyBudget::new(8 << 20);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let stream = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
        }));
        let charge = Arc::new(Charge {
            budget: Arc::clone(&budget),
            client: ClientKey::UNKNOWN,
            bytes: Default::default(),
        });
        let now = tokio::time::Instant::now();
        let mut body = Body::new(GuardedBody {
            inner: stream,
            deadline: Box::pin(tokio::time::sleep(Duration::from_secs(60))),
            started: now,
            received: 0,
            min_rate: 0,
            rate_grace: Duration::from_secs(5),
            check: Box::pin(tokio::time::sleep(Duration::from_secs(5))),
            charge: Some(Arc::clone(&charge)),
            cut: Default::default(),
            ended: Default::default(),
        });
        assert_eq!(budget.used(), 0);
        tx.send(Bytes::from(vec![0u8; 1000])).await.unwrap();
        let f = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let data = f.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data.len(), 1000);
        assert_eq!(budget.used(), 1000);
        drop(body);
        assert_eq!(budget.used(), 1000, "held by the request until its answer");
        drop(charge);
        assert_eq!(budget.used(), 0);
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
