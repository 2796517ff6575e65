//! The HTTP API: every capability's routes, behind bearer auth and request logging, served at `/` and
//! again under `/fastapi/` (the prefix the Python client appends, which the images serve on port 80).

pub mod auth;
pub mod body_pace;
pub mod front;
pub mod init;
mod log;
pub mod serve;
mod view_only;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde_json::Value;

use crate::api::{events, extract};
use crate::core::admission::Admission;
use crate::core::error::{ApiError, ApiResult};
use crate::core::footprint::{self, Footprint};
use crate::family::Families;
use crate::tools::{
    CallContext, CallToolResult, PROGRESS_CAPACITY, ProgressSink, ToolFuture, ToolRegistry,
};

/// JSON bodies (tool arguments, file contents sent as strings) up to this size; raw file uploads are
/// streamed and not limited by it.
pub const MAX_JSON_BODY: usize = 64 * 1024 * 1024;

/// What the router serves besides the families' own routes.
pub struct Core {
    pub tools: Arc<ToolRegistry>,
    pub families: Arc<Families>,
    /// Routes every image has whatever its families (the tool listing and call routes, `/mcp`).
    pub tool_routes: Router,
    pub auth: auth::Auth,
    /// What nginx did in front of boxd in upstream's images (deadline, desktop pages and stream).
    pub front: front::Front,
    pub body_pace: body_pace::BodyPace,
}

pub fn router(core: Core) -> Router {
    let tools = Router::new()
        .route("/tools/{tool_name}", post(call_tool))
        .route("/tools/{tool_name}/stream", post(stream_tool))
        .with_state(Arc::clone(&core.tools));
    let readiness = Arc::clone(&core.families);
    let memory_routes = Router::new()
        .route("/memory", get(memory))
        .with_state(Memory {
            families: Arc::clone(&core.families),
            readings: Admission::new("memory readings", MEMORY_READINGS, MEMORY_READING_WAIT),
        });
    let family_pages = core.families.public_routes();
    let health = Router::new().route("/healthz", get(healthz));
    let (open_health, bearer_health) = if core.families.health_without_token() {
        (health, Router::new())
    } else {
        (Router::new(), health)
    };
    let api: Router = bearer_health
        .route("/openapi.json", get(openapi))
        .route(
            "/readyz",
            get(move || async move { readyz(&readiness, true) }),
        )
        .merge(tools)
        .merge(memory_routes)
        .merge(core.tool_routes)
        .merge(core.families.routes())
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .route_layer(middleware::from_fn_with_state(
            core.auth.clone(),
            auth::require_bearer,
        ));
    // `/init` checks its own credential (the pool secret), which opens nothing else; the families'
    // public routes hold no data (pages that ask for the token themselves).
    let public = Router::new()
        .route("/livez", get(|| async { "OK" }))
        .route(
            "/readyz/status",
            get(move || async move { readyz(&core.families, false) }),
        )
        .route(
            "/init",
            post(init::init)
                .with_state(core.auth)
                .layer(DefaultBodyLimit::max(init::MAX_INIT_BODY)),
        )
        .merge(open_health)
        .merge(family_pages);
    let front = core.front;
    // One table serves both prefixes: `/fastapi/...` reaches it with the prefix taken off, and every
    // other path through the fallback. Nesting copied every route under `/fastapi`, which doubled the
    // table and made building it a third of the start-up before the first answer.
    let served = public
        .merge(api)
        .fallback(|| async { ApiError::NotFound("no such route".into()) });
    let routes = Router::new()
        .nest_service("/fastapi", served.clone())
        .merge(front.routes())
        .fallback_service(served);
    front
        .wrap(routes)
        .layer(middleware::from_fn_with_state(
            core.body_pace,
            body_pace::pace_bodies,
        ))
        .layer(middleware::from_fn(log::log_request))
}

/// `GET /readyz` (bearer): every family's state; `GET /readyz/status` (no token, for orchestrators):
/// only whether boxd is ready. Both answer 200 when every enabled family serves, else 503.
fn readyz(families: &Families, detailed: bool) -> Response {
    let (ready, details) = families.readiness();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = if detailed {
        details
    } else {
        serde_json::json!({ "ready": ready })
    };
    (status, Json(body)).into_response()
}

/// Readings of `GET /memory` at once; past it a request waits [`MEMORY_READING_WAIT`], then is answered
/// busy (each reads `/proc` for up to [`crate::core::footprint::MEASURE_BUDGET`]).
pub const MEMORY_READINGS: usize = 2;
pub const MEMORY_READING_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct Memory {
    families: Arc<Families>,
    readings: Admission,
}

/// `GET /memory` (bearer): what boxd, its guard, `boxd init` and each family's processes hold (PSS and
/// RSS), read from `/proc` off the async workers (see `core::footprint`).
async fn memory(State(memory): State<Memory>) -> ApiResult<Json<Footprint>> {
    let _reading = memory.readings.enter().await?;
    let owners = memory.families.held_processes();
    let guard = crate::core::child::guard_pid();
    tokio::task::spawn_blocking(move || footprint::measure(&owners, guard))
        .await
        .map(Json)
        .map_err(|err| ApiError::Internal(format!("the memory reading failed: {err}")))
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
    extract::ApiPath(tool_name): extract::ApiPath<String>,
    context: CallContext,
    extract::ApiJson(arguments): extract::ApiJson<Value>,
) -> ApiResult<Json<CallToolResult>> {
    Ok(Json(tools.call(&tool_name, arguments, context)?.await?))
}

/// `POST /tools/{name}/stream`: the same call, answered as an event stream (SSE or NDJSON): progress
/// events as they happen (`output` with `stream` and `data`, for tools that report progress; `dropped`
/// when the reader fell behind), then one `result` event carrying exactly the CallToolResult the
/// blocking route returns, or one `error` event. Closing the stream cancels the call, as disconnecting
/// from the blocking route does.
async fn stream_tool(
    State(tools): State<Arc<ToolRegistry>>,
    extract::ApiPath(tool_name): extract::ApiPath<String>,
    headers: axum::http::HeaderMap,
    context: CallContext,
    extract::ApiJson(arguments): extract::ApiJson<Value>,
) -> ApiResult<Response> {
    let (sink, progress) = ProgressSink::channel(PROGRESS_CAPACITY);
    let call = tools.call(&tool_name, arguments, context.with_progress(sink))?;
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
