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

pub async fn log_request(request: Request, next: Next) -> Response {
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
        .unwrap_or("-")
        .to_owned();
    let mut response = next.run(request).await;
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
