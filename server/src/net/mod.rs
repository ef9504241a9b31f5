//! The listener's edge: connections accepted and served (HTTP/1.1) within bounds a hostile
//! client cannot stretch, fair admission of expensive work, and a shutdown that ends on time.
//!
//! Every phase of a connection has a bound ([`NetLimits`]):
//! - a request head (and an idle keep-alive connection, whose next head has not come) within
//!   `header_timeout` (hyper's header-read timer);
//! - a request body within `body_timeout` of its head, and a handler's answer within
//!   `request_timeout` (`http::guard`, 408);
//! - a response write that makes no progress for `write_timeout` ends the connection
//!   (`tokio-io-timeout`);
//! - at most `max_connections` open ([`conns`]: at the cap the oldest idle one is closed);
//! - a shutdown finishes the answers in progress for at most `shutdown_grace`, then closes
//!   what is left.
//!
//! Only HTTP/1.1 is spoken: browsers use HTTP/2 only over TLS, which a proxy in front
//! terminates; that keeps HTTP/2's own resource attacks (stream floods, resets) off this
//! process.

pub mod admission;
pub mod client;
pub mod conns;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower::ServiceExt;

use crate::ops::refusals::{Refusal, Refusals};
use conns::{Admitted, Busy, Connections};

/// The bounds of [`serve`] (command-line flags of the server).
#[derive(Debug, Clone)]
pub struct NetLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub request_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// Bytes of request bodies (other than PIR queries) in flight at most (`http::guard`).
    pub body_budget: usize,
}

impl Default for NetLimits {
    fn default() -> Self {
        NetLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(90),
            write_timeout: Duration::from_secs(30),
            max_connections: 4096,
            shutdown_grace: Duration::from_secs(8),
            body_budget: 64 << 20,
        }
    }
}

/// Headers hyper itself accepts (above: its own bodiless 431). `http::guard` answers a JSON
/// 431 well below this, at `guard::MAX_HEADERS`.
const HYPER_MAX_HEADERS: usize = 256;
/// hyper's read buffer: a head beyond it gets hyper's own 431; `guard` refuses heads over
/// `guard::MAX_HEAD_BYTES` with a JSON one first.
const HYPER_MAX_BUF: usize = 64 << 10;
/// File descriptors kept beyond the connection cap (the store, block files, logs).
pub const FD_RESERVE: u64 = 256;

/// Raises the soft limit on open files towards `wanted` (up to the hard limit); returns the
/// limit in force. Each connection takes one descriptor, so the connection cap must stay
/// below it: about 20,000 half-sent requests once reached it and `accept` failed for all.
pub fn raise_open_files(wanted: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        let (cur, max): (u64, u64) = (lim.rlim_cur, lim.rlim_max);
        let target = wanted.min(max).max(cur);
        if target > cur {
            let new = libc::rlimit {
                rlim_cur: target as libc::rlim_t,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &new) == 0 {
                return target;
            }
        }
        cur
    }
}

/// A response body that keeps its connection marked busy until it is sent or dropped, so a
/// slow download is never taken for an idle connection.
struct HeldBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for HeldBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the answers in progress
/// finish for at most `limits.shutdown_grace` and returns (connections still open are
/// closed). Each request carries `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &NetLimits,
    refusals: Arc<Refusals>,
    shutdown: impl Future<Output = ()>,
) {
    let conns = Connections::new(limits.max_connections);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(HYPER_MAX_HEADERS)
        .max_buf_size(HYPER_MAX_BUF);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors (or memory): pause rather than spin.
                    refusals.record(Refusal::AcceptError);
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let conn = match conns.admit() {
            Admitted::Free(c) => c,
            Admitted::Evicted(c) => {
                refusals.record(Refusal::Evicted);
                c
            }
            Admitted::Full => {
                refusals.record(Refusal::ConnectionCap);
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let mut io = tokio_io_timeout::TimeoutStream::new(stream);
        io.set_write_timeout(Some(limits.write_timeout));
        let io = TokioIo::new(Box::pin(io));
        let (app, busy) = (app.clone(), Arc::clone(&conn.busy));
        let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let held = Busy::new(&busy);
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                let resp = app.oneshot(req).await?;
                Ok::<_, std::convert::Infallible>(resp.map(|b| {
                    Body::new(HeldBody {
                        inner: b,
                        _busy: held,
                    })
                }))
            }
        });
        let served = graceful.watch(http.serve_connection(io, svc));
        let refusals = Arc::clone(&refusals);
        tokio::spawn(async move {
            let close = Arc::clone(&conn.close);
            tokio::select! {
                r = served => if let Err(e) = r {
                    record_connection_error(&refusals, &e);
                },
                () = close.notified() => {}
            }
            drop(conn);
        });
    }
    drop(listener);
    let open = conns.len();
    tracing::info!(
        open,
        grace_secs = limits.shutdown_grace.as_secs_f64(),
        "shutting down: no new connections; answers in progress may finish"
    );
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = conns.len(),
            "shutdown grace over: closing the connections still open"
        );
        conns.close_all();
        // The tasks notice at their next poll; a moment lets them drop their sockets.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn record_connection_error(refusals: &Refusals, e: &hyper::Error) {
    if e.is_timeout() {
        refusals.record(Refusal::HeaderTimeout);
        return;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                refusals.record(Refusal::WriteStalled);
            }
            return;
        }
        src = s.source();
    }
    tracing::debug!(error = %e, "connection ended with an error");
}
