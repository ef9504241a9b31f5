//! The REST API, `/api/v1`. Handlers are small: extract, validate, call `shared`, respond.
//! One file per group of routes; `cache` and `error` below them.

mod blocks;
pub mod cache;
pub mod cors;
pub mod error;
pub mod guard;
mod items;
pub mod pir;
mod search;
mod statics;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::routing::get;
use axum::Router;
use shared::api::ErrorCode;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::state::AppState;
use error::plain_error;

pub use items::MAX_ADD;
pub use search::{GALLERY_MAP_MAX, OPENAPI};

/// The Content-Security-Policy of every answer: the page may load scripts, styles, images and
/// data only from this origin (plus `data:` images, the sample photos, and `blob:`), compile
/// its WebAssembly, and connect only to this origin and the blocks' public origin if blocks
/// are served from elsewhere (`--blocks-public-url`). The page's promise — no request that
/// depends on the photo goes anywhere but the search server — is then the browser's to
/// enforce, even against a script injected into it; no framing, no forms, no `<base>`.
pub fn content_security_policy(blocks_public_url: Option<&str>) -> String {
    let extra = blocks_public_url
        .and_then(origin_of)
        .map(|o| format!(" {o}"))
        .unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'{extra}; \
         img-src 'self' data: blob:; style-src 'self'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    )
}

/// `scheme://host[:port]` of an absolute http(s) URL made only of URL-safe characters.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split('/').next()?;
    let safe = |c: char| c.is_ascii_alphanumeric() || "-._:[]".contains(c);
    (matches!(scheme, "http" | "https") && !host.is_empty() && host.chars().all(safe))
        .then(|| format!("{scheme}://{host}"))
}

/// The whole application. `web_dir`, if given, is served at `/`; every answer carries the
/// security headers ([`content_security_policy`], `nosniff`, no referrer); the API answers
/// CORS to `page_origins` only ([`cors`]).
pub fn router(
    state: Arc<AppState>,
    web_dir: Option<PathBuf>,
    blocks_public_url: Option<&str>,
    page_origins: &[String],
    limits: &crate::net::NetLimits,
) -> Router {
    let guard_state = guard::Guard {
        body_timeout: limits.body_timeout,
        request_timeout: limits.request_timeout,
        refusals: Arc::clone(&state.refusals),
        min_rate: limits.min_rate,
        rate_grace: limits.rate_grace,
        body_budget: guard::BodyBudget::new(limits.body_budget),
        client_address_header: state.client_address_header.clone(),
        pace: Default::default(),
    };
    let body_limit = state.config.limits.max_body_bytes;
    let shard = state.partitions.settings.shard_rows.is_some();
    let (api, missing) = if shard {
        // A row shard answers its parts and says how it is (`/status`: what it holds, its
        // work); nothing else — it holds no public file, and the front sends those requests
        // to a whole replica.
        (
            Router::new()
                .route("/status", get(search::status))
                .merge(pir::shard_routes()),
            "a row shard answers only PIR answer requests and /status; ask its front",
        )
    } else {
        (
            Router::new()
                .merge(search::routes(Arc::clone(&state)))
                .merge(blocks::routes())
                .merge(pir::routes())
                .merge(items::routes()),
            "no such endpoint",
        )
    };
    let api = api
        .fallback(move || async move {
            plain_error(StatusCode::NOT_FOUND, ErrorCode::NotFound, missing)
        })
        // The framework's own 405 in the API's JSON format, like every other error.
        .method_not_allowed_fallback(|| async {
            plain_error(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorCode::InvalidInput,
                "this endpoint does not take that method",
            )
        });
    // CORS answers (preflights too) for the listed page origins, on the API alone.
    let api = match cors::layer(page_origins) {
        Some(layer) => {
            let listed = Arc::new(page_origins.to_vec());
            api.layer(layer)
                .layer(axum::middleware::from_fn(move |req, next| {
                    cors::timing_allow_origin(Arc::clone(&listed), req, next)
                }))
        }
        None => api,
    };
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .nest("/api/v1", api)
        .layer(DefaultBodyLimit::max(body_limit))
        // Failures are counted and logged where they arise (`ApiError`, `ops::refusals`), not
        // once more per response: an attack must not turn into a log flood.
        .layer(TraceLayer::new_for_http().on_failure(()))
        .with_state(state);
    if let Some(dir) = web_dir.filter(|_| !shard) {
        app = app.fallback_service(statics::web(dir));
    }
    let app = app.layer(statics::compression());
    let csp = HeaderValue::from_str(&content_security_policy(blocks_public_url))
        .expect("the policy is ASCII");
    app.layer(SetResponseHeaderLayer::overriding(
        header::CONTENT_SECURITY_POLICY,
        csp,
    ))
    .layer(SetResponseHeaderLayer::overriding(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    ))
    .layer(SetResponseHeaderLayer::overriding(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    ))
    .layer(axum::middleware::from_fn_with_state(
        guard_state,
        guard::guard,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_only_this_origin_and_a_valid_blocks_origin() {
        let own = content_security_policy(None);
        assert!(own.contains("connect-src 'self';"), "{own}");
        assert!(own.contains("frame-ancestors 'none'"));
        let cdn = content_security_policy(Some("https://cdn.example.com:8443/bucket/blocks"));
        assert!(
            cdn.contains("connect-src 'self' https://cdn.example.com:8443;"),
            "{cdn}"
        );
        // Anything that is not a plain http(s) origin adds nothing.
        for bad in [
            "ftp://x",
            "https://a b",
            "https://x;script-src *",
            "/relative",
            "https://",
        ] {
            assert!(
                content_security_policy(Some(bad)).contains("connect-src 'self';"),
                "{bad}"
            );
        }
    }
}
