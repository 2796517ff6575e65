//! One log line per request: id, method, path, status, latency. Never the token, the query or a body.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

const REQUEST_ID: &str = "x-request-id";
const SESSION_ID: &str = "x-agentscope-runtime-session-id";

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// Who sent a request, for the call context of the tools it reaches.
#[derive(Clone)]
pub struct RequestInfo {
    pub id: String,
    pub session: Option<String>,
}

/// Logs the request, and runs it inside a span carrying its id and session, so every line logged
/// while serving it (tools, supervisors) can be tied to its caller.
pub async fn log_request(mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .filter(|value| value.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:x}", NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)));
    let session = request
        .headers()
        .get(SESSION_ID)
        .and_then(|value| value.to_str().ok())
        .filter(|value| value.len() <= 256)
        .map(str::to_owned);
    request.extensions_mut().insert(RequestInfo {
        id: request_id.clone(),
        session: session.clone(),
    });
    let session = session.unwrap_or_else(|| "-".into());
    let span = tracing::info_span!("request", id = %request_id, session = %session);
    let mut response = tracing::Instrument::instrument(next.run(request), span).await;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    tracing::info!(
        request_id = %request_id,
        session = %session,
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        latency_ms = format_args!("{:.2}", started.elapsed().as_secs_f64() * 1000.0),
        "request"
    );
    response
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for crate::tools::CallContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let info = parts.extensions.get::<RequestInfo>();
        Ok(crate::tools::CallContext::new(
            info.map(|info| info.id.clone()).unwrap_or_default(),
            info.and_then(|info| info.session.clone()),
        ))
    }
}
