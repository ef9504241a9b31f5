//! Configuration, anchors, status, the gallery map, the OpenAPI description, and
//! `POST /search` (the frame and Algorithm 1).

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use paper::align::umeyama;
use paper::laplacian::dist2;
use paper::retrieve::{
    gallery_rows, posterior_ranking, proportional_ranking, LabelledRows, Neighbor,
};
use shared::api::{
    AnchorsResponse, ConfigResponse, GalleryMap, Match, Ranking, SearchRequest, SearchResponse,
};
use shared::DMatrix;

use super::error::ApiError;
use crate::net::admission::SlotRefusal;
use crate::net::client::ClientKey;
use crate::ops::refusals::Refusal;
use crate::state::{AppState, ServerStatus};

type Shared = State<Arc<AppState>>;

/// The OpenAPI 3.1 description of this API (a test validates real responses against it).
pub const OPENAPI: &str = include_str!("openapi.json");

/// These routes; `POST /search` is timed for `/status`.
pub fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/config", get(config))
        .route("/identity", get(identity))
        .route("/anchors", get(anchors))
        .route(
            "/search",
            post(search).layer(axum::middleware::from_fn_with_state(state, time_search)),
        )
        .route("/status", get(status))
        .route("/gallery-map", get(gallery_map))
        .route("/openapi.json", get(openapi))
}

/// Records the server-side latency of every search (body parsing to response built).
async fn time_search(
    State(s): Shared,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let t = std::time::Instant::now();
    let resp = next.run(req).await;
    s.search_latency.record(t.elapsed());
    resp
}

/// Fixed while the server runs: revalidated by its ETag (304 on reload).
async fn config(State(s): Shared, headers: HeaderMap) -> Response {
    super::cache::json_revalidated::<ConfigResponse>(&headers, &s.config)
}

/// The gallery's key and its signature of the configuration (`state::identity`): fixed while
/// the server runs.
async fn identity(State(s): Shared, headers: HeaderMap) -> Response {
    super::cache::json_revalidated::<shared::identity::IdentityDoc>(&headers, &s.identity)
}

/// The anchors never change while the server runs: revalidated by their ETag (304 on reload).
async fn anchors(State(s): Shared, headers: HeaderMap) -> Response {
    super::cache::json_revalidated::<AnchorsResponse>(&headers, &s.anchors)
}

/// Most gallery items `GET /gallery-map` returns.
pub const GALLERY_MAP_MAX: usize = 2_000;

/// Changes only with the gallery: revalidated by its ETag (304 while unchanged).
async fn gallery_map(State(s): Shared, headers: HeaderMap) -> Response {
    super::cache::json_revalidated::<GalleryMap>(&headers, &s.gallery_map(GALLERY_MAP_MAX))
}

pub(super) async fn status(State(s): Shared) -> Json<ServerStatus> {
    Json(s.server_status())
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

/// Answer EVERY submitted row the same way, so the response does not depend on which row is
/// real: rows in the public anchor frame are looked up as they are; with anchor rows
/// (Algorithm 1) they are first aligned onto the server's embedding.
///
/// Cheap checks first (JSON, validation: 4xx at once); then an answer slot from the same
/// admission as PIR answers (`net::admission`: one client at most half the slots alone, one
/// while another client is active, 503 `busy` with `Retry-After` beyond its share or the
/// queue), and the answer is computed on
/// the blocking pool, off the threads that serve connections.
async fn search(
    State(s): Shared,
    client: Option<Extension<ClientKey>>,
    body: Result<Json<SearchRequest>, JsonRejection>,
) -> Result<Json<SearchResponse>, ApiError> {
    let Json(req) = body?;
    let c = &s.config;
    req.validate(c.anchor_count, c.smlq.embed_dim, c.frame_dim, &c.limits)
        .map_err(ApiError::Invalid)?;
    let client = client.map_or(ClientKey::UNKNOWN, |Extension(c)| c);
    let slot = s.admission.acquire(client).await.map_err(|r| busy(&s, r))?;
    let state = Arc::clone(&s);
    tokio::task::spawn_blocking(move || {
        let pool = state.answer_pools.for_slot(&slot);
        pool.install(|| answer(&state, req))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map(Json)
}

/// A refused search slot: counted, and a 503 saying when to retry.
fn busy(s: &AppState, r: SlotRefusal) -> ApiError {
    let (kind, message) = match r {
        SlotRefusal::ClientLimit => (
            Refusal::SearchClientLimit,
            "this client already has its share of searches running or waiting; retry when one is done",
        ),
        _ => (Refusal::SearchBusy, "too many searches waiting; retry later"),
    };
    s.refusals.record(kind);
    ApiError::Busy {
        message: message.into(),
        retry_after: r.retry_after_secs(),
    }
}

fn answer(s: &AppState, req: SearchRequest) -> Result<SearchResponse, ApiError> {
    let c = &s.config;
    let snap = s.snapshot();
    let (rows, index) = match &req.anchor_rows {
        None => (req.query_rows, &snap.frame.index),
        Some(anchor_rows) => {
            let k_dim = c.smlq.embed_dim;
            let to_matrix = |rows: &[Vec<f64>]| {
                DMatrix::from_row_iterator(rows.len(), k_dim, rows.iter().flatten().copied())
            };
            let transform = umeyama(&to_matrix(anchor_rows), &snap.anchor_rows)
                .map_err(|e| ApiError::Degenerate(e.to_string()))?;
            let aligned = transform
                .apply(&to_matrix(&req.query_rows))
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            (gallery_rows(&aligned), &snap.index)
        }
    };
    let classes = c.class_names.len();
    let results = rows
        .iter()
        .map(|q| {
            let found: Vec<Neighbor> = match req.noise_std {
                // Frame rows with their noise std: rank by the class posterior.
                Some(sigma) => {
                    let gallery = LabelledRows {
                        flat: &snap.frame.flat,
                        labels: &snap.frame.labels,
                        num_classes: classes,
                    };
                    match req.ranking.unwrap_or_default() {
                        Ranking::Posterior => posterior_ranking(&gallery, q, sigma, req.k, None),
                        Ranking::Proportional => {
                            proportional_ranking(&gallery, q, sigma, req.k, req.k, None)
                        }
                    }
                    .into_iter()
                    .map(|i| Neighbor {
                        index: i,
                        distance: dist2(snap.frame.row(i), q).sqrt(),
                    })
                    .collect()
                }
                None => index.knn(q, req.k),
            };
            found
                .into_iter()
                .map(|n| {
                    let item = &snap.items[n.index];
                    Match {
                        id: item.id,
                        label: item.label,
                        distance: n.distance,
                        thumbnail_png_base64: item.thumbnail_b64().to_string(),
                    }
                })
                .collect()
        })
        .collect();
    Ok(SearchResponse {
        results,
        rows_in_frame: rows,
    })
}
