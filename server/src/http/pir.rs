//! The PIR endpoints (`/api/v1/pir…`): the document, the immutable hint and table files, and
//! the answers. Answers run on the blocking pool (rayon inside), at most `pir_concurrency` at
//! once, admitted fairly by client ([`crate::net::admission`]): a request beyond its share or
//! the queue is a 503 `busy` with `Retry-After`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use publish::pir::doc::FileDoc;
use shared::api::{ErrorCode, ErrorResponse};

use super::cache::{send_held, IMMUTABLE, NO_CACHE};
use super::error::ApiError;
use super::guard::{closing, declared_length};
use crate::net::admission::SlotRefusal;
use crate::net::client::ClientKey;
use crate::ops::refusals::Refusal;
use crate::partition::pir::{decode_scores, PirServe, QueryError, SCORES};
use crate::partition::Published;
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// Largest query body: `MAX_PIR_QUERIES` vectors of a database's width (a level database's
/// upload is bounded by `pir::MAX_LEVEL_UPLOAD` per search when it is built).
pub const MAX_BODY: usize = 16 << 20;
/// A refused body declared up to this size is read and dropped behind the answer (a
/// lingering close, as web servers do): closing with unread bytes makes the kernel reset the
/// connection, and a client still sending sees the reset, not the 413 or 503 sent before it.
/// Larger declared bodies are not read at all.
pub const LINGER_MAX: usize = 4 * MAX_BODY;
/// Path segments echoed in messages are cut to this many characters.
const ECHO_MAX: usize = 64;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pir", get(document))
        .route("/pir/{version}", get(version_document))
        .route("/pir/{version}/rank", get(table))
        .route("/pir/{version}/thumbs/code", get(code))
        .route("/pir/{version}/{db}/hint", get(hint))
        .route("/pir/{version}/{db}", post(answer))
}

/// A row shard's routes (`--shard-rows`): only the answers, whose parts the front combines.
/// A shard holds no public file (`partition::pir::build`): the front sends every other
/// request to a whole replica.
pub fn shard_routes() -> Router<Arc<AppState>> {
    Router::new().route("/pir/{version}/{db}", post(answer))
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

/// `GET /pir/{version}`: the PIR document of a version still served (current, in its grace
/// period, or staged by a replica about to switch), immutable: a client that read the
/// partition document asks for the PIR document of that very version, so the two agree even
/// when the current version changes between its two requests (or they reach two replicas).
async fn version_document(
    State(s): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(version) = path.map_err(bad_path)?;
    let (_, pir) = served(&s, &version)?;
    Ok(send_held(
        &headers,
        quoted(&pir.doc.version),
        IMMUTABLE,
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
    held_file(
        &headers,
        &pir,
        pir.table.as_ref(),
        pir.doc.rank_table.as_ref(),
        "rank",
    )
}

/// `GET /pir/{version}/thumbs/code`: the thumbnails' codebook, immutable (gzip when
/// accepted); 404 where the records are not coded.
async fn code(
    State(s): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(version) = path.map_err(bad_path)?;
    let (_, pir) = served(&s, &version)?;
    let (files, doc) = (pir.code.as_ref(), pir.doc.thumbs_code.as_ref());
    held_file(&headers, &pir, files, doc, "thumbs/code")
}

/// A version's public file (plain and gzip), named by its document's SHA-256 as the ETag.
fn held_file(
    headers: &HeaderMap,
    pir: &PirServe,
    files: Option<&(Bytes, Bytes)>,
    doc: Option<&FileDoc>,
    what: &str,
) -> Result<Response, ApiError> {
    let (raw, gz) = files.ok_or_else(|| no_db(pir, what))?;
    Ok(send_held(
        headers,
        quoted(doc.map_or("", |t| t.sha256.as_str())),
        IMMUTABLE,
        "application/octet-stream",
        raw,
        Some(gz),
    ))
}

/// `POST /pir/{version}/{db}`: answers the query vectors in the body (`application/
/// octet-stream`, `pir::layout::Shape::encode_query`'s packed values; thumbnail and level
/// answers in `Shape::encode_answer`'s form). The answer reveals nothing the queries did not already:
/// the server computes the same function of every query.
///
/// Cheap checks first, so a request that cannot be answered never waits or holds memory:
/// the type (415: a cross-site "simple" request, `text/plain` without preflight, cannot make
/// this server compute for another page), the version and database (404/410/503), the
/// declared length (411 without one, 413 over the limit, 422 if no query has it). Then the
/// body is admitted and read, its bytes charged to the upload budget as they arrive (within
/// the body timeout and minimum rate), a scores query is
/// decoded (422 if malformed), and only then does it queue for an answer slot
/// (`net::admission`: fair by client; 503 with `Retry-After` beyond its share).
///
/// A request refused before its body was read is answered at once, and its body (if it
/// declared at most [`LINGER_MAX`]) is read and dropped behind the answer, within the body
/// timeout, never held: an HTTP/1.1 client that is still sending sees the refusal — and its
/// `Retry-After` — instead of a reset.
async fn answer(
    State(s): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    client: Option<Extension<ClientKey>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // Set by `guard` for every request; absent only outside the router's middleware.
    let client = client.map_or(ClientKey::UNKNOWN, |Extension(c)| c);
    let mut body = Some(body);
    let r = answer_within(&s, path, client, &headers, &mut body).await;
    match (r, body) {
        (Err(e), Some(b)) if declared_length(&headers).is_some_and(|n| n <= LINGER_MAX) => {
            // Answered at once; the connection reads the rest meanwhile (bounded by the body
            // deadline `guard` put on it) and stays usable.
            tokio::spawn(async move {
                let mut frames = b.into_data_stream();
                while let Some(Ok(_)) = futures::StreamExt::next(&mut frames).await {}
            });
            Err(e)
        }
        // A body too large to linger over is never read: the connection ends, and says so.
        (Err(e), Some(_)) => Ok(closing(e.into_response())),
        (r, _) => r,
    }
}

async fn answer_within(
    s: &Arc<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    client: ClientKey,
    headers: &HeaderMap,
    body: &mut Option<Body>,
) -> Result<Response, ApiError> {
    let octets = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/octet-stream"));
    if !octets {
        return Err(ApiError::MediaType(
            "PIR queries are sent as application/octet-stream".into(),
        ));
    }
    let Path((version, db)) = path.map_err(bad_path)?;
    let (published, pir) = served(s, &version)?;
    let scores = db == SCORES;
    if scores {
        pir.scores.as_ref().ok_or_else(|| no_db(&pir, &db))?;
    } else {
        pir.db(&db).ok_or_else(|| no_db(&pir, &db))?;
    }
    let len = declared_length(headers).ok_or_else(|| {
        ApiError::LengthRequired("PIR queries must declare their Content-Length".into())
    })?;
    if len > MAX_BODY {
        return Err(ApiError::TooLarge(format!(
            "a PIR query body is at most {MAX_BODY} bytes; {len} declared"
        )));
    }
    pir.check_length(&db, len).map_err(invalid)?;
    let mut upload = s
        .admission
        .begin_upload(client, len)
        .map_err(|r| refused(s, r))?;
    let body = body.take().expect("the body is read once, here");
    // Charged as it arrives (hyper holds a body to its declared length).
    let mut frames = body.into_data_stream();
    let mut got = Vec::with_capacity(len.min(64 << 10));
    while let Some(chunk) = futures::StreamExt::next(&mut frames).await {
        let chunk = chunk.map_err(|e| {
            ApiError::BadRequest(ErrorResponse::new(
                ErrorCode::InvalidInput,
                format!("the query body could not be read: {e}"),
            ))
        })?;
        upload.charge(chunk.len()).map_err(|r| refused(s, r))?;
        got.extend_from_slice(&chunk);
    }
    let body = Bytes::from(got);
    let decoded = match pir.scores.as_ref().filter(|_| scores) {
        Some(_) => {
            let (pir, body) = (Arc::clone(&pir), body.clone());
            let q = tokio::task::spawn_blocking(move || {
                decode_scores(pir.scores.as_ref().expect("checked above"), &body)
            })
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(invalid)?;
            Some(q)
        }
        None => None,
    };
    let slot = s
        .admission
        .acquire(client)
        .await
        .map_err(|r| refused(s, r))?;
    let out = match decoded {
        // Joins the version's queue; answered with whatever else is queued (`batch`).
        Some(q) => {
            let sc = pir.scores.as_ref().expect("checked above");
            let (reply, lead) = sc.batch.join(q, Box::new((slot, upload)));
            if lead {
                let (pir, state) = (Arc::clone(&pir), Arc::clone(s));
                tokio::task::spawn_blocking(move || {
                    let sc = pir.scores.as_ref().expect("checked above");
                    sc.lead(&state.pir_batch_pool, &state.pir_counters);
                });
            }
            reply
                .await
                .map_err(|_| ApiError::Internal("the batch answering this query failed".into()))?
        }
        None => {
            let state = Arc::clone(s);
            tokio::task::spawn_blocking(move || {
                let _upload = upload;
                let d = pir.db(&db).expect("checked above");
                state.answer_pools.for_slot(&slot).install(|| {
                    crate::partition::pir::answer(
                        d,
                        db == "thumbs",
                        pir.shard,
                        &body,
                        &state.pir_counters,
                    )
                })
            })
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
        }
    }
    .map_err(invalid)?;
    s.partitions.after_answer(&published);
    Ok(answer_response(out))
}

/// A PIR answer's response: its bytes, never cached (a front's combined answer too).
pub fn answer_response(bytes: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn invalid(e: QueryError) -> ApiError {
    ApiError::Invalid(ErrorResponse::new(ErrorCode::InvalidInput, e.to_string()))
}

/// A refused admission: counted, and a 503 saying when to retry.
fn refused(s: &AppState, r: SlotRefusal) -> ApiError {
    let (kind, message) = match r {
        SlotRefusal::QueueFull => (Refusal::Busy, "too many PIR requests waiting; retry later"),
        SlotRefusal::Timeout => (Refusal::Busy, "no PIR answer slot came free in time; retry later"),
        SlotRefusal::ClientLimit => (
            Refusal::ClientLimit,
            "this client already has its share of PIR answers running or waiting; retry when one is done",
        ),
        SlotRefusal::UploadBudget => (
            Refusal::UploadBudget,
            "too many PIR query bytes are being received; retry later",
        ),
    };
    s.refusals.record(kind);
    ApiError::Busy {
        message: message.into(),
        retry_after: r.retry_after_secs(),
    }
}
