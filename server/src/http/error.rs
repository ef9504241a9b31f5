//! `ApiError`: every failure a handler can return, rendered as
//! `{ "error": { "code", "message" } }` with the right status (never a panic, never a 500 for
//! bad input).

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::api::{ErrorCode, ErrorResponse};

/// `Retry-After` of a 503 `unavailable` (a version being built takes seconds to minutes).
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Json(#[from] JsonRejection),
    /// Well-formed but unacceptable input (422).
    #[error("{}", .0.error.message)]
    Invalid(ErrorResponse),
    /// Malformed request line, e.g. an id that is not a number (400).
    #[error("{}", .0.error.message)]
    BadRequest(ErrorResponse),
    #[error("degenerate anchors: {0}")]
    Degenerate(String),
    #[error("no gallery item with id {0}")]
    NotFound(u64),
    /// Anything else that does not exist (a partition level or block, an unknown version):
    /// 404 `not_found` with this message.
    #[error("{0}")]
    Missing(String),
    /// A partition version that existed but is no longer served: 410 `gone`, the message
    /// names the current version.
    #[error("{0}")]
    Gone(String),
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    /// Not ready yet: 503 `unavailable`.
    #[error("{0}")]
    Unavailable(String),
    /// At the operator's cap of concurrent work, or the client's share of it: 503 `busy`
    /// with `Retry-After`.
    #[error("{message}")]
    Busy { message: String, retry_after: u64 },
    /// A body whose length must be declared but was not: 411.
    #[error("{0}")]
    LengthRequired(String),
    /// A body of another type than the endpoint declares: 415 `invalid_input`.
    #[error("{0}")]
    MediaType(String),
    /// A body over the size limit (or unreadable): 413 `payload_too_large`.
    #[error("{0}")]
    TooLarge(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// A front's shard did not answer, or answered what cannot be combined (`front`): 502
    /// `unavailable` — never a wrong answer.
    #[error("{0}")]
    BadGateway(String),
}

impl ApiError {
    fn status_and_body(&self) -> (StatusCode, ErrorResponse) {
        match self {
            ApiError::Json(rej) => {
                let (status, code) = match rej {
                    JsonRejection::MissingJsonContentType(_) => {
                        (StatusCode::UNSUPPORTED_MEDIA_TYPE, ErrorCode::InvalidJson)
                    }
                    JsonRejection::BytesRejection(_)
                        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE =>
                    {
                        (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
                    }
                    JsonRejection::JsonDataError(_) => {
                        (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::InvalidInput)
                    }
                    _ => (rej.status(), ErrorCode::InvalidJson),
                };
                let status = if status.is_client_error() {
                    status
                } else {
                    StatusCode::BAD_REQUEST
                };
                (status, ErrorResponse::new(code, rej.body_text()))
            }
            ApiError::Invalid(body) => (StatusCode::UNPROCESSABLE_ENTITY, body.clone()),
            ApiError::BadRequest(body) => (StatusCode::BAD_REQUEST, body.clone()),
            ApiError::Degenerate(msg) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorResponse::new(ErrorCode::DegenerateAnchors, msg.clone()),
            ),
            ApiError::NotFound(_) => (
                StatusCode::NOT_FOUND,
                ErrorResponse::new(ErrorCode::NotFound, self.to_string()),
            ),
            ApiError::Missing(msg) => (
                StatusCode::NOT_FOUND,
                ErrorResponse::new(ErrorCode::NotFound, msg.clone()),
            ),
            ApiError::Gone(msg) => (
                StatusCode::GONE,
                ErrorResponse::new(ErrorCode::Gone, msg.clone()),
            ),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                ErrorResponse::new(ErrorCode::Unauthorized, self.to_string()),
            ),
            ApiError::Forbidden(msg) => (
                StatusCode::FORBIDDEN,
                ErrorResponse::new(ErrorCode::Forbidden, msg.clone()),
            ),
            ApiError::Conflict(msg) => (
                StatusCode::CONFLICT,
                ErrorResponse::new(ErrorCode::Conflict, msg.clone()),
            ),
            ApiError::Unavailable(msg) => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorResponse::new(ErrorCode::Unavailable, msg.clone()),
            ),
            ApiError::Busy { message, .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorResponse::new(ErrorCode::Busy, message.clone()),
            ),
            ApiError::LengthRequired(msg) => (
                StatusCode::LENGTH_REQUIRED,
                ErrorResponse::new(ErrorCode::InvalidInput, msg.clone()),
            ),
            ApiError::TooLarge(msg) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorResponse::new(ErrorCode::PayloadTooLarge, msg.clone()),
            ),
            ApiError::MediaType(msg) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorResponse::new(ErrorCode::InvalidInput, msg.clone()),
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorResponse::new(ErrorCode::Internal, self.to_string()),
            ),
            ApiError::BadGateway(msg) => (
                StatusCode::BAD_GATEWAY,
                ErrorResponse::new(ErrorCode::Unavailable, msg.clone()),
            ),
        }
    }
}

impl From<crate::partition::VersionError> for ApiError {
    fn from(e: crate::partition::VersionError) -> Self {
        use crate::partition::VersionError;
        match e {
            VersionError::Gone { .. } => ApiError::Gone(e.to_string()),
            VersionError::Unknown { .. } | VersionError::Unavailable => {
                ApiError::Missing(e.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.status_and_body();
        // Refusals (503) are counted and logged, throttled, where they arise
        // (`ops::refusals`); only a fault of the server itself is an error line.
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "request failed");
        }
        let mut resp = (status, Json(body)).into_response();
        let retry = match &self {
            ApiError::Busy { retry_after, .. } => Some(*retry_after),
            ApiError::Unavailable(_) => Some(UNAVAILABLE_RETRY_AFTER_SECS),
            _ => None,
        };
        if let Some(secs) = retry {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

/// A JSON error for a status produced outside the handlers (unknown route, body limit).
pub fn plain_error(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    (status, Json(ErrorResponse::new(code, message))).into_response()
}
