//! The one error type of the HTTP API and the one place it becomes a status code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request that fits its schema but asks for something unacceptable (an empty command, a timeout
    /// out of range, a NUL in a path), or a malformed query.
    #[error("{0}")]
    BadRequest(String),
    /// A missing or wrong token, a path outside the workspace, or a file the system does not let boxd
    /// touch; the detail says which (each has its own wording).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    RangeNotSatisfiable(String),
    /// A body, or a tool's arguments, that does not parse or does not fit the schema (a wrong type, a
    /// missing field): FastAPI's status for the same case, which upstream's clients already know.
    #[error("{0}")]
    Unprocessable(String),
    #[error("{0}")]
    InsufficientStorage(String),
    /// A configured limit (concurrent processes, watches) is reached.
    #[error("{0}")]
    TooManyRequests(String),
    /// A hosted MCP server (or other upstream peer) failed.
    #[error("{0}")]
    BadGateway(String),
    #[error("{0}")]
    GatewayTimeout(String),
    /// Work that must wait its turn found the queue full or did not get its turn within its bound
    /// (a concurrency cap); the client may retry after the given seconds.
    #[error("{message}")]
    Busy {
        message: String,
        retry_after_seconds: u64,
    },
    /// A family that is starting or failed; the client may retry after the given seconds.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after_seconds: u64,
    },
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RangeNotSatisfiable(_) => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::TooManyRequests(_) | ApiError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error's name in the `{"code", "message"}` bodies of the sandboxd REST API (the Kubernetes
    /// agent-sandbox runtime): gRPC's canonical code names, and `CONFLICT` for a 409 as sandboxd says it.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) | ApiError::Unprocessable(_) => "INVALID_ARGUMENT",
            ApiError::Forbidden(_) => "PERMISSION_DENIED",
            ApiError::NotFound(_) => "NOT_FOUND",
            ApiError::Conflict(_) => "CONFLICT",
            ApiError::RangeNotSatisfiable(_) => "OUT_OF_RANGE",
            ApiError::PayloadTooLarge(_)
            | ApiError::InsufficientStorage(_)
            | ApiError::TooManyRequests(_)
            | ApiError::Busy { .. } => "RESOURCE_EXHAUSTED",
            ApiError::BadGateway(_) | ApiError::Unavailable { .. } => "UNAVAILABLE",
            ApiError::GatewayTimeout(_) => "DEADLINE_EXCEEDED",
            ApiError::Internal(_) => "INTERNAL",
        }
    }

    /// Maps a filesystem error on `what` (a path as the user gave it) to the status a client can act on.
    pub fn from_io(err: &std::io::Error, what: &str) -> ApiError {
        use std::io::ErrorKind as K;
        let message = format!("{what}: {err}");
        match err.kind() {
            K::NotFound => ApiError::NotFound(message),
            K::PermissionDenied | K::ReadOnlyFilesystem => {
                ApiError::Forbidden(format!("{what}: the system does not allow this ({err})"))
            }
            K::AlreadyExists | K::IsADirectory | K::NotADirectory | K::DirectoryNotEmpty => {
                ApiError::Conflict(message)
            }
            K::InvalidInput | K::InvalidFilename | K::CrossesDevices => {
                ApiError::BadRequest(message)
            }
            K::StorageFull | K::QuotaExceeded | K::FileTooLarge => {
                ApiError::InsufficientStorage(message)
            }
            _ => ApiError::Internal(message),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(err: tokio::task::JoinError) -> Self {
        ApiError::Internal(format!("worker task failed: {err}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), detail = %self, "request failed");
        }
        let retry_after = match &self {
            ApiError::Unavailable {
                retry_after_seconds,
                ..
            }
            | ApiError::Busy {
                retry_after_seconds,
                ..
            } => Some(*retry_after_seconds),
            _ => None,
        };
        let mut response = (status, Json(json!({ "detail": self.to_string() }))).into_response();
        if let Some(reason) = reason_phrase(&self.to_string()) {
            response.extensions_mut().insert(reason);
        }
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The message also travels as the HTTP/1 reason phrase (`HTTP/1.1 503 the ipython tools are failed:
/// ...`), because the Python client reports an error status as `raise_for_status()` words it, with
/// the reason phrase and without the body: that way a model reading the error still learns why.
fn reason_phrase(detail: &str) -> Option<hyper::ext::ReasonPhrase> {
    const MAX_REASON: usize = 300;
    let mut reason: String = detail
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                ' '
            }
        })
        .take(MAX_REASON)
        .collect();
    if detail.chars().count() > MAX_REASON {
        reason.push_str("...");
    }
    let reason = reason.trim();
    if reason.is_empty() {
        return None;
    }
    hyper::ext::ReasonPhrase::try_from(reason.to_owned()).ok()
}
