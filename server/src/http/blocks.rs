//! Private block retrieval: the partition document and its block files.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use shared::api::{ErrorCode, ErrorResponse};

use super::cache::{cacheable, send_held, Reply, IMMUTABLE, NO_CACHE};
use super::error::ApiError;
use crate::partition::blockstore::LevelFile;
use crate::partition::{BlockError, VersionError};
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/partition", get(partition))
        .route("/blocks/{version}/{level}/{block}", get(block))
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

/// `GET /blocks/{version}/{level}/{block}`: one block file, immutable; `{block}` =
/// `centroids` is the level's centroids file, served the same way. Non-numeric level or
/// block (other than `centroids`) → 400 `invalid_input`; a version replaced longer ago than the grace period → 410
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
    let li = path_index(&level, "level")?;
    let file = if block == publish::centroids::FILE_NAME {
        Some(LevelFile::Centroids)
    } else {
        path_index(&block, "block")?.map(LevelFile::Block)
    };
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
    let (l, b) = li.zip(file).ok_or_else(missing)?;
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
