//! The PIR endpoints (`/api/v1/pir…`): the document, the immutable hint and table files, and
//! the answers. Answers run on the blocking pool (rayon inside), at most `pir_concurrency` at
//! once, with a bounded queue ([`crate::partition::pir::PirSlots`]): a request beyond it is a
//! 503 `busy`.

use crate::partition::pir::SlotRefusal;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use shared::api::{ErrorCode, ErrorResponse};

use super::cache::{send_held, IMMUTABLE, NO_CACHE};
use super::error::ApiError;
use crate::partition::pir::{answer_scores, PirServe, QueryError, SCORES};
use crate::partition::Published;
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// Largest query body: `MAX_PIR_QUERIES` vectors of a database's width (a level database's
/// upload is bounded by `pir::MAX_LEVEL_UPLOAD` per search when it is built).
pub const MAX_BODY: usize = 16 << 20;
/// Path segments echoed in messages are cut to this many characters.
const ECHO_MAX: usize = 64;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pir", get(document))
        .route("/pir/{version}/rank", get(table))
        .route("/pir/{version}/{db}/hint", get(hint))
        .route(
            "/pir/{version}/{db}",
            post(answer).layer(DefaultBodyLimit::max(MAX_BODY)),
        )
}

fn quoted(s: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{s}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

fn not_built() -> ApiError {
    ApiError::Unavailable("the PIR databases of this version are being built or not offered".into())
}

/// The version (current or in its grace period) and its PIR databases.
fn served(s: &AppState, version: &str) -> Result<(Arc<Published>, Arc<PirServe>), ApiError> {
    let p = s.partitions.get(version)?;
    let pir = p.pir.get().cloned().ok_or_else(not_built)?;
    Ok((p, pir))
}

fn bad_path(e: PathRejection) -> ApiError {
    ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
}

fn no_db(pir: &PirServe, db: &str) -> ApiError {
    let db: String = db.chars().take(ECHO_MAX).collect();
    ApiError::Missing(format!(
        "PIR version {} has no database {db:?} (thumbs, scores or a level offered in its document)",
        pir.doc.version
    ))
}

/// `GET /pir`: the current version's PIR document (no-cache; ETag = the version).
async fn document(State(s): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    let p = s
        .partitions
        .current()
        .ok_or(crate::partition::VersionError::Unavailable)?;
    let pir = p.pir.get().ok_or_else(not_built)?;
    Ok(send_held(
        &headers,
        quoted(&pir.doc.version),
        NO_CACHE,
        "application/json",
        &pir.doc_json,
        None,
    ))
}

/// `GET /pir/{version}/{db}/hint`: a database's hint, immutable.
async fn hint(
    State(s): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path((version, db)) = path.map_err(bad_path)?;
    let (_, pir) = served(&s, &version)?;
    if db == SCORES {
        // The hintless ranking's public file (gzip when accepted: its row map compresses).
        let sc = pir.scores.as_ref().ok_or_else(|| no_db(&pir, &db))?;
        let sha = pir
            .doc
            .scores
            .as_ref()
            .map_or("", |d| d.public.sha256.as_str());
        return Ok(send_held(
            &headers,
            quoted(sha),
            IMMUTABLE,
            "application/octet-stream",
            &sc.public.0,
            Some(&sc.public.1),
        ));
    }
    let d = pir.db(&db).ok_or_else(|| no_db(&pir, &db))?;
    // Random-looking words: gzip would not help.
    Ok(send_held(
        &headers,
        quoted(&d.doc.hint_sha256),
        IMMUTABLE,
        "application/octet-stream",
        &d.hint,
        None,
    ))
}

/// `GET /pir/{version}/rank`: the whole ranking table, immutable (gzip when accepted).
async fn table(
    State(s): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(version) = path.map_err(bad_path)?;
    let (_, pir) = served(&s, &version)?;
    let (raw, gz) = pir.table.as_ref().ok_or_else(|| no_db(&pir, "rank"))?;
    let sha = pir
        .doc
        .rank_table
        .as_ref()
        .map_or("", |t| t.sha256.as_str());
    Ok(send_held(
        &headers,
        quoted(sha),
        IMMUTABLE,
        "application/octet-stream",
        raw,
        Some(gz),
    ))
}

/// `POST /pir/{version}/{db}`: answers the query vectors in the body (`application/
/// octet-stream`, little-endian u32). The answer reveals nothing the queries did not already:
/// the server computes the same function of every query. Any other Content-Type is a 415
/// before any work: a cross-site "simple" request (`text/plain`, no preflight) from another
/// page cannot make this server compute for it.
async fn answer(
    State(s): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let octets = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/octet-stream"));
    if !octets {
        return Err(ApiError::MediaType(
            "PIR queries are sent as application/octet-stream".into(),
        ));
    }
    // A body over the limit is a JSON 413 like every other error (the framework's is text).
    let body = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(e.body_text())
        } else {
            ApiError::BadRequest(ErrorResponse::new(ErrorCode::InvalidInput, e.body_text()))
        }
    })?;
    let Path((version, db)) = path.map_err(bad_path)?;
    let (_, pir) = served(&s, &version)?;
    let scores = db == SCORES;
    if scores {
        pir.scores.as_ref().ok_or_else(|| no_db(&pir, &db))?;
    } else {
        pir.db(&db).ok_or_else(|| no_db(&pir, &db))?;
    }
    let permit = s.pir_slots.acquire().await.map_err(|r| {
        ApiError::Busy(match r {
            SlotRefusal::QueueFull => "too many PIR requests waiting; retry later".into(),
            SlotRefusal::Timeout => "no PIR answer slot came free in time; retry later".into(),
        })
    })?;
    let state = Arc::clone(&s);
    let out = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        match pir.scores.as_ref().filter(|_| scores) {
            Some(sc) => answer_scores(sc, &body, &state.pir_counters),
            None => {
                let d = pir.db(&db).expect("checked above");
                crate::partition::pir::answer(d, db == "thumbs", &body, &state.pir_counters)
            }
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(|e: QueryError| {
        ApiError::Invalid(ErrorResponse::new(ErrorCode::InvalidInput, e.to_string()))
    })?;
    let mut resp = Response::new(axum::body::Body::from(out));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    Ok(resp)
}
