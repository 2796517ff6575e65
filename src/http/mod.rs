//! The HTTP API: every capability's routes, behind bearer auth and request logging, served at `/` and
//! again under `/fastapi/` (the prefix the Python client appends, which nginx strips in images).

pub mod auth;
pub mod events;
pub mod extract;
mod log;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRef, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::git::GitWatcher;
use crate::mcp::McpHost;
use crate::processes::ProcessManager;
use crate::tools::{CallToolResult, ToolFuture, ToolRegistry};
use crate::watch::WatchHub;
use crate::workspace::Workspace;
use crate::{git, mcp, processes, watch, workspace};

/// JSON bodies (tool arguments, file contents sent as strings) up to this size; raw file uploads are
/// streamed and not limited by it.
const MAX_JSON_BODY: usize = 64 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub tools: Arc<ToolRegistry>,
    pub workspace: Arc<Workspace>,
    pub git: Arc<GitWatcher>,
    pub mcp: Arc<McpHost>,
    pub processes: Arc<ProcessManager>,
    pub watches: Arc<WatchHub>,
    pub token: auth::Token,
}

impl FromRef<AppState> for Arc<WatchHub> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.watches)
    }
}

impl FromRef<AppState> for Arc<ProcessManager> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.processes)
    }
}

impl FromRef<AppState> for Arc<McpHost> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.mcp)
    }
}

impl FromRef<AppState> for Arc<Workspace> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.workspace)
    }
}

impl FromRef<AppState> for Arc<GitWatcher> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.git)
    }
}

impl FromRef<AppState> for Arc<ToolRegistry> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.tools)
    }
}

pub fn router(state: AppState) -> Router {
    let api: Router = Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .route("/tools/{tool_name}", post(call_tool))
        .route("/tools/{tool_name}/stream", post(stream_tool))
        .merge(workspace::routes())
        .merge(git::routes())
        .merge(processes::routes())
        .merge(watch::routes())
        .merge(mcp::routes(Arc::clone(&state.tools)))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .route_layer(middleware::from_fn_with_state(
            state.token.clone(),
            auth::require_bearer,
        ))
        .with_state(state);
    Router::new()
        .route("/livez", get(|| async { "OK" }))
        .merge(api.clone())
        .nest("/fastapi", api)
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(middleware::from_fn(log::log_request))
}

/// Answers `err` to a request whose body was not read. A small body is drained so the client's
/// keep-alive connection stays usable (otherwise the server drops it and a client reusing it sees
/// "connection closed without response"); a large one is left unread and the connection is closed
/// explicitly, so no client reuses it.
pub async fn reject_unread_body(err: ApiError, body: Body) -> Response {
    const DRAIN_LIMIT: usize = 1024 * 1024;
    let drained = axum::body::to_bytes(body, DRAIN_LIMIT).await.is_ok();
    let mut response = err.into_response();
    if !drained {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn healthz() -> impl IntoResponse {
    "OK"
}

/// The OpenAPI description of every route (`docs/openapi.json`, compiled in).
async fn openapi() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("../../docs/openapi.json"),
    )
}

/// `POST /tools/{name}`: the body is the tool's arguments. Serves `run_shell_command`,
/// `run_ipython_cell` and any other registered tool by name.
async fn call_tool(
    State(tools): State<Arc<ToolRegistry>>,
    Path(tool_name): Path<String>,
    extract::ApiJson(arguments): extract::ApiJson<Value>,
) -> ApiResult<Json<CallToolResult>> {
    if !arguments.is_object() {
        return Err(ApiError::Unprocessable(
            "the body must be a JSON object".into(),
        ));
    }
    Ok(Json(tools.call(&tool_name, arguments).await?))
}

/// `POST /tools/{name}/stream`: the same call, answered as an event stream (SSE or NDJSON): progress
/// events as they happen (`output` with `stream` and `data`, for tools that report progress), then one
/// `result` event carrying exactly the CallToolResult the blocking route returns, or one `error` event.
/// Closing the stream cancels the call, as disconnecting from the blocking route does.
async fn stream_tool(
    State(tools): State<Arc<ToolRegistry>>,
    Path(tool_name): Path<String>,
    headers: axum::http::HeaderMap,
    extract::ApiJson(arguments): extract::ApiJson<Value>,
) -> ApiResult<Response> {
    if !arguments.is_object() {
        return Err(ApiError::Unprocessable(
            "the body must be a JSON object".into(),
        ));
    }
    let (sink, progress) = tokio::sync::mpsc::channel(64);
    let call = tools.call_streaming(&tool_name, arguments, sink)?;
    Ok(events::respond(
        events::EventFormat::negotiate(&headers),
        call_events(call, progress),
    ))
}

fn call_events(
    call: ToolFuture,
    progress: tokio::sync::mpsc::Receiver<Value>,
) -> impl futures_util::Stream<Item = events::Event> + Send {
    use std::collections::VecDeque;
    enum Stage {
        Running(ToolFuture, tokio::sync::mpsc::Receiver<Value>),
        Finishing(VecDeque<Value>),
    }
    futures_util::stream::unfold(Stage::Running(call, progress), |stage| async move {
        match stage {
            Stage::Running(mut call, mut progress) => {
                tokio::select! {
                    biased;
                    Some(event) = progress.recv() => {
                        Some((events::Event::new(event), Stage::Running(call, progress)))
                    }
                    outcome = &mut call => {
                        let mut rest = VecDeque::new();
                        while let Ok(event) = progress.try_recv() {
                            rest.push_back(event);
                        }
                        rest.push_back(match outcome {
                            Ok(result) => serde_json::json!({"type": "result", "result": result}),
                            Err(err) => serde_json::json!({
                                "type": "error",
                                "status": err.status().as_u16(),
                                "detail": err.to_string(),
                            }),
                        });
                        let first = rest.pop_front()?;
                        Some((events::Event::new(first), Stage::Finishing(rest)))
                    }
                }
            }
            Stage::Finishing(mut rest) => rest
                .pop_front()
                .map(|event| (events::Event::new(event), Stage::Finishing(rest))),
        }
    })
}
