//! Raw HTTP/1.1 over TCP, for clients that behave as no library would: half-sent heads and
//! bodies, connections held open (`tests/tests/hostile_clients/connections.rs`, `hostilebench`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The head of a search whose body (`Content-Length: {len}`) never comes after its first byte.
pub fn stalled_search(len: usize) -> Vec<u8> {
    format!(
        "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\n\r\n{{"
    )
    .into_bytes()
}

/// A connection to `addr` (`host:port`) from the local address `from` (any of 127.0.0.0/8 on
/// loopback: a distinct client to the server), with a receive buffer of `rcvbuf` bytes if
/// given (a small one makes a slow reader's backlog reach the server at once).
pub fn connect_from(
    addr: &str,
    from: std::net::IpAddr,
    rcvbuf: Option<usize>,
) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let s = Socket::new(Domain::for_address(to), Type::STREAM, None)?;
    if let Some(n) = rcvbuf {
        s.set_recv_buffer_size(n)?;
    }
    s.bind(&std::net::SocketAddr::new(from, 0).into())?;
    s.connect(&to.into())?;
    Ok(s.into())
}

/// [`half_sent`] from the local address `from`.
pub fn half_sent_from(
    addr: &str,
    from: std::net::IpAddr,
    bytes: &[u8],
) -> std::io::Result<TcpStream> {
    let mut s = connect_from(addr, from, None)?;
    s.write_all(bytes)?;
    Ok(s)
}

/// Whether the server has closed `s` (or sent something on it) by now, without waiting.
pub fn closed_or_answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).ok();
    let mut buf = [0u8; 1];
    let r = s.peek(&mut buf);
    s.set_nonblocking(false).ok();
    match r {
        Ok(_) => true, // EOF (0) or bytes sent
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A connection to `addr` (`host:port`) that has sent `bytes` and then nothing more.
pub fn half_sent(addr: &str, bytes: &[u8]) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.write_all(bytes)?;
    Ok(s)
}

/// Reads until the server closes `s` (or resets it), at most until `deadline`: when it was
/// closed and what it sent before; `None` if it was still open at the deadline.
pub fn read_until_closed(s: &mut TcpStream, deadline: Instant) -> Option<(Instant, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(_) => break, // reset: closed too
        }
    }
    Some((Instant::now(), String::from_utf8_lossy(&got).into_owned()))
}

/// A well-formed SimplePIR query vector for `shape` whose every value is `fill` (in the
/// values' wire unit): what a load probe sends when the answer's content does not matter. A
/// byte pattern of the wire length is not one in general: the packing's unused bits must be
/// zero, so a pattern passed at one gallery size and was refused (422) at another.
pub fn pir_query(shape: &pir::layout::Shape, fill: u8) -> Vec<u8> {
    shape.encode_query(&vec![u32::from(fill) << shape.query_drop(); shape.cols])
}
