//! Extractors that turn every malformed request into an `ApiError` with a message, in JSON like the rest.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::core::error::ApiError;

/// A JSON body. Content-Type is not required (curl users forget it); an empty body reads as `{}` so
/// routes whose fields all have defaults accept a bare POST. Malformed JSON → 422 with serde's message.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = Bytes::from_request(req, state).await.map_err(|rejection| {
            match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(rejection.body_text()),
                _ => ApiError::BadRequest(rejection.body_text()),
            }
        })?;
        let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        serde_json::from_slice(body)
            .map(ApiJson)
            .map_err(|err| ApiError::Unprocessable(format!("invalid JSON body: {err}")))
    }
}

/// Query parameters; a missing or mistyped one → 400 naming it.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// Path parameters; one that does not decode (invalid UTF-8, a bad percent escape) → 400 naming it, in
/// JSON like every other error.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| ApiPath(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// A multipart/form-data body, read part by part as it arrives; a request that is not one (no or another
/// content type, no boundary) → 400 saying what was expected.
pub struct ApiMultipart(pub axum::extract::Multipart);

impl<S> FromRequest<S> for ApiMultipart
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Multipart::from_request(req, state)
            .await
            .map(ApiMultipart)
            .map_err(|rejection| {
                ApiError::BadRequest(format!(
                    "expected a multipart/form-data body: {}",
                    rejection.body_text()
                ))
            })
    }
}
