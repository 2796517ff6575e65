//! `/processes`: start, list, inspect, feed, signal, resize and kill live processes, and follow their
//! output as JSON pages, server-sent events / NDJSON, or over a WebSocket (which also carries input).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::StartRequest;
use crate::api::events::{self, Event, EventFormat};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::core::error::{ApiError, ApiResult};
use crate::core::live::output::ReadOut;
use crate::core::live::stdin::{self, Patience};
use crate::core::live::{
    LiveProcess, ProcessManager, ProcessResult, ProcessStatus, TerminalSize, signals,
};

/// Output per event batch: bounds one read of the log while a reader catches up.
const READ_BATCH: usize = 64 * 1024;
/// A WebSocket text frame carries stdin JSON-escaped: room for a full stdin write in the worst case.
pub const WEBSOCKET_MESSAGE_MAX: usize = 8 * stdin::BODY_MAX;

pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<ProcessManager>: FromRef<S>,
{
    Router::new()
        .route("/processes", post(start).get(list))
        .route("/processes/{id}", get(status).delete(remove))
        .route(
            "/processes/{id}/stdin",
            post(write_stdin).layer(DefaultBodyLimit::max(stdin::BODY_MAX)),
        )
        .route("/processes/{id}/stdin/close", post(close_stdin))
        .route("/processes/{id}/signal", post(signal))
        .route("/processes/{id}/kill", post(kill))
        .route("/processes/{id}/resize", post(resize))
        .route("/processes/{id}/output", get(output))
        .route("/processes/{id}/events", get(follow))
        .route("/processes/{id}/ws", get(websocket))
}

async fn start(
    State(manager): State<Arc<ProcessManager>>,
    ApiJson(request): ApiJson<StartRequest>,
) -> ProcessResult<(StatusCode, Json<ProcessStatus>)> {
    let process = manager.start(request.launch()?).await?;
    Ok((StatusCode::CREATED, Json(process.status())))
}

async fn list(State(manager): State<Arc<ProcessManager>>) -> Json<Value> {
    Json(json!({ "processes": manager.list() }))
}

async fn status(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ProcessStatus>> {
    Ok(Json(manager.get(&id)?.status()))
}

async fn remove(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ProcessStatus>> {
    Ok(Json(manager.remove(&id).await?))
}

async fn write_stdin(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> ProcessResult<StatusCode> {
    let process = manager.get(&id)?;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(format!(
            "stdin writes are at most {} bytes (1 MiB); send it in parts",
            stdin::BODY_MAX
        )),
        _ => ApiError::BadRequest(format!("cannot read the body: {rejection}")),
    })?;
    process.write_stdin(body).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn close_stdin(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
) -> ProcessResult<StatusCode> {
    manager
        .get(&id)?
        .close_stdin(Patience::Wait(stdin::WAIT))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct SignalRequest {
    signal: Value,
}

fn parse_signal(signal: &Value) -> ApiResult<i32> {
    let text = match signal {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    };
    signals::parse(&text).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "unknown signal {signal}: use a name (SIGINT, TERM) or a number"
        ))
    })
}

async fn signal(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<SignalRequest>,
) -> ApiResult<StatusCode> {
    let signal = parse_signal(&request.signal)?;
    manager.get(&id)?.signal(signal).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn kill(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<ProcessStatus>)> {
    let process = manager.get(&id)?;
    process.signal(libc::SIGKILL).await?;
    Ok((StatusCode::ACCEPTED, Json(process.status())))
}

async fn resize(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(size): ApiJson<TerminalSize>,
) -> ApiResult<StatusCode> {
    manager.get(&id)?.resize(size)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct OutputQuery {
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    max_bytes: Option<usize>,
}

/// One page of output from `offset`, without waiting: for clients that poll.
async fn output(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<OutputQuery>,
) -> ApiResult<Json<Value>> {
    let process = manager.get(&id)?;
    let max_bytes = query
        .max_bytes
        .unwrap_or(1024 * 1024)
        .clamp(1, 16 * 1024 * 1024);
    let page = process.read_output(query.offset.unwrap_or(0), max_bytes);
    let events: Vec<Value> = output_events(&page)
        .into_iter()
        .map(|event| event.data)
        .collect();
    Ok(Json(json!({
        "events": events,
        "next_offset": page.next_offset,
        "process": process.status(),
    })))
}

/// Follows output from `offset` (or `Last-Event-ID`) until the exit event.
async fn follow(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<OutputQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let process = manager.get(&id)?;
    let offset = query
        .offset
        .or_else(|| events::last_event_offset(&headers))
        .unwrap_or(0);
    Ok(events::respond(
        EventFormat::negotiate(&headers),
        event_stream(process, offset),
    ))
}

fn output_events(page: &ReadOut) -> Vec<Event> {
    let mut events = Vec::with_capacity(page.chunks.len() + 1);
    if page.dropped > 0 {
        events.push(Event::new(json!({
            "type": "dropped",
            "bytes": page.dropped,
            "offset": page.chunks.first().map_or(page.next_offset, |chunk| chunk.offset),
        })));
    }
    for chunk in &page.chunks {
        events.push(Event::with_id(
            json!({
                "type": "output",
                "stream": chunk.stream,
                "offset": chunk.offset,
                "end": chunk.end(),
                "data": String::from_utf8_lossy(&chunk.data),
            }),
            chunk.end(),
        ));
    }
    events
}

fn exit_event(status: &ProcessStatus) -> Event {
    Event::with_id(
        json!({
            "type": "exit",
            "exit_code": status.exit_code,
            "signal": status.signal,
            "timed_out": status.timed_out,
            "offset": status.output_end,
        }),
        status.output_end,
    )
}

/// Output events from `offset` as they come, then one exit event.
pub fn event_stream(process: Arc<LiveProcess>, offset: u64) -> impl Stream<Item = Event> + Send {
    struct Follow {
        process: Arc<LiveProcess>,
        offset: u64,
        changes: tokio::sync::watch::Receiver<u64>,
        done: bool,
    }
    let changes = process.subscribe();
    let start = Follow {
        process,
        offset,
        changes,
        done: false,
    };
    futures_util::stream::unfold(start, |mut follow| async move {
        loop {
            if follow.done {
                return None;
            }
            // Marked seen before reading, so output appended after this read wakes the wait below.
            follow.changes.borrow_and_update();
            let page = follow.process.read_output(follow.offset, READ_BATCH);
            if !page.chunks.is_empty() || page.dropped > 0 {
                follow.offset = page.next_offset;
                let batch = output_events(&page);
                return Some((futures_util::stream::iter(batch), follow));
            }
            if !follow.process.is_running() {
                follow.done = true;
                let status = follow.process.status();
                return Some((
                    futures_util::stream::iter(vec![exit_event(&status)]),
                    follow,
                ));
            }
            if follow.changes.changed().await.is_err() {
                return None;
            }
        }
    })
    .flatten()
}

/// A terminal over a WebSocket: output events go out as JSON text frames (as on `/events`); in come
/// binary frames (raw input) or JSON text frames: `{"type":"stdin","data":..}`, `{"type":"resize",
/// "rows":..,"cols":..}`, `{"type":"signal","signal":..}`, `{"type":"close_stdin"}`. Closing the socket
/// leaves the process running; reconnect with `?offset=` to resume.
async fn websocket(
    State(manager): State<Arc<ProcessManager>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<OutputQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<impl IntoResponse> {
    let process = manager.get(&id)?;
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::BadRequest(format!("a WebSocket upgrade is needed: {rejection}"))
    })?;
    let offset = query.offset.unwrap_or(0);
    Ok(upgrade
        .max_message_size(WEBSOCKET_MESSAGE_MAX)
        .on_upgrade(move |socket| attach(socket, process, offset)))
}

async fn attach(mut socket: WebSocket, process: Arc<LiveProcess>, offset: u64) {
    let mut events = std::pin::pin!(event_stream(Arc::clone(&process), offset));
    let period = events::keep_alive();
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            _ = keep_alive.tick() => {
                if socket.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
            }
            event = events.next() => {
                let Some(event) = event else {
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                };
                if socket.send(Message::Text(event.data.to_string().into())).await.is_err() {
                    return;
                }
            }
            message = socket.recv() => {
                let outcome = match message {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(Message::Binary(data))) => process.try_write_stdin(data).await,
                    Some(Ok(Message::Text(text))) => socket_command(&process, text.as_str()).await,
                    Some(Ok(_)) => Ok(()),
                };
                if let Err(err) = outcome {
                    let error = json!({"type": "error", "message": err.to_string()});
                    if socket.send(Message::Text(error.to_string().into())).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum SocketCommand {
    Stdin { data: String },
    Resize { rows: u16, cols: u16 },
    Signal { signal: Value },
    CloseStdin,
}

/// Never waits for room in the stdin queue: the socket's one loop also carries output and pings, so
/// input a process is not reading is refused with an error frame instead.
async fn socket_command(process: &Arc<LiveProcess>, text: &str) -> ProcessResult<()> {
    let command: SocketCommand = serde_json::from_str(text)
        .map_err(|err| ApiError::BadRequest(format!("unknown message: {err}")))?;
    match command {
        SocketCommand::Stdin { data } => process.try_write_stdin(Bytes::from(data)).await,
        SocketCommand::Resize { rows, cols } => Ok(process.resize(TerminalSize { rows, cols })?),
        SocketCommand::Signal { signal } => Ok(process.signal(parse_signal(&signal)?).await?),
        SocketCommand::CloseStdin => process.close_stdin(Patience::NoWait).await,
    }
}
