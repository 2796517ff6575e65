//! The one place an [`ApiError`] becomes an HTTP answer: its status, the `{"detail"}` body, `Retry-After`
//! for a busy or unavailable family, and the message as the HTTP/1 reason phrase. `core::error` holds
//! the error as plain data; sandboxd's APIs word it their own way (`sandboxd`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::core::error::ApiError;

impl ApiError {
    /// The status every route answers the error with (sandboxd's REST API too, under its own body).
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
