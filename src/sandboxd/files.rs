//! The file work both APIs share (sandboxd's REST and the legacy python-runtime): a file opened for
//! streaming, a directory listed, each through `core::confine` on the path made a workspace path.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::Response;
use tokio_util::io::ReaderStream;

use super::paths::workspace_path;
use crate::api::extract::ApiPath;
use crate::core::confine::{Anchor, Workspace, WorkspacePath};
use crate::core::entry::OpenError;
use crate::core::error::{ApiError, ApiResult};
use crate::core::staging::is_staging_name;

const READ_CHUNK: usize = 256 * 1024;

/// The `{*path}` of a files route (both APIs), as the client sent it: [`ApiPath`], with both APIs'
/// wording for one that does not decode (a bad percent escape, invalid UTF-8): 400 `bad path: ...`.
/// The legacy routes take it as it is; sandboxd's REST routes take `Result<FilePath, ApiError>` and
/// answer the error with their own `{"code", "message"}` body (after reading the upload's body away).
pub struct FilePath(pub String);

impl<S> FromRequestParts<S> for FilePath
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        ApiPath::<String>::from_request_parts(parts, state)
            .await
            .map(|ApiPath(path)| FilePath(path))
            .map_err(|err| ApiError::BadRequest(format!("bad path: {err}")))
    }
}

pub async fn blocking<T, F>(work: F) -> ApiResult<T>
where
    F: FnOnce() -> ApiResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work).await?
}

/// The path held, a final symlink followed (what reads or writes go through).
pub async fn locate(
    workspace: &Arc<Workspace>,
    input: &str,
) -> ApiResult<(WorkspacePath, Anchor, String)> {
    let workspace = Arc::clone(workspace);
    let relative = workspace_path(workspace.root(), input);
    blocking(move || {
        let (target, held) = workspace.locate(&relative)?;
        Ok((target, held, relative))
    })
    .await
}

/// Where a write of `input` goes: the path held, its parent directories made, and the parent's checked
/// path the staged file is made in. A directory there is refused with `on_directory` (the two APIs
/// answer it differently).
pub async fn prepare_write_target(
    workspace: &Arc<Workspace>,
    input: &str,
    on_directory: fn(String) -> ApiError,
) -> ApiResult<(Anchor, std::path::PathBuf)> {
    let (_, mut held, _) = locate(workspace, input).await?;
    let what = input.to_owned();
    blocking(move || {
        if held.is_root() || held.metadata().is_ok_and(|meta| meta.is_dir()) {
            return Err(on_directory(what));
        }
        held.create_parents()
            .map_err(|err| ApiError::from_io(&err, &what))?;
        let parent = held
            .parent_path()
            .map_err(|err| ApiError::from_io(&err, &what))?;
        Ok((held, parent))
    })
    .await
}

/// The entry held, a final symlink as itself (what deletes or tests for existence).
pub async fn locate_entry(workspace: &Arc<Workspace>, input: &str) -> ApiResult<Anchor> {
    let workspace = Arc::clone(workspace);
    let relative = workspace_path(workspace.root(), input);
    blocking(move || workspace.locate_entry(&relative).map(|(_, held)| held)).await
}

/// What a listed entry is: a directory, or anything else (a file, as both references report it).
pub struct Listed {
    pub name: String,
    pub size: u64,
    pub is_dir: bool,
    pub modified: SystemTime,
    pub mode: u32,
}

/// A file to stream, or the entries of a directory (sorted by name; links are described by what they
/// point to, and left out when that is outside the workspace or nothing; staged uploads left out).
pub enum Found {
    File(tokio::fs::File, u64),
    Dir(Vec<Listed>),
}

/// Blocking. What `input` names; `what` is for messages.
pub fn open(workspace: &Workspace, relative: &str, held: &Anchor, what: &str) -> ApiResult<Found> {
    let meta = held
        .metadata()
        .map_err(|err| ApiError::from_io(&err, what))?;
    if meta.is_dir() {
        return list(workspace, relative, held, what).map(Found::Dir);
    }
    let file = held.open_for_reading().map_err(|err| match err {
        OpenError::NotRegular(message) => ApiError::NotFound(format!("{what}: {message}")),
        OpenError::Io(err) => ApiError::from_io(&err, what),
    })?;
    let meta = file
        .metadata()
        .map_err(|err| ApiError::from_io(&err, what))?;
    if meta.is_dir() {
        // Swapped for a directory since it was looked at: list it as what it is now.
        return list(workspace, relative, held, what).map(Found::Dir);
    }
    Ok(Found::File(tokio::fs::File::from_std(file), meta.len()))
}

fn list(
    workspace: &Workspace,
    relative: &str,
    held: &Anchor,
    what: &str,
) -> ApiResult<Vec<Listed>> {
    use std::os::unix::fs::PermissionsExt;
    let dir = held
        .open_dir()
        .map_err(|err| ApiError::from_io(&err, what))?;
    let entries = dir.entries().map_err(|err| ApiError::from_io(&err, what))?;
    let mut listed = Vec::with_capacity(entries.len());
    for entry in entries {
        if is_staging_name(&entry.name) {
            continue;
        }
        let Ok(mut meta) = dir.child_metadata(&entry.name) else {
            continue; // gone since it was listed
        };
        let name = entry.name.to_string_lossy().into_owned();
        if meta.file_type().is_symlink() {
            let through = Path::new(relative).join(&name);
            let Some(target) = workspace
                .locate(&through.to_string_lossy())
                .ok()
                .and_then(|(_, held)| held.metadata().ok())
            else {
                continue; // outside the workspace, or dangling
            };
            meta = target;
        }
        listed.push(Listed {
            name,
            size: meta.len(),
            is_dir: meta.is_dir(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            mode: meta.permissions().mode() & 0o7777,
        });
    }
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(listed)
}

/// A file's bytes, streamed.
pub fn file_response(file: tokio::fs::File, size: u64) -> ApiResult<Response> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, size)
        .body(Body::from_stream(ReaderStream::with_capacity(
            tokio::io::AsyncReadExt::take(file, size),
            READ_CHUNK,
        )))
        .map_err(|err| ApiError::Internal(err.to_string()))
}
