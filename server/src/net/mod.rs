//! The listener's edge: connections accepted and served (HTTP/1.1) within bounds a hostile
//! client cannot stretch, fair admission of expensive work, and a shutdown that ends on time.
//!
//! Every phase of a connection has a bound ([`NetLimits`]):
//! - a request head (and an idle keep-alive connection, whose next head has not come) within
//!   `header_timeout` (hyper's header-read timer);
//! - a request body within `body_timeout` of its head, and a handler's answer within
//!   `request_timeout` (`http::guard`, 408);
//! - a request body that comes slower than `min_rate` bytes a second after `rate_grace` is
//!   cut with a 408 (`http::guard`), and so is a response the client reads slower, or whose
//!   write makes no progress for `write_timeout` ([`io`]); each socket's send buffer is
//!   bounded ([`SEND_BUFFER`]);
//! - at most `max_connections` open, `max_per_address` of them from one client ([`conns`]:
//!   at a cap, the address's own idle connection, the largest holder's, or the oldest idle
//!   one is closed);
//! - hyper's own refusals of a head (400, 414, 431) answer in JSON ([`io`]);
//! - a client's refusals (503) beyond [`pace::PROMPT_PER_SECOND`] a second are held until
//!   their turn, for at most [`pace::MAX_HOLD`] ([`pace`], applied in `http::guard`);
//! - a shutdown finishes the answers in progress for at most `shutdown_grace`, then closes
//!   what is left.
//!
//! Only HTTP/1.1 is spoken: browsers use HTTP/2 only over TLS, which a proxy in front
//! terminates; that keeps HTTP/2's own resource attacks (stream floods, resets) off this
//! process.

pub mod admission;
pub mod client;
pub mod conns;
pub mod io;
pub mod pace;
pub mod pools;

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
use client::ClientKey;
use conns::{Admitted, Busy, Connections};

/// The bounds of [`serve`] (command-line flags of the server).
#[derive(Debug, Clone)]
pub struct NetLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub request_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
    /// Open connections from one client at most ([`conns`]).
    pub max_per_address: usize,
    /// Bytes a second a request body must arrive at, and a response be read at, on average
    /// after `rate_grace` (0: no minimum).
    pub min_rate: u64,
    pub rate_grace: Duration,
    pub shutdown_grace: Duration,
    /// Bytes of request bodies (other than PIR queries) in flight at most (`http::guard`).
    pub body_budget: usize,
    /// `--client-address-header` (`client::ClientKey::from_request`).
    pub client_address_header: Option<String>,
}

/// The share of `max_connections` one client may hold by default: filling the server then
/// takes at least this many addresses.
pub const ADDRESS_SHARE_DIVISOR: usize = 8;
/// The minimum rate of bodies and downloads by default (bytes a second), and its grace.
/// Kestrel's is 240 B/s; this is higher because a slow reader's cost here is a send buffer
/// of up to [`SEND_BUFFER`] × 2, not a thread.
pub const DEFAULT_MIN_RATE: u64 = 2048;
pub const DEFAULT_RATE_GRACE: Duration = Duration::from_secs(5);
/// `SO_SNDBUF` of every connection (the kernel doubles it for its own bookkeeping): a client
/// that stops reading pins at most this much kernel memory, not the 4 MiB autotuning allows
/// (300 slow readers once held 1.1 GiB). 256 KiB still fills 20 Mbit/s at 100 ms RTT.
pub const SEND_BUFFER: usize = 256 << 10;

impl Default for NetLimits {
    fn default() -> Self {
        NetLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(90),
            write_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_per_address: 4096 / ADDRESS_SHARE_DIVISOR,
            min_rate: DEFAULT_MIN_RATE,
            rate_grace: DEFAULT_RATE_GRACE,
            shutdown_grace: Duration::from_secs(8),
            body_budget: 64 << 20,
            client_address_header: None,
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
    let conns = Connections::new(limits.max_connections, limits.max_per_address);
    let proxied = limits.client_address_header.clone();
    let write_limits = io::WriteLimits {
        write_timeout: limits.write_timeout,
        min_rate: limits.min_rate,
        grace: limits.rate_grace,
    };
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
        // Behind a trusted proxy the peer is the proxy: the client is known from a request.
        let key = proxied.is_none().then(|| ClientKey::of(peer.ip()));
        let conn = match conns.admit(key) {
            Admitted::Free(c) => c,
            Admitted::Evicted { conn, busy } => {
                refusals.record(if busy {
                    Refusal::EvictedBusy
                } else {
                    Refusal::Evicted
                });
                conn
            }
            Admitted::AddressFull => {
                refusals.record(Refusal::AddressCap);
                drop(stream);
                continue;
            }
            Admitted::Full => {
                refusals.record(Refusal::ConnectionCap);
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        bound_send_buffer(&stream);
        let io = TokioIo::new(io::ConnIo::new(stream, write_limits, Arc::clone(&refusals)));
        let conn = Arc::new(conn);
        let (app, busy, this) = (app.clone(), Arc::clone(&conn.busy), Arc::clone(&conn));
        let (proxied, refused) = (proxied.clone(), Arc::clone(&refusals));
        let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let held = Busy::new(&busy);
            if let Some(h) = proxied.as_deref() {
                let client = ClientKey::from_request(Some(peer), req.headers(), Some(h));
                if this.rekey(client) {
                    refused.record(Refusal::Evicted);
                }
            }
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
            // The service (and its clone of `conn`) went with the connection future.
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

/// Header timeouts are counted here; write stalls and slow readers where they are cut
/// (`io`).
fn record_connection_error(refusals: &Refusals, e: &hyper::Error) {
    if e.is_timeout() {
        refusals.record(Refusal::HeaderTimeout);
        return;
    }
    tracing::debug!(error = %e, "connection ended with an error");
}

/// Sets the socket's send buffer to [`SEND_BUFFER`].
fn bound_send_buffer(stream: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let size = SEND_BUFFER as libc::c_int;
    // SAFETY: setsockopt on an open socket with a pointer to a local int and its size.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
