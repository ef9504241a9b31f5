//! `server front --shards URL,…`: one address for a gallery whose PIR databases are split by
//! rows over `S` shard processes (`server serve --shard-rows i/S`; `pir::shard`).
//!
//! Every PIR answer request (`POST /api/v1/pir/{version}/{db}`) goes to all `S` shards, with
//! the client's body as it came; each answers its part (its rows of an LWE answer, or its rows
//! and switch steps of the encrypted scores' packing, before the one division by `P`), and the
//! front combines them into exactly the answer one process holding the whole databases gives
//! (`pir::shard::combine_rows`, `pir::scores::combine_parts`) and sends that. Every other request
//! (the public documents, hints, blocks, status, the page) goes to `--public`: a whole replica
//! of the same version (`server serve`, or `--from` the same store), whose public files are the
//! bytes every process of that version derives. A shard holds only its rows: no hint, no public
//! file, no route but the answers and `/status` (`http::router`), so its memory is its slice of
//! the databases plus the process's fixed part. The client sees the one-process protocol: the
//! same requests and answers of the same sizes.
//!
//! **What a front sees** is what one process sees: the client's requests, and the shards'
//! parts, functions of those requests and of the public databases; it adds nothing to what the
//! server learns. **Failures**: a shard that does not answer, or answers what does not combine
//! (a missing or misconfigured shard), is a 502 `unavailable` JSON error, never a wrong or
//! partial answer; a shard's own refusal (a malformed query: 4xx, busy: 503) is passed on as
//! it is. The front keeps no state a client's next request depends on, so fronts replicate
//! behind a load balancer like replicas do.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use lattice::rlwe::Ring;
use pir::scores::{combine_parts as combine_scores, encode_answer, ScorePart};
use pir::shard::{combine_rows, RowsPart};

use crate::http::error::ApiError;
use crate::http::pir::{answer_response, MAX_BODY};
use crate::partition::pir::PIR_PREFIX;

/// Shards a front combines at most.
pub const MAX_SHARDS: usize = 64;
/// Bytes of one shard's reply read at most (a public file, or a part): beyond this it is not
/// a reply the front can use.
const MAX_REPLY: usize = 1 << 30;
/// Headers of a shard's reply not passed on (hop by hop, or recomputed here).
const HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::UPGRADE,
];

/// The shards, the whole replica, and what combining needs.
pub struct Front {
    shards: Vec<String>,
    /// The whole replica every request but an answer goes to.
    public: String,
    http: reqwest::Client,
    /// The scores' ring, made on first use.
    ring: OnceLock<Ring>,
}

impl Front {
    /// A front over `shards` (base URLs, `http://host:port`, in any order: every part says
    /// which rows it holds) and `public`, a whole replica of the same version. Refused unless
    /// there are 1 to [`MAX_SHARDS`] shards, each URL an `http(s)` URL with a host.
    pub fn new(
        shards: Vec<String>,
        public: String,
        timeout: std::time::Duration,
    ) -> Result<Front, String> {
        if shards.is_empty() || shards.len() > MAX_SHARDS {
            return Err(format!(
                "--shards: 1 to {MAX_SHARDS} URLs, got {}",
                shards.len()
            ));
        }
        let base = |flag: &str, s: String| {
            let url = reqwest::Url::parse(&s).map_err(|e| format!("{flag} {s}: {e}"))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(format!("{flag} {s}: an http(s) URL with a host"));
            }
            Ok(s.trim_end_matches('/').to_string())
        };
        let bases = shards
            .into_iter()
            .map(|s| base("--shards", s))
            .collect::<Result<Vec<_>, String>>()?;
        let public = base("--public", public)?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Front {
            shards: bases,
            public,
            http,
            ring: OnceLock::new(),
        })
    }

    fn ring(&self) -> &Ring {
        self.ring.get_or_init(|| Ring::new(lattice::N))
    }
}

/// The front's routes: everything, forwarded.
pub fn router(front: Arc<Front>) -> Router {
    Router::new().fallback(forward).with_state(front)
}

/// One request, as it came: forwarded to every shard (a PIR answer) or to the whole replica.
async fn forward(
    State(f): State<Arc<Front>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::TooLarge(format!(
                "the body could not be read within {MAX_BODY} bytes: {e}"
            ))
            .into_response()
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let headers = forwarded_headers(&parts.headers, peer);
    let answer = parts.method == Method::POST
        && parts
            .uri
            .path()
            .strip_prefix(PIR_PREFIX)
            .is_some_and(|r| r.starts_with('/'));
    let r = if answer {
        fan_out(&f, &path, headers, body).await
    } else {
        to_public(&f, parts.method, &path, headers, body).await
    };
    r.unwrap_or_else(IntoResponse::into_response)
}

/// The request's headers for a shard: without hop-by-hop ones and `Host`, with the client's
/// address appended to `X-Forwarded-For` (shards run with `--client-address-header
/// X-Forwarded-For` key their per-client limits on it).
fn forwarded_headers(h: &HeaderMap, peer: SocketAddr) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (k, v) in h {
        if !HOP.contains(k) && k != header::HOST {
            out.append(k.clone(), v.clone());
        }
    }
    let xff = HeaderName::from_static("x-forwarded-for");
    let chain = match h.get(&xff).and_then(|v| v.to_str().ok()) {
        Some(before) => format!("{before}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&chain) {
        out.insert(xff, v);
    }
    out
}

/// A shard's reply, read whole (bounded).
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

async fn send(
    f: &Front,
    shard: &str,
    method: Method,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Reply, String> {
    let mut r = f
        .http
        .request(method, format!("{shard}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{shard} did not answer: {}", innermost(&e)))?;
    let (status, headers) = (r.status(), r.headers().clone());
    let mut body = Vec::new();
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|e| format!("{shard}: the reply broke off: {}", innermost(&e)))?
    {
        if body.len() + chunk.len() > MAX_REPLY {
            return Err(format!("{shard}: a reply above {MAX_REPLY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Reply {
        status,
        headers,
        body: Bytes::from(body),
    })
}

fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(s) = cur.source() {
        cur = s;
    }
    cur.to_string()
}

/// A shard's reply as the front's response.
fn pass_on(r: Reply) -> Response {
    let mut resp = Response::new(Body::from(r.body));
    *resp.status_mut() = r.status;
    for (k, v) in &r.headers {
        if !HOP.contains(k) {
            resp.headers_mut().append(k.clone(), v.clone());
        }
    }
    resp
}

/// A request that is not an answer: the whole replica's reply, passed on; a 502 when it does
/// not answer.
async fn to_public(
    f: &Front,
    method: Method,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    send(f, &f.public, method, path, headers, body)
        .await
        .map(pass_on)
        .map_err(|e| ApiError::BadGateway(format!("the whole replica did not answer: {e}")))
}

/// A PIR answer: every shard's part, combined.
async fn fan_out(
    f: &Arc<Front>,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let replies = futures::future::join_all(
        f.shards
            .iter()
            .map(|s| send(f, s, Method::POST, path, headers.clone(), body.clone())),
    )
    .await;
    // A shard that did not answer first: whatever the others said, no answer can be whole.
    let replies = replies
        .into_iter()
        .collect::<Result<Vec<Reply>, String>>()
        .map_err(|e| {
            ApiError::BadGateway(format!("a row shard of this gallery did not answer: {e}"))
        })?;
    let mut bodies = Vec::with_capacity(replies.len());
    for r in replies {
        if !r.status.is_success() {
            // The query's own refusal (every shard refuses it alike), or a shard's busy or
            // unavailable answer: passed on as it is.
            return Ok(pass_on(r));
        }
        bodies.push(r.body);
    }
    let combined = tokio::task::spawn_blocking({
        let f = Arc::clone(f);
        move || combine_parts(f.ring(), &bodies)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(|e| ApiError::BadGateway(format!("the row shards' parts do not combine: {e}")))?;
    Ok(answer_response(combined))
}

/// The answer on the wire from every shard's part: all LWE rows parts or all score parts.
fn combine_parts(ring: &Ring, bodies: &[Bytes]) -> Result<Vec<u8>, pir::Error> {
    if bodies.iter().all(|b| b.starts_with(b"PMs1")) {
        let parts = bodies
            .iter()
            .map(|b| ScorePart::decode(ring.n(), b))
            .collect::<Result<Vec<_>, _>>()?;
        let (_, answer) = combine_scores(ring, &parts)?;
        return Ok(encode_answer(&answer));
    }
    let parts = bodies
        .iter()
        .map(|b| RowsPart::decode(b))
        .collect::<Result<Vec<_>, _>>()?;
    let (shape, values) = combine_rows(&parts)?;
    Ok(shape.encode_answer(&values))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shards and the whole replica are http(s) URLs with a host; 1 to `MAX_SHARDS` shards.
    #[test]
    fn a_front_needs_shards_and_a_whole_replica_it_can_reach() {
        let t = std::time::Duration::from_secs(1);
        let ok = |s: &str| s.to_string();
        let f = Front::new(
            vec![ok("http://a:1/"), ok("http://b:2")],
            ok("http://c:3/"),
            t,
        )
        .unwrap();
        assert_eq!(f.shards, ["http://a:1", "http://b:2"]);
        assert_eq!(f.public, "http://c:3");
        for public in ["", "ftp://c", "c:3", "http://"] {
            assert!(
                Front::new(vec![ok("http://a:1")], ok(public), t).is_err(),
                "{public:?}"
            );
        }
        assert!(Front::new(vec![], ok("http://c"), t).is_err());
        assert!(Front::new(vec![ok("file:///x")], ok("http://c"), t).is_err());
        let many = vec![ok("http://a"); MAX_SHARDS + 1];
        assert!(Front::new(many, ok("http://c"), t).is_err());
    }
}
