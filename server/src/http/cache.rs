//! Cacheable answers of immutable or versioned bodies: ETags, `If-None-Match`, gzip when
//! the client takes it.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

/// Block files never change under a URL (the version is a content hash): cache forever.
pub(crate) const IMMUTABLE: HeaderValue =
    HeaderValue::from_static("public, max-age=31536000, immutable");
/// The document does change (new version after a gallery change): revalidate every time.
pub(crate) const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");

/// Whether `Accept-Encoding` allows gzip (`gzip`/`x-gzip`, else `*`, with q > 0).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let (mut gzip, mut star) = (None, None);
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for part in value.split(',') {
            let mut it = part.split(';');
            let coding = it.next().unwrap_or("").trim();
            let q = it
                .find_map(|p| {
                    let p = p.trim();
                    p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="))
                })
                .map_or(1.0, |q| q.trim().parse::<f32>().unwrap_or(0.0));
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip = Some(q > 0.0);
            } else if coding == "*" {
                star = Some(q > 0.0);
            }
        }
    }
    gzip.or(star).unwrap_or(false)
}

/// Whether `If-None-Match` names `etag` (weak comparison, as RFC 9110 asks) or is `*`.
/// Anything unparsable simply does not match.
fn etag_matches(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.strip_prefix("W/").unwrap_or(t).as_bytes() == etag.as_bytes()
            })
        })
    })
}

/// How a cacheable body is answered: 304 without a body when the client has it, else the gzip
/// bytes if the client takes them, else the plain ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    NotModified,
    Gzip,
    Plain,
}

impl Reply {
    pub(crate) fn to(headers: &HeaderMap, etag: &HeaderValue) -> Self {
        if etag_matches(headers, etag) {
            Reply::NotModified
        } else if accepts_gzip(headers) {
            Reply::Gzip
        } else {
            Reply::Plain
        }
    }
}

/// A cacheable response of kind `reply` (`body`: the bytes that kind sends, empty for 304).
pub(crate) fn cacheable(
    reply: Reply,
    etag: HeaderValue,
    cache: HeaderValue,
    content_type: HeaderValue,
    body: Bytes,
) -> Response {
    let mut resp = match reply {
        Reply::NotModified => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        }
        Reply::Gzip => {
            let mut r = Response::new(Body::from(body));
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            r.headers_mut().insert(header::CONTENT_TYPE, content_type);
            r
        }
        Reply::Plain => {
            let mut r = Response::new(Body::from(body));
            r.headers_mut().insert(header::CONTENT_TYPE, content_type);
            r
        }
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, cache);
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    // Range requests are answered with the whole file (200); say so up front.
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("none"));
    resp
}

/// A body held in memory, sent cacheable: 304 when the client has it, the gzip form when
/// there is one and the client takes it, else the plain bytes.
pub(crate) fn send_held(
    headers: &HeaderMap,
    etag: HeaderValue,
    cache: HeaderValue,
    content_type: &'static str,
    plain: &Bytes,
    gzip: Option<&Bytes>,
) -> Response {
    let (reply, body) = match (Reply::to(headers, &etag), gzip) {
        (Reply::NotModified, _) => (Reply::NotModified, Bytes::new()),
        (Reply::Gzip, Some(gz)) => (Reply::Gzip, gz.clone()),
        _ => (Reply::Plain, plain.clone()),
    };
    cacheable(
        reply,
        etag,
        cache,
        HeaderValue::from_static(content_type),
        body,
    )
}

/// A public JSON document (the same for everyone, e.g. the anchors or the gallery map) with a
/// strong ETag over its bytes and `no-cache`: a browser revalidates it on every load and gets
/// a 304 without a body while it has not changed. Compression is the router's
/// ([`super::statics::compression`]), on the fly.
pub(crate) fn json_revalidated<T: serde::Serialize>(headers: &HeaderMap, value: &T) -> Response {
    let body = match serde_json::to_vec(value) {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            return super::error::plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                shared::api::ErrorCode::Internal,
                &format!("the document could not be written: {e}"),
            )
        }
    };
    let etag = content_etag(&body);
    let reply = if etag_matches(headers, &etag) {
        Reply::NotModified
    } else {
        Reply::Plain
    };
    let body = if reply == Reply::NotModified {
        Bytes::new()
    } else {
        body
    };
    cacheable(
        reply,
        etag,
        NO_CACHE,
        HeaderValue::from_static("application/json"),
        body,
    )
}

/// A strong ETag naming these bytes: the first 16 bytes of their SHA-256, quoted.
pub(crate) fn content_etag(bytes: &[u8]) -> HeaderValue {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    HeaderValue::from_str(&format!("\"{}\"", hex::encode(&digest[..16])))
        .expect("hex is a valid header value")
}

/// Whether this request's `If-None-Match` names `etag` (for [`super::statics`]).
pub(crate) fn if_none_match(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    etag_matches(headers, etag)
}
