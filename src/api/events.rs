//! Event streams to HTTP clients, in the format they ask for: server-sent events when `Accept` names
//! `text/event-stream`, else newline-delimited JSON. Both carry the same JSON events and keep-alives, so an
//! idle stream is not cut by a proxy's read timeout.

use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::Value;

/// Set once at start-up (`--keep-alive`) and read by every stream, so it is a process-wide setting rather
/// than state threaded through each route.
static KEEP_ALIVE: OnceLock<Duration> = OnceLock::new();

pub fn set_keep_alive(period: Duration) {
    let _ = KEEP_ALIVE.set(period);
}

/// Between keep-alives on an idle stream, and between WebSocket pings: a stream idle for longer than a
/// proxy's read timeout would be cut.
pub fn keep_alive() -> Duration {
    KEEP_ALIVE.get().copied().unwrap_or(Duration::from_secs(15))
}

/// One event: its JSON (with a `type` field, which is also the SSE event name) and an optional SSE id
/// (the offset to resume from, which SSE clients send back as `Last-Event-ID`).
pub struct Event {
    pub data: Value,
    pub id: Option<String>,
}

impl Event {
    pub fn new(data: Value) -> Self {
        Event { data, id: None }
    }

    pub fn with_id(data: Value, id: impl ToString) -> Self {
        Event {
            data,
            id: Some(id.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFormat {
    Sse,
    Ndjson,
}

impl EventFormat {
    pub fn negotiate(headers: &HeaderMap) -> Self {
        let wants_sse = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|accept| accept.contains("text/event-stream"));
        if wants_sse {
            EventFormat::Sse
        } else {
            EventFormat::Ndjson
        }
    }
}

/// `Last-Event-ID` as an offset, for SSE clients that reconnect on their own.
pub fn last_event_offset(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok())
}

pub fn respond<S>(format: EventFormat, events: S) -> Response
where
    S: Stream<Item = Event> + Send + 'static,
{
    match format {
        EventFormat::Sse => {
            let events = events.map(|event| {
                // axum panics on an event name with CR or LF; a tool may one day relay a page's or a
                // device's own event type, so only plain names are used as names.
                let name = event
                    .data
                    .get("type")
                    .and_then(Value::as_str)
                    .filter(|name| is_plain_event_name(name))
                    .unwrap_or("message")
                    .to_owned();
                let mut sse = SseEvent::default().event(name).data(event.data.to_string());
                if let Some(id) = event.id {
                    sse = sse.id(id);
                }
                Ok::<_, Infallible>(sse)
            });
            let mut response = Sse::new(events)
                .keep_alive(KeepAlive::new().interval(keep_alive()))
                .into_response();
            // nginx buffers proxied responses unless told otherwise.
            response
                .headers_mut()
                .insert("x-accel-buffering", HeaderValue::from_static("no"));
            response
        }
        EventFormat::Ndjson => {
            // The body owns the source: when the client goes away and hyper drops the body, the
            // source (a running call, a followed process) is dropped with it, not at the next write.
            let body = futures_util::stream::unfold(Box::pin(events), |mut events| async move {
                let line = match tokio::time::timeout(keep_alive(), events.next()).await {
                    Ok(Some(event)) => ndjson_line(&event.data),
                    Ok(None) => return None,
                    Err(_) => ndjson_line(&serde_json::json!({"type": "keepalive"})),
                };
                Some((Ok::<_, Infallible>(line), events))
            });
            Response::builder()
                .header(header::CONTENT_TYPE, "application/x-ndjson")
                .header(header::CACHE_CONTROL, "no-cache")
                .header("x-accel-buffering", "no")
                .body(Body::from_stream(body))
                .unwrap_or_else(|_| Response::new(Body::empty()))
        }
    }
}

fn is_plain_event_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
}

fn ndjson_line(value: &Value) -> Bytes {
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_plain_names_become_sse_event_names() {
        assert!(super::is_plain_event_name("output"));
        assert!(!super::is_plain_event_name("evil\nid: 3"));
        assert!(!super::is_plain_event_name(""));
    }
}
