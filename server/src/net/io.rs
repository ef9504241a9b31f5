//! A connection's socket as hyper sees it: a minimum rate for writes once the client stops
//! keeping up, and hyper's own head-parsing refusals answered in the API's JSON format.
//!
//! **Writes.** A response that the client reads slower than `min_rate` bytes a second, on
//! average over a stretch of at least `grace` during which the socket's buffer stayed full, is
//! cut (as Kestrel's `MinResponseDataRate`): 300 clients reading a 10 MB hint at 16 KB every
//! 15 s once held 1.1 GiB of kernel memory. A stretch ends once the buffer has had room for
//! [`UNBLOCKED_ENDS`] (the client caught up). Independently, a write that makes no progress
//! for `write_timeout` is cut. A cut is a reset ([`Abort`]): a plain close would leave the
//! backlog in the kernel, still sent at the reader's pace (seen: 370 KB queued in FIN-WAIT-1).
//! With the send buffer bounded (`net::serve` sets `SO_SNDBUF`), a slow reader holds at most
//! that much kernel memory, for at most about `grace`.
//!
//! **Lingering close.** When a connection ends with bytes of the request still coming (a
//! too-large body answered 413 before it was read), closing the socket at once makes the
//! kernel answer them with a reset, which can reach the client before it has read the answer.
//! So a connection that ends (unless cut) is closed as nginx's `lingering_close` does: the
//! write side shut (the answer, then FIN), and what the client still sends read and
//! discarded for at most [`LINGER_BYTES`] and [`LINGER_TIME`]; at most [`MAX_LINGERING`]
//! sockets linger at once, beyond that one closes at once.
//!
//! **hyper's refusals.** A head hyper cannot parse (400), a URI longer than its buffer (414)
//! or more header fields than it takes (431) get hyper's own answer, an empty body with
//! `content-length: 0`, and the connection is closed. Those answers are the only bodiless
//! 400/414/431 this server writes (every other error passes `http::guard`, which gives it a
//! JSON body), so such a head, written as one whole write, is replaced here by the same
//! status with a JSON error body.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use shared::api::{ErrorCode, ErrorResponse};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::ops::refusals::{Refusal, Refusals};

/// A write stretch ends after the socket had room this long.
pub const UNBLOCKED_ENDS: Duration = Duration::from_secs(1);
/// How often the rate is checked while a write waits, after the grace.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// At most this much of what a client still sends is read and discarded after the end: a
/// body a little over the JSON limit (1 MiB) written whole before its answer is read.
pub const LINGER_BYTES: usize = 2 << 20;
/// For at most this long.
pub const LINGER_TIME: Duration = Duration::from_secs(1);
/// Sockets lingering at once at most (each holds a file descriptor for up to [`LINGER_TIME`]).
pub const MAX_LINGERING: usize = 1024;

static LINGERING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How a socket is closed: at once with a reset ([`Abort::abort`]: `SO_LINGER` 0, so a cut
/// slow reader's backlog does not stay in the kernel, sent on at its pace), or lingering
/// ([`Abort::linger`], the module's lingering close).
pub trait Abort {
    fn abort(&self);
    /// Called as the connection's socket is dropped (not after `abort`).
    fn linger(&self) {}
}

impl Abort for tokio::net::TcpStream {
    fn abort(&self) {
        use std::os::fd::AsRawFd;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on an open socket with a pointer to a local struct and its size.
        unsafe {
            libc::setsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }

    fn linger(&self) {
        use std::os::fd::AsFd;
        use std::sync::atomic::Ordering;
        if LINGERING.fetch_add(1, Ordering::Relaxed) >= MAX_LINGERING {
            LINGERING.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        // A second descriptor keeps the socket open once hyper's is closed.
        let dup = self
            .as_fd()
            .try_clone_to_owned()
            .map(std::net::TcpStream::from)
            .and_then(|s| {
                s.shutdown(std::net::Shutdown::Write)?;
                tokio::net::TcpStream::from_std(s)
            });
        let Ok(mut sock) = dup else {
            LINGERING.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let mut buf = vec![0u8; 8192];
            let mut left = LINGER_BYTES;
            let _ = tokio::time::timeout(LINGER_TIME, async {
                while left > 0 {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            })
            .await;
            drop(sock);
            LINGERING.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

impl Abort for tokio::io::DuplexStream {
    fn abort(&self) {}
}

/// The write bounds of one connection.
#[derive(Debug, Clone, Copy)]
pub struct WriteLimits {
    pub write_timeout: Duration,
    /// Bytes a second; 0 turns the rate check off.
    pub min_rate: u64,
    pub grace: Duration,
}

/// A stretch of writes during which the socket's buffer was full.
struct Stretch {
    start: Instant,
    bytes: u64,
    /// When a write last completed after waiting (`None` while one waits).
    unblocked: Option<Instant>,
}

/// The socket wrapper (see the module's documentation).
pub struct ConnIo<S: Abort> {
    inner: S,
    /// Cut with a reset ([`Abort::abort`]): not lingered on.
    aborted: bool,
    limits: WriteLimits,
    refusals: std::sync::Arc<Refusals>,
    stretch: Option<Stretch>,
    last_progress: Instant,
    timer: Pin<Box<Sleep>>,
    /// A JSON answer replacing hyper's own, and how much of it is written.
    replacing: Option<(Vec<u8>, usize)>,
}

impl<S: Abort> Drop for ConnIo<S> {
    fn drop(&mut self) {
        if !self.aborted {
            self.inner.linger();
        }
    }
}

impl<S: Abort> ConnIo<S> {
    pub fn new(inner: S, limits: WriteLimits, refusals: std::sync::Arc<Refusals>) -> Self {
        let now = Instant::now();
        ConnIo {
            inner,
            aborted: false,
            limits,
            refusals,
            stretch: None,
            last_progress: now,
            timer: Box::pin(tokio::time::sleep_until(now + limits.write_timeout)),
            replacing: None,
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

/// hyper's bodiless answer to a head it could not parse: its status, if `head` is one.
fn hyper_refusal(head: &[u8]) -> Option<u16> {
    if head.len() > 512 || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let status = match text.get(..13)? {
        "HTTP/1.1 400 " => 400,
        "HTTP/1.1 414 " => 414,
        "HTTP/1.1 431 " => 431,
        _ => return None,
    };
    text.to_ascii_lowercase()
        .contains("\r\ncontent-length: 0\r\n")
        .then_some(status)
}

/// The JSON answer for hyper's refusal `status`; the connection closes after it.
fn json_refusal(status: u16) -> Vec<u8> {
    let (reason, code, message) = match status {
        414 => (
            "URI Too Long",
            ErrorCode::HeadTooLarge,
            "the URI is longer than the server reads",
        ),
        431 => (
            "Request Header Fields Too Large",
            ErrorCode::HeadTooLarge,
            "the header section has more fields or bytes than the server reads",
        ),
        _ => (
            "Bad Request",
            ErrorCode::InvalidInput,
            "the request head is not valid HTTP/1.1",
        ),
    };
    let body = serde_json::to_string(&ErrorResponse::new(code, message)).expect("serializable");
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\nx-content-type-options: nosniff\r\n\
         content-security-policy: default-src 'none'\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<S: AsyncWrite + Abort + Unpin> ConnIo<S> {
    /// Writes what remains of a replacing answer; Ready once all of it is written.
    fn drive_replacing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((buf, pos)) = self.replacing.as_mut() {
            if *pos == buf.len() {
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.inner).poll_write(cx, &buf[*pos..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *pos += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.waiting(cx).map(|r| r.map(|_| ())),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The outcome of a write: progress counted, or (waiting) the bounds checked and a timer
    /// set to check them again.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                let now = Instant::now();
                if n > 0 {
                    self.last_progress = now;
                }
                if let Some(s) = self.stretch.as_mut() {
                    s.bytes += n as u64;
                    if s.unblocked.is_none() {
                        s.unblocked = Some(now);
                    }
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.waiting(cx),
            other => other,
        }
    }

    fn waiting(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let now = Instant::now();
        let fresh = match &self.stretch {
            None => true,
            Some(s) => s.unblocked.is_some_and(|u| now - u >= UNBLOCKED_ENDS),
        };
        if fresh {
            self.stretch = Some(Stretch {
                start: now,
                bytes: 0,
                unblocked: None,
            });
        }
        let s = self.stretch.as_mut().expect("set above");
        s.unblocked = None;
        if now - self.last_progress >= self.limits.write_timeout {
            self.refusals.record(Refusal::WriteStalled);
            self.inner.abort();
            self.aborted = true;
            return Poll::Ready(Err(timed_out("a response write made no progress")));
        }
        let elapsed = now - s.start;
        let rate = self.limits.min_rate;
        if rate > 0
            && elapsed >= self.limits.grace
            && (s.bytes as f64) < rate as f64 * elapsed.as_secs_f64()
        {
            self.refusals.record(Refusal::SlowReader);
            self.inner.abort();
            self.aborted = true;
            return Poll::Ready(Err(timed_out(
                "the client reads the response slower than the minimum rate",
            )));
        }
        let mut next = self.last_progress + self.limits.write_timeout;
        if rate > 0 {
            next = next.min(if elapsed < self.limits.grace {
                s.start + self.limits.grace
            } else {
                now + CHECK_EVERY
            });
        }
        self.timer.as_mut().reset(next);
        // Registers the waker; a timer already due wakes the task at once.
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Abort + Unpin> AsyncRead for ConnIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Abort + Unpin> AsyncWrite for ConnIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            if let Some(status) = hyper_refusal(buf) {
                if status != 400 {
                    this.refusals.record(Refusal::HeadTooLarge);
                }
                this.replacing = Some((json_refusal(status), 0));
            }
        }
        if this.replacing.is_some() {
            // hyper's answer counts as written once ours is.
            return this.drive_replacing(cx).map_ok(|()| buf.len());
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty());
        let whole_head = first.is_some_and(|b| hyper_refusal(b).is_some())
            && bufs.iter().filter(|b| !b.is_empty()).count() == 1;
        if self.replacing.is_some() || whole_head {
            return self.poll_write(cx, first.map_or(&[][..], |b| &b[..]));
        }
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.replacing.is_some() {
            std::task::ready!(this.drive_replacing(cx))?;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.replacing.is_some() {
            std::task::ready!(this.drive_replacing(cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_head_refusals_are_replaced() {
        let h = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                  content-length: 0\r\ndate: Sat, 05 Dec 2026 01:00:00 GMT\r\n\r\n";
        assert_eq!(hyper_refusal(h), Some(431));
        let bad = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_refusal(bad), Some(400));
        // A JSON error (it has a body), another status, or part of a head: left alone.
        let json = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 62\r\n\r\n";
        assert_eq!(hyper_refusal(json), None);
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_refusal(ok), None);
        assert_eq!(
            hyper_refusal(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n"),
            None
        );
        let answer = json_refusal(414);
        let text = String::from_utf8(answer).unwrap();
        let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
        let e: ErrorResponse = serde_json::from_str(body).unwrap();
        assert_eq!(e.error.code, ErrorCode::HeadTooLarge);
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
    }

    /// A reader that takes `per_read` bytes every `every`: cut after the grace when that is
    /// under the minimum rate, not when it is over.
    async fn slow_reader_cut(per_read: usize, every: Duration) -> bool {
        let (server, mut client) = tokio::io::duplex(1024);
        let limits = WriteLimits {
            write_timeout: Duration::from_secs(60),
            min_rate: 10_000,
            grace: Duration::from_millis(300),
        };
        let mut io = ConnIo::new(server, limits, Default::default());
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; per_read];
            loop {
                tokio::time::sleep(every).await;
                match tokio::io::AsyncReadExt::read(&mut client, &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        });
        let data = vec![7u8; 64 << 10];
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncWriteExt::write_all(&mut io, &data),
        )
        .await;
        reader.abort();
        matches!(r, Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut)
    }

    #[tokio::test]
    async fn a_reader_under_the_minimum_rate_is_cut_after_the_grace() {
        // 200 B every 50 ms = 4 KB/s against a minimum of 10 KB/s.
        assert!(slow_reader_cut(200, Duration::from_millis(50)).await);
        // 8 KiB every 10 ms, about 800 KB/s: the 64 KiB go through.
        assert!(!slow_reader_cut(8 << 10, Duration::from_millis(10)).await);
    }
}
