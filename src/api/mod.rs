//! What families use to serve HTTP, apart from the router that assembles the app: how an `ApiError`
//! becomes an answer (`response`), extractors that answer malformed requests in JSON, event streams (SSE
//! or NDJSON), and the answers to a request whose body was left unread.

pub mod events;
pub mod extract;
pub mod response;

use axum::body::Body;
use axum::response::{IntoResponse, Response};

use crate::core::error::ApiError;

/// Answers `err` to a request whose body was not read. A small body is drained so the client's
/// keep-alive connection stays usable (otherwise the server drops it and a client reusing it sees
/// "connection closed without response"); a large one is left unread and the connection is closed
/// explicitly, so no client reuses it.
pub async fn reject_unread_body(err: ApiError, body: Body) -> Response {
    const DRAIN_LIMIT: usize = 1024 * 1024;
    let drained = axum::body::to_bytes(body, DRAIN_LIMIT).await.is_ok();
    let response = err.into_response();
    if drained {
        response
    } else {
        closing_connection(response)
    }
}

/// `response` with `Connection: close`: the request's body was left partly unread (a refusal or a
/// failure mid-upload), so the connection cannot carry another request, and a client told so opens a
/// new one instead of sending its next request into a connection the server is dropping.
pub fn closing_connection(mut response: Response) -> Response {
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}
