//! The page's static files (`--web-dir`) and the compression of answers.
//!
//! Every static file is answered with a strong ETag over its bytes (a SHA-256 prefix, kept per
//! path, modification time and length, so a file is hashed once) and `Cache-Control:
//! no-cache`: a browser revalidates each file on every load and gets a 304 without a body
//! while the file has not changed, and a rebuilt page or wasm is fetched at once (the names
//! are not content-hashed, so nothing here may be cached without revalidation).
//!
//! Compression ([`compression`]): gzip or brotli, as the client asks, on the fly, for every
//! answer but those already encoded (the block files and the PIR ranking table carry their own
//! gzip form: `cache::send_held`, never compressed twice), binary ones (`application/
//! octet-stream`: the PIR queries' answers, hints and records look uniformly random and every
//! PIR answer keeps its published size on the wire; the model's f32 weights gain 7 %) and
//! images.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use tower_http::compression::predicate::{DefaultPredicate, NotForContentType, Predicate};
use tower_http::compression::CompressionLayer;
use tower_http::services::ServeDir;

use super::cache::{content_etag, if_none_match, NO_CACHE};

/// The largest static file hashed for its ETag (larger ones are sent without one).
const MAX_HASHED: usize = 64 << 20;

/// gzip and brotli (quality 4, tower-http's default for on-the-fly brotli) for answers that
/// gain from it; see the module documentation for what is left alone.
pub fn compression() -> CompressionLayer<impl Predicate> {
    CompressionLayer::new().gzip(true).br(true).compress_when(
        DefaultPredicate::new().and(NotForContentType::const_new("application/octet-stream")),
    )
}

/// The static files of `dir`, with ETags and revalidation.
pub fn web(dir: PathBuf) -> Router {
    let etags: Arc<Etags> = Arc::default();
    Router::new()
        .fallback_service(ServeDir::new(dir))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            revalidate(Arc::clone(&etags), req, next)
        }))
}

/// ETags by (path, Last-Modified, Content-Length).
type Etags = Mutex<HashMap<(String, HeaderValue, HeaderValue), HeaderValue>>;

async fn revalidate(etags: Arc<Etags>, mut req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    let asked = req.headers().clone();
    // If-None-Match decides (RFC 9110 §13.1.3): the file's date has a one-second grain.
    if asked.contains_key(header::IF_NONE_MATCH) {
        req.headers_mut().remove(header::IF_MODIFIED_SINCE);
    }
    // A range of a file is answered whole (200), so the ETag always names the whole file.
    req.headers_mut().remove(header::RANGE);
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (Some(modified), Some(length)) = (
        resp.headers().get(header::LAST_MODIFIED).cloned(),
        resp.headers().get(header::CONTENT_LENGTH).cloned(),
    ) else {
        return resp;
    };
    // A file too large to hash here is sent as it is, without an ETag.
    if length
        .to_str()
        .ok()
        .and_then(|l| l.parse::<usize>().ok())
        .is_none_or(|l| l > MAX_HASHED)
    {
        return resp;
    }
    let key = (path, modified, length);
    let known = etags.lock().ok().and_then(|m| m.get(&key).cloned());
    let (mut resp, etag) = match known {
        Some(etag) => (resp, etag),
        None => {
            let (parts, body) = resp.into_parts();
            let Ok(bytes) = to_bytes(body, MAX_HASHED).await else {
                return super::error::plain_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    shared::api::ErrorCode::Internal,
                    "the file could not be read",
                );
            };
            let etag = content_etag(&bytes);
            if let Ok(mut m) = etags.lock() {
                m.insert(key, etag.clone());
            }
            (Response::from_parts(parts, Body::from(bytes)), etag)
        }
    };
    if if_none_match(&asked, &etag) {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r.headers_mut().insert(header::ETAG, etag);
        r.headers_mut().insert(header::CACHE_CONTROL, NO_CACHE);
        return r;
    }
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, NO_CACHE);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("none"));
    resp
}
