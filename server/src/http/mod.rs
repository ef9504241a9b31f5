//! The REST API, `/api/v1`. Handlers are small: extract, validate, call `shared`, respond.

pub mod error;
pub mod pir;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::api::{
    AddItemsRequest, AnchorsResponse, ChangeResponse, ConfigResponse, ErrorCode, ErrorResponse,
    GalleryMap, ItemMeta, Match, Ranking, SearchRequest, SearchResponse,
};
use shared::embed::laplacian::dist2;
use shared::protocol::align::umeyama;
use shared::protocol::retrieve::{
    gallery_rows, posterior_ranking, proportional_ranking, LabelledRows, Neighbor,
};
use shared::DMatrix;
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::gallery::store::StoredItem;
use crate::http::error::{plain_error, ApiError};
use crate::item::{GalleryItem, SIDE};
use crate::partition::{BlockError, VersionError};
use crate::state::{AppState, ServerStatus};

type Shared = State<Arc<AppState>>;

/// The OpenAPI 3.1 description of this API (a test validates real responses against it).
pub const OPENAPI: &str = include_str!("openapi.json");

/// Most images one `POST /api/v1/gallery` may add.
pub const MAX_ADD: usize = 1_000;

/// The whole application. `web_dir`, if given, is served at `/`.
pub fn router(state: Arc<AppState>, web_dir: Option<PathBuf>) -> Router {
    let body_limit = state.config.limits.max_body_bytes;
    let api = Router::new()
        .route("/config", get(config))
        .route("/anchors", get(anchors))
        .route(
            "/search",
            post(search).layer(axum::middleware::from_fn_with_state(
                Arc::clone(&state),
                time_search,
            )),
        )
        .route("/status", get(status))
        .route("/partition", get(partition))
        .route("/blocks/{version}/{level}/{block}", get(block))
        .merge(crate::http::pir::routes())
        .route("/gallery-map", get(gallery_map))
        .route("/openapi.json", get(openapi))
        .route("/gallery", post(add_items))
        .route("/gallery/{id}", get(gallery_item).delete(delete_item))
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

async fn config(State(s): Shared) -> Json<ConfigResponse> {
    Json(s.config.clone())
}

async fn anchors(State(s): Shared) -> Json<AnchorsResponse> {
    Json(s.anchors.clone())
}

/// Most gallery items `GET /gallery-map` returns.
pub const GALLERY_MAP_MAX: usize = 2_000;

async fn gallery_map(State(s): Shared) -> Json<GalleryMap> {
    Json(s.gallery_map(GALLERY_MAP_MAX))
}

async fn status(State(s): Shared) -> Json<ServerStatus> {
    Json(s.server_status())
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

/// Answer EVERY submitted row the same way, so the response does not depend on which row is
/// real: rows in the public anchor frame are looked up as they are; with anchor rows
/// (Algorithm 1) they are first aligned onto the server's embedding.
async fn search(
    State(s): Shared,
    body: Result<Json<SearchRequest>, JsonRejection>,
) -> Result<Json<SearchResponse>, ApiError> {
    let Json(req) = body?;
    let c = &s.config;
    req.validate(c.anchor_count, c.smlq.embed_dim, c.frame_dim, &c.limits)
        .map_err(ApiError::Invalid)?;
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
    Ok(Json(SearchResponse {
        results,
        rows_in_frame: rows,
    }))
}

fn path_id(id: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    id.map(|Path(id)| id).map_err(|e| {
        ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
    })
}

fn lookup(s: &AppState, id: u64) -> Result<Arc<GalleryItem>, ApiError> {
    s.catalogue
        .read()
        .unwrap()
        .get(&id)
        .cloned()
        .ok_or(ApiError::NotFound(id))
}

async fn gallery_item(
    State(s): Shared,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Json<ItemMeta>, ApiError> {
    let item = lookup(&s, path_id(id)?)?;
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
    let item = lookup(&s, path_id(id)?)?;
    Ok(([(header::CONTENT_TYPE, "image/png")], item.png().to_vec()).into_response())
}

/// Mutations need `Authorization: Bearer <token>`; with no token configured they are off.
fn authorize(s: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &s.admin_token else {
        return Err(ApiError::Forbidden(
            "gallery changes are disabled (no admin token configured)".into(),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compare in constant time with respect to the token's content.
    let ok = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

async fn add_items(
    State(s): Shared,
    headers: HeaderMap,
    body: Result<Json<AddItemsRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<ChangeResponse>), ApiError> {
    authorize(&s, &headers)?;
    let Json(req) = body?;
    let invalid = |msg: String| ApiError::Invalid(ErrorResponse::new(ErrorCode::InvalidInput, msg));
    if req.items.is_empty() || req.items.len() > MAX_ADD {
        return Err(ApiError::Invalid(ErrorResponse::new(
            ErrorCode::TooLarge,
            format!(
                "items must hold 1..={MAX_ADD} images, got {}",
                req.items.len()
            ),
        )));
    }
    let n_pixels = (SIDE * SIDE) as usize;
    for it in &req.items {
        if it.label >= s.config.smlq.num_classes {
            return Err(invalid(format!(
                "label {} is outside 0..{}",
                it.label, s.config.smlq.num_classes
            )));
        }
        if it.pixels.len() != n_pixels {
            return Err(ApiError::Invalid(ErrorResponse::new(
                ErrorCode::DimensionMismatch,
                format!(
                    "pixels must hold {n_pixels} bytes ({SIDE}×{SIDE} greyscale), got {}",
                    it.pixels.len()
                ),
            )));
        }
    }
    let state = Arc::clone(&s);
    let resp = tokio::task::spawn_blocking(move || -> Result<ChangeResponse, ApiError> {
        // One writer at a time: ids, store and catalogue change together.
        let mut cat = state.catalogue.write().unwrap();
        let first = cat.keys().next_back().map_or(0, |m| m + 1);
        let mut new = Vec::with_capacity(req.items.len());
        for (i, it) in req.items.into_iter().enumerate() {
            let id = first + i as u64;
            let item = GalleryItem::new(id, it.label, it.pixels, &state.model)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            new.push(Arc::new(item));
        }
        let version = state.catalogue_version.load(Ordering::SeqCst) + 1;
        let stored: Vec<StoredItem> = new
            .iter()
            .map(|it| StoredItem {
                id: it.id,
                label: it.label,
                pixels: it.pixels.clone(),
            })
            .collect();
        state
            .store
            .put_items(&stored, version)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        for it in &new {
            cat.insert(it.id, Arc::clone(it));
        }
        state.catalogue_version.store(version, Ordering::SeqCst);
        Ok(ChangeResponse {
            ids: new.iter().map(|it| it.id).collect(),
            catalogue_version: version,
        })
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    s.schedule_reembed();
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

async fn delete_item(
    State(s): Shared,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
) -> Result<(StatusCode, Json<ChangeResponse>), ApiError> {
    authorize(&s, &headers)?;
    let id = path_id(id)?;
    let state = Arc::clone(&s);
    let resp = tokio::task::spawn_blocking(move || -> Result<ChangeResponse, ApiError> {
        let mut cat = state.catalogue.write().unwrap();
        if !cat.contains_key(&id) {
            return Err(ApiError::NotFound(id));
        }
        if cat.len() <= 2 {
            return Err(ApiError::Conflict(
                "the gallery needs at least 2 images".into(),
            ));
        }
        let version = state.catalogue_version.load(Ordering::SeqCst) + 1;
        state
            .store
            .delete_item(id, version)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        cat.remove(&id);
        state.catalogue_version.store(version, Ordering::SeqCst);
        Ok(ChangeResponse {
            ids: vec![id],
            catalogue_version: version,
        })
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    s.schedule_reembed();
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

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
enum Reply {
    NotModified,
    Gzip,
    Plain,
}

impl Reply {
    fn to(headers: &HeaderMap, etag: &HeaderValue) -> Self {
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
fn cacheable(
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

/// `GET /partition`: the current partition document (`Cache-Control: no-cache`, ETag = the
/// version, so a revalidation costs a 304).
async fn partition(State(s): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    let p = s.partitions.current().ok_or(VersionError::Unavailable)?;
    Ok(send_held(
        &headers,
        p.doc_etag.clone(),
        NO_CACHE,
        "application/json",
        &p.doc_json,
        Some(&p.doc_gzip),
    ))
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

/// A level or block index from the path: not a decimal number → 400 `invalid_input`; a
/// number too big for `usize` → `None` (out of range, 404 like any other).
fn path_index(s: &str, what: &str) -> Result<Option<usize>, ApiError> {
    if s.is_empty() || s.len() > 40 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::BadRequest(ErrorResponse::new(
            ErrorCode::InvalidInput,
            format!("the {what} must be a non-negative decimal number"),
        )));
    }
    Ok(s.parse().ok())
}

/// `GET /blocks/{version}/{level}/{block}`: one block file, immutable. Non-numeric level or
/// block → 400 `invalid_input`; a version replaced longer ago than the grace period → 410
/// `gone`; an unknown version, level or block → 404 `not_found` (both name the current
/// version). `Range` is ignored (the full file, 200).
async fn block(
    State(s): Shared,
    path: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path((version, level, block)) = path.map_err(|e| {
        ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
    })?;
    let (li, bi) = (path_index(&level, "level")?, path_index(&block, "block")?);
    let p = s.partitions.get(&version)?;
    let missing = || {
        // The path is the client's input: quoted cut, like every echo.
        let cut = |s: &str| shared::text::excerpt(s, shared::params::limits::MAX_ECHO_CHARS);
        ApiError::Missing(format!(
            "partition {} has no block {}/{} ({} levels)",
            p.version(),
            cut(&level),
            cut(&block),
            p.levels()
        ))
    };
    let (l, b) = li.zip(bi).ok_or_else(missing)?;
    let etag = p.etag(l, b).ok_or_else(missing)?;
    // A revalidation is answered from the document alone: no file is read.
    let reply = Reply::to(&headers, &etag);
    let body = match reply {
        Reply::NotModified => Bytes::new(),
        _ => s
            .partitions
            .block(&p, l, b, reply == Reply::Gzip)
            .await
            .map_err(|e| match e {
                BlockError::Missing { .. } => missing(),
                e @ BlockError::Store { .. } => ApiError::Internal(e.to_string()),
            })?,
    };
    Ok(cacheable(
        reply,
        etag,
        IMMUTABLE,
        HeaderValue::from_static("application/octet-stream"),
        body,
    ))
}
