//! A hostile server for the tests: a raw HTTP/1.1 listener (one request per connection) whose
//! handler decides every byte of the answer — bodies that lie about their length, stall,
//! drip, are generated on the fly to hundreds of MB, or redirect elsewhere — and that
//! otherwise forwards to a real server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the body of an answer is sent.
pub enum Body {
    /// All at once, with its true `Content-Length`.
    Bytes(Vec<u8>),
    /// One byte every `every`, with its true `Content-Length`.
    Drip { bytes: Vec<u8>, every: Duration },
    /// `Content-Length` of the whole, the first half sent, then the connection held open.
    HalfThenStall(Vec<u8>),
    /// `head`, then `unit` repeated until `total` bytes, chunked (no length announced).
    Generated {
        head: Vec<u8>,
        unit: Vec<u8>,
        total: u64,
    },
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Reply {
    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: Body::Bytes(body),
        }
    }
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

pub type Handler =
    Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync>;

/// A [`Handler`] from an async function of the request.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    Arc::new(move |r| Box::pin(f(r)))
}

/// Listen on a free loopback port on the current Tokio runtime; returns `http://127.0.0.1:port`.
pub async fn start(handler: Handler) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let h = handler.clone();
            tokio::spawn(async move {
                let _ = connection(sock, h).await;
            });
        }
    });
    base
}

async fn connection(mut sock: TcpStream, h: Handler) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 << 10 {
            return Ok(());
        }
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("/").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let reply = h(Request {
        method,
        path,
        headers,
        body,
    })
    .await;
    let mut out = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    for (n, v) in &reply.headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    match reply.body {
        Body::Bytes(b) => {
            out.push_str(&format!("content-length: {}\r\n\r\n", b.len()));
            sock.write_all(out.as_bytes()).await?;
            sock.write_all(&b).await?;
        }
        Body::Drip { bytes, every } => {
            out.push_str(&format!("content-length: {}\r\n\r\n", bytes.len()));
            sock.write_all(out.as_bytes()).await?;
            for b in bytes {
                sock.write_all(&[b]).await?;
                sock.flush().await?;
                tokio::time::sleep(every).await;
            }
        }
        Body::HalfThenStall(b) => {
            out.push_str(&format!("content-length: {}\r\n\r\n", b.len()));
            sock.write_all(out.as_bytes()).await?;
            sock.write_all(&b[..b.len() / 2]).await?;
            sock.flush().await?;
            // Held open until the client gives up (or 10 minutes).
            let _ = tokio::time::timeout(Duration::from_secs(600), sock.read(&mut chunk)).await;
        }
        Body::Generated { head, unit, total } => {
            out.push_str("transfer-encoding: chunked\r\n\r\n");
            sock.write_all(out.as_bytes()).await?;
            let piece: Vec<u8> = unit.repeat((1 << 20) / unit.len().max(1) + 1);
            let mut sent = 0u64;
            let send = |data: &[u8]| {
                let mut c = format!("{:x}\r\n", data.len()).into_bytes();
                c.extend_from_slice(data);
                c.extend_from_slice(b"\r\n");
                c
            };
            sock.write_all(&send(&head)).await?;
            sent += head.len() as u64;
            while sent < total {
                let n = piece.len().min((total - sent) as usize);
                sock.write_all(&send(&piece[..n])).await?;
                sent += n as u64;
            }
            sock.write_all(b"0\r\n\r\n").await?;
        }
    }
    sock.flush().await?;
    Ok(())
}

/// The body [`forward`] gets, the real server asked for no content encoding: for a fake that
/// reads and rewrites the body (the server compresses JSON when the client accepts it).
pub async fn identity_body(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    req: &Request,
) -> Vec<u8> {
    let mut plain = req.clone();
    plain.headers.retain(|(n, _)| n != "accept-encoding");
    let Body::Bytes(bytes) = forward(http, base, path, &plain).await.body else {
        unreachable!("forward answers with bytes")
    };
    bytes
}

/// Forward a request to `base` (status, type, encoding, ETag and body as sent: no gzip is
/// decoded on the way).
pub async fn forward(http: &reqwest::Client, base: &str, path: &str, req: &Request) -> Reply {
    let mut r = http.request(
        reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET),
        format!("{base}{path}"),
    );
    for name in [
        "accept-encoding",
        "if-none-match",
        "content-type",
        "authorization",
    ] {
        if let Some(v) = req.header(name) {
            r = r.header(name, v);
        }
    }
    if !req.body.is_empty() {
        r = r.body(req.body.clone());
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => return Reply::bytes(502, "text/plain", e.to_string().into_bytes()),
    };
    let status = resp.status().as_u16();
    let mut headers = Vec::new();
    for name in [
        "content-type",
        "content-encoding",
        "etag",
        "cache-control",
        "content-security-policy",
        "x-content-type-options",
        "referrer-policy",
    ] {
        if let Some(v) = resp.headers().get(name).and_then(|v| v.to_str().ok()) {
            headers.push((name.to_string(), v.to_string()));
        }
    }
    let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    Reply {
        status,
        headers,
        body: Body::Bytes(body),
    }
}
