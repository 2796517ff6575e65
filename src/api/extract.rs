//! Extractors that turn every malformed request into an `ApiError` with a message, in JSON like the rest.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

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
        let body = json_body(req, state).await?;
        serde_json::from_slice(json_or_empty_object(&body))
            .map(ApiJson)
            .map_err(|err| ApiError::Unprocessable(format!("invalid JSON body: {err}")))
    }
}

/// A JSON body that must be an object, read as `T`: [`ApiJson`] for a `T` whose fields all have
/// defaults, which serde would otherwise also read from `[]` and so answer 200 to a body of the wrong
/// shape. Another JSON value → 422 naming what it is.
pub struct ApiJsonObject<T>(pub T);

impl<S, T> FromRequest<S> for ApiJsonObject<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = json_body(req, state).await?;
        let value: Value = serde_json::from_slice(json_or_empty_object(&body))
            .map_err(|err| ApiError::Unprocessable(format!("invalid JSON body: {err}")))?;
        let kind = match value {
            Value::Object(_) => None,
            Value::Null => Some("null"),
            Value::Bool(_) => Some("a boolean"),
            Value::Number(_) => Some("a number"),
            Value::String(_) => Some("a string"),
            Value::Array(_) => Some("an array"),
        };
        if let Some(kind) = kind {
            return Err(ApiError::Unprocessable(format!(
                "invalid JSON body: expected an object, got {kind}"
            )));
        }
        serde_json::from_value(value)
            .map(ApiJsonObject)
            .map_err(|err| ApiError::Unprocessable(format!("invalid JSON body: {err}")))
    }
}

/// The request's body, whole; one over the body limit → 413.
async fn json_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state)
        .await
        .map_err(|rejection| match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(rejection.body_text()),
            _ => ApiError::BadRequest(rejection.body_text()),
        })
}

/// `body`, or `{}` for an empty (or all-whitespace) one.
fn json_or_empty_object(body: &[u8]) -> &[u8] {
    if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct AllDefaults {
        #[serde(default)]
        message: Option<String>,
    }

    async fn object(body: &'static str) -> Result<Option<String>, String> {
        ApiJsonObject::<AllDefaults>::from_request(Request::new(body.into()), &())
            .await
            .map(|ApiJsonObject(read)| read.message)
            .map_err(|err| format!("{} {err}", err.status().as_u16()))
    }

    #[tokio::test]
    async fn an_object_body_is_read_and_any_other_value_named() {
        assert_eq!(object(r#"{"message": "m"}"#).await, Ok(Some("m".into())));
        assert_eq!(object(" \n").await, Ok(None));
        for (body, kind) in [
            ("[]", "an array"),
            ("null", "null"),
            ("true", "a boolean"),
            ("1", "a number"),
            (r#""x""#, "a string"),
        ] {
            assert_eq!(
                object(body).await,
                Err(format!(
                    "422 invalid JSON body: expected an object, got {kind}"
                )),
                "{body}"
            );
        }
        let wrong_type = object(r#"{"message": 1}"#).await.unwrap_err();
        assert!(
            wrong_type.starts_with("422 invalid JSON body: invalid type: integer `1`"),
            "{wrong_type}"
        );
        let malformed = object("{").await.unwrap_err();
        assert!(
            malformed.starts_with("422 invalid JSON body: EOF"),
            "{malformed}"
        );
    }
}
