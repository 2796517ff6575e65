//! sandboxd's Filesystem & Runtime REST API (`spec/filesystem/v1/filesystem.yaml` of agent-sandbox) on
//! its own listener: `/v1/files/{path}` (GET a file's bytes or a directory's listing, HEAD, PUT, DELETE),
//! `/v1/health`, `/v1/metadata`. No token: the SDK sends none to it, so it listens on the container's
//! loopback unless told otherwise (README, "Kubernetes agent-sandbox clients"). Errors are
//! `{"code", "message"}` with the status every route gives the error (`api::response`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::files::{self, FilePath, Found, Listed, blocking};
use crate::core::confine::Workspace;
use crate::core::error::ApiError;
use crate::core::staging;

/// Environment variables `/v1/metadata` may show: sandboxd's default prefix.
const METADATA_PREFIX: &str = "SANDBOX_";
/// Names never shown whatever their prefix (sandboxd's list): they look like credentials.
const SECRET_MARKERS: &[&str] = &[
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY", "AUTH", "BEARER", "PRIVATE", "CERT",
];

pub struct Rest {
    pub workspace: Arc<Workspace>,
    pub started: Instant,
    /// Set when boxd stops: `/v1/health` answers 503 from then on.
    pub stopping: Arc<AtomicBool>,
    /// Read once at start: boxd's environment does not change.
    pub metadata: BTreeMap<String, String>,
}

/// The allowlisted, non-secret-looking `SANDBOX_*` variables of `environment`.
pub fn metadata_env(
    environment: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    environment
        .filter(|(name, _)| name.starts_with(METADATA_PREFIX))
        .filter(|(name, _)| {
            let upper = name.to_ascii_uppercase();
            !SECRET_MARKERS.iter().any(|marker| upper.contains(marker))
        })
        .collect()
}

/// An [`ApiError`] as sandboxd's REST API words it.
pub struct RestError(ApiError);

impl From<ApiError> for RestError {
    fn from(err: ApiError) -> Self {
        RestError(err)
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), detail = %self.0, "sandboxd request failed");
        }
        (
            status,
            Json(json!({"code": code_of(&self.0), "message": self.0.to_string()})),
        )
            .into_response()
    }
}

type RestResult<T> = Result<T, RestError>;

/// The error's name in the `{"code", "message"}` bodies: gRPC's canonical code names, and `CONFLICT` for
/// a 409 as sandboxd says it.
fn code_of(err: &ApiError) -> &'static str {
    match err {
        ApiError::BadRequest(_) | ApiError::Unprocessable(_) => "INVALID_ARGUMENT",
        ApiError::Forbidden(_) => "PERMISSION_DENIED",
        ApiError::NotFound(_) => "NOT_FOUND",
        ApiError::Conflict(_) => "CONFLICT",
        ApiError::RangeNotSatisfiable(_) => "OUT_OF_RANGE",
        ApiError::PayloadTooLarge(_)
        | ApiError::InsufficientStorage(_)
        | ApiError::TooManyRequests(_)
        | ApiError::Busy { .. } => "RESOURCE_EXHAUSTED",
        ApiError::BadGateway(_) | ApiError::Unavailable { .. } => "UNAVAILABLE",
        ApiError::GatewayTimeout(_) => "DEADLINE_EXCEEDED",
        ApiError::Internal(_) => "INTERNAL",
    }
}

pub fn router(rest: Arc<Rest>) -> Router {
    Router::new()
        .route(
            "/v1/files/",
            get(read_root).put(write_root).delete(remove_root),
        )
        .route("/v1/files/{*path}", get(read).put(write).delete(remove))
        .route("/v1/health", get(health))
        .route("/v1/metadata", get(metadata))
        .fallback(|| async { RestError(ApiError::NotFound("no such route".into())) })
        // Uploads stream to disk (multipart ones too): no body limit.
        .layer(DefaultBodyLimit::disable())
        .with_state(rest)
}

#[derive(Serialize)]
struct FileEntry {
    name: String,
    size: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    modified_at: String,
    mode: String,
}

impl From<Listed> for FileEntry {
    fn from(listed: Listed) -> Self {
        FileEntry {
            name: listed.name,
            size: listed.size,
            kind: if listed.is_dir { "directory" } else { "file" },
            modified_at: chrono::DateTime::<chrono::Utc>::from(listed.modified)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            mode: format!("{:04o}", listed.mode & 0o777),
        }
    }
}

async fn read_root(State(rest): State<Arc<Rest>>) -> RestResult<Response> {
    serve_entry(rest, String::new()).await
}

async fn read(
    State(rest): State<Arc<Rest>>,
    path: Result<FilePath, ApiError>,
) -> RestResult<Response> {
    let FilePath(input) = path?;
    serve_entry(rest, input).await
}

/// GET (and HEAD, which axum answers from GET without the body): a file's bytes, or the listing of a
/// directory.
async fn serve_entry(rest: Arc<Rest>, input: String) -> RestResult<Response> {
    let (_, held, relative) = files::locate(&rest.workspace, &input).await?;
    let workspace = Arc::clone(&rest.workspace);
    let what = input.clone();
    let found = blocking(move || files::open(&workspace, &relative, &held, &what)).await?;
    match found {
        Found::File(file, size) => Ok(files::file_response(file, size)?),
        Found::Dir(entries) => {
            let shown = format!("/{}", input.trim_start_matches('/'));
            let entries: Vec<FileEntry> = entries.into_iter().map(FileEntry::from).collect();
            Ok(Json(json!({"path": shown, "entries": entries})).into_response())
        }
    }
}

#[derive(Deserialize)]
struct WriteQuery {
    #[serde(default)]
    mode: Option<String>,
}

/// The `mode` query: `^0[0-7]{3}$`, 0644 when absent.
fn parse_mode(mode: Option<&str>) -> Result<u32, ApiError> {
    let Some(mode) = mode else {
        return Ok(0o644);
    };
    let digits = mode
        .strip_prefix('0')
        .filter(|rest| rest.len() == 3 && rest.bytes().all(|digit| (b'0'..=b'7').contains(&digit)));
    digits
        .and_then(|digits| u32::from_str_radix(digits, 8).ok())
        .ok_or_else(|| ApiError::BadRequest(format!("mode {mode:?} must match ^0[0-7]{{3}}$")))
}

async fn write_root(request: Request) -> Response {
    let refused = RestError(ApiError::BadRequest("target path is a directory".into()));
    drain_or_close(refused.into_response(), request.into_body()).await
}

async fn write(
    State(rest): State<Arc<Rest>>,
    path: Result<FilePath, ApiError>,
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
    request: Request,
) -> Response {
    let prepared = async {
        let FilePath(input) = path?;
        let Query(query) =
            query.map_err(|rejection| ApiError::BadRequest(format!("bad query: {rejection}")))?;
        let mode = parse_mode(query.mode.as_deref())?;
        let (held, parent) = files::prepare_write_target(&rest.workspace, &input, |what| {
            ApiError::BadRequest(format!("target path is a directory: {what}"))
        })
        .await?;
        Ok::<_, ApiError>((input, mode, held, parent))
    }
    .await;
    let (input, mode, held, parent) = match prepared {
        Ok(prepared) => prepared,
        Err(err) => {
            let response = RestError(err).into_response();
            let (_, body) = request.into_parts();
            return drain_or_close(response, body).await;
        }
    };
    let staged = match stage_body(&parent, request, &input).await {
        Ok(staged) => staged,
        // The rest of the body is unread: no client may reuse this connection.
        Err(err) => return crate::api::closing_connection(RestError(err).into_response()),
    };
    let placed = blocking(move || {
        let mut staged = staged;
        staged
            .set_mode(mode)
            .and_then(|()| held.entry_path())
            .and_then(|entry| staged.persist(&entry))
            .map_err(|err| ApiError::from_io(&err, &input))
    })
    .await;
    match placed {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => RestError(err).into_response(),
    }
}

/// The bytes to write: the raw body, or the `file` part of a `multipart/form-data` one.
async fn stage_body(
    parent: &std::path::Path,
    request: Request,
    what: &str,
) -> Result<staging::StagedFile, ApiError> {
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        });
    if !multipart {
        return staging::stage(parent, request.into_body().into_data_stream(), what).await;
    }
    let mut parts = Multipart::from_request(request, &())
        .await
        .map_err(|rejection| ApiError::BadRequest(format!("bad multipart body: {rejection}")))?;
    while let Some(part) = parts
        .next_field()
        .await
        .map_err(|err| ApiError::BadRequest(format!("bad multipart body: {err}")))?
    {
        if part.name() == Some("file") {
            return staging::stage(parent, part, what).await;
        }
    }
    Err(ApiError::BadRequest(
        "multipart body is missing the required \"file\" part".into(),
    ))
}

/// An answer given before the body was read: a small body is read away so the connection stays
/// usable, a large one is left and the connection closed (`api::reject_unread_body`'s policy, with
/// sandboxd's error body).
async fn drain_or_close(response: Response, body: axum::body::Body) -> Response {
    const DRAIN_LIMIT: usize = 1024 * 1024;
    if axum::body::to_bytes(body, DRAIN_LIMIT).await.is_ok() {
        response
    } else {
        crate::api::closing_connection(response)
    }
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    recursive: Option<String>,
}

/// Go's `strconv.ParseBool`, which sandboxd reads `recursive` with.
fn parse_recursive(recursive: Option<&str>) -> Result<bool, ApiError> {
    match recursive {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "recursive {other:?} must be a boolean"
        ))),
    }
}

async fn remove_root(
    State(rest): State<Arc<Rest>>,
    query: Result<Query<RemoveQuery>, axum::extract::rejection::QueryRejection>,
) -> RestResult<StatusCode> {
    remove_entry(rest, String::new(), query).await
}

async fn remove(
    State(rest): State<Arc<Rest>>,
    path: Result<FilePath, ApiError>,
    query: Result<Query<RemoveQuery>, axum::extract::rejection::QueryRejection>,
) -> RestResult<StatusCode> {
    let FilePath(input) = path?;
    remove_entry(rest, input, query).await
}

/// DELETE: a file or an empty directory, a whole tree with `recursive=true`; the root itself is only
/// emptied (it may be a volume's mount point), and only with `recursive=true`.
async fn remove_entry(
    rest: Arc<Rest>,
    input: String,
    query: Result<Query<RemoveQuery>, axum::extract::rejection::QueryRejection>,
) -> RestResult<StatusCode> {
    let Query(query) =
        query.map_err(|rejection| ApiError::BadRequest(format!("bad query: {rejection}")))?;
    let recursive = parse_recursive(query.recursive.as_deref())?;
    let held = files::locate_entry(&rest.workspace, &input).await?;
    blocking(move || {
        if !held.exists() {
            return Err(ApiError::NotFound(format!(
                "{input}: path does not exist within the sandbox"
            )));
        }
        let removed = match (held.is_root(), recursive) {
            (true, false) => {
                return Err(ApiError::Conflict(
                    "cannot delete the sandbox root; pass recursive=true to clear its contents"
                        .into(),
                ));
            }
            (true, true) => held.clear(),
            (false, true) => held.remove(),
            (false, false) => held.remove_one(),
        };
        match removed {
            Err(err) if err.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                Err(ApiError::Conflict(format!(
                    "{input}: directory is not empty; pass recursive=true to remove it"
                )))
            }
            other => other.map_err(|err| ApiError::from_io(&err, &input)),
        }
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn health(State(rest): State<Arc<Rest>>) -> RestResult<Json<serde_json::Value>> {
    if rest.stopping.load(Ordering::Relaxed) {
        return Err(RestError(ApiError::Unavailable {
            message: "boxd is stopping".into(),
            retry_after_seconds: 1,
        }));
    }
    Ok(Json(json!({
        "status": "ok",
        "uptime_seconds": rest.started.elapsed().as_secs(),
    })))
}

async fn metadata(State(rest): State<Arc<Rest>>) -> Json<serde_json::Value> {
    Json(json!({ "env": rest.metadata }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_recursive_flags_and_metadata() {
        assert_eq!(parse_mode(None).ok(), Some(0o644));
        assert_eq!(parse_mode(Some("0755")).ok(), Some(0o755));
        for bad in ["755", "0855", "00644", "0x64", ""] {
            assert!(parse_mode(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse_recursive(Some("True")).ok(), Some(true));
        assert_eq!(parse_recursive(None).ok(), Some(false));
        assert!(parse_recursive(Some("yes")).is_err());
        let env = metadata_env(
            [
                ("SANDBOX_ID", "a"),
                ("SANDBOX_API_TOKEN", "b"),
                ("SANDBOX_ssh_key", "c"),
                ("HOME", "d"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        assert_eq!(env.keys().collect::<Vec<_>>(), ["SANDBOX_ID"]);
    }
}
