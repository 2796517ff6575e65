//! The legacy python-runtime API (agent-sandbox's `examples/python-runtime-sandbox`), which the SDK
//! speaks when no sandboxd address is configured: `POST /execute`, `POST /upload`, `GET
//! /download/{path}`, `GET /list/{path}`, `GET /exists/{path}`. On boxd's own port, behind its bearer
//! token like every route (the SDK sends it as an `extra_headers` entry), at `/` and under `/fastapi`.
//! Success bodies have the python-runtime's shapes; errors are boxd's (`{"detail"}`), the status being
//! what the SDK checks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::{self, FilePath, Found, blocking};
use super::run::run_to_end;
use crate::api::extract::{ApiJson, ApiMultipart};
use crate::core::admission::Admission;
use crate::core::confine::Workspace;
use crate::core::error::{ApiError, ApiResult};
use crate::core::staging;

/// What a command killed at its timeout exits with, as `timeout(1)` and the SDK report it.
const TIMED_OUT_EXIT_CODE: i32 = 124;

#[derive(Clone)]
struct Legacy {
    workspace: Arc<Workspace>,
    /// For a command whose request names no timeout (`--sandboxd-exec-timeout`).
    default_timeout: Duration,
    /// The gate one-shot commands share with the shell family.
    commands: Admission,
}

impl axum::extract::FromRef<Legacy> for Arc<Workspace> {
    fn from_ref(legacy: &Legacy) -> Self {
        Arc::clone(&legacy.workspace)
    }
}

pub fn routes(workspace: Arc<Workspace>, default_timeout: Duration, commands: Admission) -> Router {
    Router::new()
        .route("/execute", post(execute))
        .route("/upload", post(upload).layer(DefaultBodyLimit::disable()))
        .route("/download/{*path}", get(download))
        .route("/list/", get(list_root))
        .route("/list/{*path}", get(list))
        .route("/exists/{*path}", get(exists))
        .with_state(Legacy {
            workspace,
            default_timeout,
            commands,
        })
}

#[derive(Deserialize)]
struct ExecuteRequest {
    command: String,
    /// Seconds the command may run; the python-runtime's default when absent.
    #[serde(default)]
    timeout_seconds: Option<f64>,
}

/// `POST /execute`: the command under `/bin/sh -c` in the workspace (the shell string the SDK sends),
/// its group killed at the timeout (`timed_out`, exit code 124).
async fn execute(
    State(legacy): State<Legacy>,
    ApiJson(request): ApiJson<ExecuteRequest>,
) -> ApiResult<Json<Value>> {
    let workspace = legacy.workspace;
    let timeout = crate::tools::timeout_argument(request.timeout_seconds, legacy.default_timeout)?;
    let deadline = tokio::time::Instant::now().checked_add(timeout);
    let argv = ["/bin/sh".to_owned(), "-c".to_owned(), request.command];
    let _slot = legacy.commands.enter().await?;
    let finished = run_to_end(&argv, workspace.root(), &BTreeMap::new(), deadline).await?;
    let mut stderr = String::from_utf8_lossy(&finished.stderr).into_owned();
    let exit_code = if finished.timed_out {
        stderr.push_str(&format!(
            "Command timed out after {} seconds\n",
            timeout.as_secs_f64()
        ));
        TIMED_OUT_EXIT_CODE
    } else {
        finished.exit_code
    };
    Ok(Json(json!({
        "stdout": String::from_utf8_lossy(&finished.stdout),
        "stderr": stderr,
        "exit_code": exit_code,
        "timed_out": finished.timed_out,
    })))
}

/// `POST /upload`: the multipart part `file`, written atomically where its filename says (relative to
/// the workspace; parents created).
async fn upload(
    State(workspace): State<Arc<Workspace>>,
    ApiMultipart(mut multipart): ApiMultipart,
) -> Response {
    let placed = async {
        while let Some(part) = multipart
            .next_field()
            .await
            .map_err(|err| ApiError::BadRequest(format!("malformed multipart body: {err}")))?
        {
            if part.name() != Some("file") {
                continue;
            }
            let name = part
                .file_name()
                .map(str::to_owned)
                .filter(|name| !name.trim().is_empty())
                .ok_or_else(|| ApiError::BadRequest("the file part has no filename".into()))?;
            let (held, parent) = files::prepare_write_target(&workspace, &name, |what| {
                ApiError::Conflict(format!("path exists and is a directory: {what}"))
            })
            .await?;
            let staged = staging::stage(&parent, part, &name).await?;
            let what = name.clone();
            blocking(move || {
                held.entry_path()
                    .and_then(|entry| staged.persist(&entry))
                    .map_err(|err| ApiError::from_io(&err, &what))
            })
            .await?;
            return Ok(name);
        }
        Err(ApiError::BadRequest(
            "multipart body is missing the required \"file\" part".into(),
        ))
    }
    .await;
    match placed {
        Ok(name) => Json(json!({"message": format!("File '{name}' uploaded successfully.")}))
            .into_response(),
        // The rest of the body may be unread: no client may reuse this connection.
        Err(err) => crate::api::closing_connection(err.into_response()),
    }
}

/// `GET /download/{path}`: a file's bytes; anything else is 404.
async fn download(
    State(workspace): State<Arc<Workspace>>,
    FilePath(input): FilePath,
) -> ApiResult<Response> {
    match found(&workspace, &input).await? {
        Found::File(file, size) => files::file_response(file, size),
        Found::Dir(_) => Err(ApiError::NotFound(format!("not a file: {input}"))),
    }
}

async fn list_root(State(workspace): State<Arc<Workspace>>) -> ApiResult<Json<Vec<Value>>> {
    listing(&workspace, "").await
}

async fn list(
    State(workspace): State<Arc<Workspace>>,
    FilePath(input): FilePath,
) -> ApiResult<Json<Vec<Value>>> {
    listing(&workspace, &input).await
}

/// `GET /list/{path}`: `[{"name", "size", "type": "file"|"directory", "mod_time"}]` (seconds since the
/// epoch); not a directory → 404.
async fn listing(workspace: &Arc<Workspace>, input: &str) -> ApiResult<Json<Vec<Value>>> {
    match found(workspace, input).await? {
        Found::Dir(entries) => Ok(Json(
            entries
                .into_iter()
                .map(|entry| {
                    let mod_time = entry
                        .modified
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|since| since.as_secs_f64())
                        .unwrap_or(0.0);
                    json!({
                        "name": entry.name,
                        "size": entry.size,
                        "type": if entry.is_dir { "directory" } else { "file" },
                        "mod_time": mod_time,
                    })
                })
                .collect(),
        )),
        Found::File(..) => Err(ApiError::NotFound(format!("not a directory: {input}"))),
    }
}

async fn found(workspace: &Arc<Workspace>, input: &str) -> ApiResult<Found> {
    let (_, held, relative) = files::locate(workspace, input).await?;
    let workspace = Arc::clone(workspace);
    let what = input.to_owned();
    blocking(move || files::open(&workspace, &relative, &held, &what)).await
}

/// `GET /exists/{path}`: `{"path", "exists"}`; a path leading outside is 403, as everywhere.
async fn exists(
    State(workspace): State<Arc<Workspace>>,
    FilePath(input): FilePath,
) -> ApiResult<Json<Value>> {
    let held = files::locate_entry(&workspace, &input).await?;
    let exists = blocking(move || Ok(held.exists())).await?;
    Ok(Json(json!({"path": input, "exists": exists})))
}
