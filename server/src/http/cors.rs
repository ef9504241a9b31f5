//! Cross-origin access to the API for the page's release bundle served elsewhere: a static
//! host, or `privatemail page` on the person's own machine, so that the page's code need not
//! come from this server (docs/page.md).
//!
//! Only the page origins the operator lists (`--page-origin`) get CORS answers, and only under
//! `/api/v1`: never credentials (no cookies, no `Authorization` header, so the operator's
//! endpoints stay out of reach of a page), a preflight answered for `GET`, `HEAD` and `POST`
//! with `Content-Type`, and `Timing-Allow-Origin` so such a page can tell what came from the
//! browser's cache. Another origin gets no CORS headers: its browser lets it read nothing.

use axum::http::{header, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// How long a browser may keep a preflight's answer, in seconds.
const PREFLIGHT_MAX_AGE_SECS: u64 = 600;

/// At most this many page origins.
pub const MAX_PAGE_ORIGINS: usize = 64;

/// A page origin as the operator writes it: `http(s)://host[:port]`, exactly as a browser
/// sends it in `Origin` (lower-case, no path, no trailing slash, no wildcard).
pub fn page_origin(s: &str) -> Result<String, String> {
    let (scheme, host) = s
        .split_once("://")
        .ok_or_else(|| format!("{s:?} is not an origin (http(s)://host[:port])"))?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.:[]".contains(c));
    if !matches!(scheme, "http" | "https") || !host_ok {
        return Err(format!(
            "{s:?} is not an origin: http(s)://host[:port] in lower case, no path or wildcard"
        ));
    }
    Ok(s.to_string())
}

/// The CORS layer for the API, or `None` when no page origin is listed (then no answer
/// carries CORS headers).
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let list: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(list))
            .allow_methods([Method::GET, Method::HEAD, Method::POST])
            .allow_headers([header::CONTENT_TYPE])
            .expose_headers([header::ETAG])
            .allow_credentials(false)
            .max_age(std::time::Duration::from_secs(PREFLIGHT_MAX_AGE_SECS)),
    )
}

/// `Timing-Allow-Origin` for a listed page origin (Resource Timing then reports sizes).
pub async fn timing_allow_origin(
    origins: std::sync::Arc<Vec<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| origins.iter().any(|l| l == o))
        .and_then(|o| HeaderValue::from_str(o).ok());
    let mut resp = next.run(req).await;
    if let Some(o) = origin {
        resp.headers_mut()
            .insert(header::HeaderName::from_static("timing-allow-origin"), o);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_origins_are_accepted() {
        for ok in [
            "http://127.0.0.1:8765",
            "https://pages.example.com",
            "http://[::1]:9",
        ] {
            assert_eq!(page_origin(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "*",
            "null",
            "https://pages.example.com/",
            "https://pages.example.com/app",
            "ftp://x",
            "https://Pages.example.com",
            "https://a b",
            "https://",
        ] {
            assert!(page_origin(bad).is_err(), "{bad}");
        }
    }
}
