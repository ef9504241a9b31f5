//! The REST API, `/api/v1`. Handlers are small: extract, validate, call `shared`, respond.
//! One file per group of routes; `cache` and `error` below them.

mod blocks;
pub mod cache;
pub mod error;
mod items;
pub mod pir;
mod search;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use shared::api::ErrorCode;
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::state::AppState;
use error::plain_error;

pub use items::MAX_ADD;
pub use search::{GALLERY_MAP_MAX, OPENAPI};

/// The whole application. `web_dir`, if given, is served at `/`.
pub fn router(state: Arc<AppState>, web_dir: Option<PathBuf>) -> Router {
    let body_limit = state.config.limits.max_body_bytes;
    let api = Router::new()
        .merge(search::routes(Arc::clone(&state)))
        .merge(blocks::routes())
        .merge(pir::routes())
        .merge(items::routes())
        .fallback(|| async {
            plain_error(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                "no such endpoint",
            )
        });
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .nest("/api/v1", api)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TraceLayer::new_for_http())
        .with_state(state);
    if let Some(dir) = web_dir {
        app = app.fallback_service(ServeDir::new(dir));
    }
    app
}
