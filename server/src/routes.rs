//! The REST API, `/api/v1`. Handlers are small: extract, validate, call `shared`, respond.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use shared::align::umeyama;
use shared::api::{
    AnchorsResponse, ConfigResponse, ErrorCode, ErrorResponse, Match, SearchRequest, SearchResponse,
};
use shared::retrieve::knn_rows;
use shared::DMatrix;
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::error::{plain_error, ApiError};
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// The whole application. `web_dir`, if given, is served at `/`.
pub fn router(state: Arc<AppState>, web_dir: Option<PathBuf>) -> Router {
    let body_limit = state.config.limits.max_body_bytes;
    let api = Router::new()
        .route("/config", get(config))
        .route("/anchors", get(anchors))
        .route("/search", post(search))
        .route("/gallery/{id}", get(gallery_item))
        .route("/gallery/{id}/image.png", get(gallery_image))
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

async fn config(State(s): Shared) -> Json<ConfigResponse> {
    Json(s.config.clone())
}

async fn anchors(State(s): Shared) -> Json<AnchorsResponse> {
    Json(s.anchors.clone())
}

/// Align the client's anchor rows onto ours, then answer EVERY submitted row the same way, so
/// the response does not depend on which row is real.
async fn search(
    State(s): Shared,
    body: Result<Json<SearchRequest>, JsonRejection>,
) -> Result<Json<SearchResponse>, ApiError> {
    let Json(req) = body?;
    let k_dim = s.config.smlq.embed_dim;
    req.validate(s.config.anchor_count, k_dim, &s.config.limits)
        .map_err(ApiError::Invalid)?;
    let to_matrix = |rows: &[Vec<f64>]| {
        DMatrix::from_row_iterator(rows.len(), k_dim, rows.iter().flatten().copied())
    };
    let transform = umeyama(&to_matrix(&req.anchor_rows), &s.snapshot.anchor_rows)
        .map_err(|e| ApiError::Degenerate(e.to_string()))?;
    let aligned = transform
        .apply(&to_matrix(&req.query_rows))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let results = aligned
        .row_iter()
        .map(|row| {
            let q: Vec<f64> = row.iter().copied().collect();
            knn_rows(&s.snapshot.gallery_rows, &q, req.k, None)
                .into_iter()
                .map(|n| {
                    let item = &s.items[n.index];
                    Match {
                        id: item.id,
                        label: item.label,
                        distance: n.distance,
                        thumbnail_png_base64: item.thumbnail_b64.clone(),
                    }
                })
                .collect()
        })
        .collect();
    Ok(Json(SearchResponse { results }))
}

#[derive(Serialize)]
struct ItemMeta {
    id: u64,
    label: u32,
    class_name: String,
}

fn lookup(s: &AppState, id: Result<Path<u64>, PathRejection>) -> Result<usize, ApiError> {
    let Path(id) = id.map_err(|e| {
        ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
    })?;
    s.by_id.get(&id).copied().ok_or(ApiError::NotFound(id))
}

async fn gallery_item(
    State(s): Shared,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Json<ItemMeta>, ApiError> {
    let item = &s.items[lookup(&s, id)?];
    Ok(Json(ItemMeta {
        id: item.id,
        label: item.label,
        class_name: s.config.class_names[item.label as usize].clone(),
    }))
}

async fn gallery_image(
    State(s): Shared,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Response, ApiError> {
    let item = &s.items[lookup(&s, id)?];
    Ok(([(header::CONTENT_TYPE, "image/png")], item.png.clone()).into_response())
}
