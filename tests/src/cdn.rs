//! A stand-in for a CDN in front of a bucket, for the object-storage test: forwards `GET`s to
//! the origin (an S3-compatible server) and adds the CORS header a real CDN or bucket would be
//! configured with, so a page on the gallery server's origin may read the blocks. Counts what
//! it forwarded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

pub struct Cdn {
    pub base: String,
    pub hits: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Origin {
    base: String,
    http: reqwest::Client,
    hits: Arc<AtomicUsize>,
}

async fn forward(State(o): State<Origin>, Path(path): Path<String>) -> Response {
    o.hits.fetch_add(1, Ordering::SeqCst);
    let r = match o.http.get(format!("{}/{path}", o.base)).send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let body = r.bytes().await.unwrap_or_default();
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    resp
}

/// Start the proxy on a free port, on the current Tokio runtime.
pub async fn start(origin: &str) -> Cdn {
    let hits = Arc::new(AtomicUsize::new(0));
    let state = Origin {
        base: origin.trim_end_matches('/').to_string(),
        http: reqwest::Client::new(),
        hits: Arc::clone(&hits),
    };
    let app = axum::Router::new()
        .route("/{*path}", get(forward))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Cdn { base, hits }
}
