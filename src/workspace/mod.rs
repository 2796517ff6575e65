//! The `/workspace/*` file API: read (streamed, with `Range`), atomic write, batch upload, list, exists,
//! delete, move, mkdir, all confined to the workspace by [`Workspace`]. Each acts on the [`Anchor`] its
//! path was checked into (descriptors, `*at` calls), never on the path's name again.

mod family;
pub use family::{family, limits};

mod range;

use crate::core::confine::{Anchor, Dir, Workspace, WorkspacePath};
use crate::core::entry::{EntryInfo, OpenError};
use crate::core::staging as upload;

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use crate::api::extract::{ApiJson, ApiMultipart, ApiQuery};
use crate::core::error::{ApiError, ApiResult};
use upload::{StagedFile, is_staging_name};

/// Files one batch upload takes, at most: each holds an open staged file (a descriptor) until the
/// whole body has arrived, so an uncapped count could spend every descriptor boxd has.
const MAX_BATCH_FILES: usize = 1_000;
const READ_CHUNK: usize = 256 * 1024;
/// All `paths` fields of one batch upload together: far more than any real list of target paths.
const MAX_BATCH_PATHS_BYTES: usize = 1024 * 1024;

pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Workspace>: axum::extract::FromRef<S>,
{
    Router::new()
        .route("/workspace/file", get(read_file).put(write_file))
        .route(
            "/workspace/files:batch",
            post(batch_write).layer(DefaultBodyLimit::disable()),
        )
        .route("/workspace/list", get(list))
        .route("/workspace/exists", get(exists))
        .route("/workspace/entry", delete(remove))
        .route("/workspace/move", post(move_entry))
        .route("/workspace/mkdir", post(mkdir))
}

/// Runs filesystem work off the async runtime.
async fn blocking<T, F>(work: F) -> ApiResult<T>
where
    F: FnOnce() -> ApiResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work).await?
}

/// The path checked and held, a final symlink followed (read, write, list, mkdir).
async fn locate(workspace: &Arc<Workspace>, input: &str) -> ApiResult<(WorkspacePath, Anchor)> {
    let workspace = Arc::clone(workspace);
    let input = input.to_owned();
    blocking(move || workspace.locate(&input)).await
}

/// The entry a path names, held, a final symlink being the link itself (delete, move, exists).
async fn locate_entry(
    workspace: &Arc<Workspace>,
    input: &str,
) -> ApiResult<(WorkspacePath, Anchor)> {
    let workspace = Arc::clone(workspace);
    let input = input.to_owned();
    blocking(move || workspace.locate_entry(&input)).await
}

/// Entry info of what `held` names now (`lstat`).
fn entry_info(target: &WorkspacePath, held: &Anchor, what: &str) -> ApiResult<EntryInfo> {
    held.metadata()
        .map(|meta| EntryInfo::from_metadata(&target.shown, &meta))
        .map_err(|err| ApiError::from_io(&err, what))
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

#[derive(Deserialize)]
struct ReadQuery {
    path: String,
    #[serde(default)]
    format: Option<String>,
}

async fn read_file(
    State(workspace): State<Arc<Workspace>>,
    ApiQuery(query): ApiQuery<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let content_type = match query.format.as_deref() {
        None | Some("text") => "text/plain; charset=utf-8",
        Some("bytes") => "application/octet-stream",
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "format must be text or bytes, got {other:?}"
            )));
        }
    };
    let (_, held) = locate(&workspace, &query.path).await?;
    let (mut file, size) = {
        let what = query.path.clone();
        blocking(move || {
            let file = held.open_for_reading().map_err(|err| match err {
                OpenError::NotRegular(message) => ApiError::NotFound(format!("{what}: {message}")),
                OpenError::Io(err) => ApiError::from_io(&err, &what),
            })?;
            let meta = file
                .metadata()
                .map_err(|err| ApiError::from_io(&err, &what))?;
            if !meta.is_file() {
                return Err(ApiError::NotFound(format!("not a file: {what}")));
            }
            Ok((tokio::fs::File::from_std(file), meta.len()))
        })
        .await?
    };
    let range = match headers
        .get(header::RANGE)
        .and_then(|value| value.to_str().ok())
        .map(|value| range::parse(value, size))
        .transpose()
    {
        Ok(range) => range.flatten(),
        Err(err) => {
            // RFC 9110 §15.5.17: a 416 names the current length, so the client can ask again.
            let mut response = err.into_response();
            if let Ok(value) = header::HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(response);
        }
    };

    let mut response = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::ACCEPT_RANGES, "bytes");
    let (start, length) = match range {
        Some(byte_range) => {
            response = response.status(StatusCode::PARTIAL_CONTENT).header(
                header::CONTENT_RANGE,
                format!(
                    "bytes {}-{}/{size}",
                    byte_range.start, byte_range.end_inclusive
                ),
            );
            (byte_range.start, byte_range.len())
        }
        None => (0, size),
    };
    if start > 0 {
        file.seek(std::io::SeekFrom::Start(start))
            .await
            .map_err(|err| ApiError::from_io(&err, &query.path))?;
    }
    let body = Body::from_stream(ReaderStream::with_capacity(file.take(length), READ_CHUNK));
    response
        .header(header::CONTENT_LENGTH, length)
        .body(body)
        .map_err(|err| ApiError::Internal(err.to_string()))
}

/// Checks that `held` can become a file, without touching anything.
fn check_file_target(held: &Anchor, what: &str) -> ApiResult<()> {
    if held.is_root() {
        return Err(ApiError::Conflict(format!(
            "{what} is the workspace directory"
        )));
    }
    if let Ok(meta) = held.metadata()
        && meta.is_dir()
    {
        return Err(ApiError::Conflict(format!(
            "path exists and is a directory: {what}"
        )));
    }
    Ok(())
}

/// Checks that `held` can become a file and creates its parent directories.
fn prepare_file_target(held: &mut Anchor, what: &str) -> ApiResult<()> {
    check_file_target(held, what)?;
    held.create_parents()
        .map_err(|err| ApiError::from_io(&err, what))
}

/// Puts staged content in place of `held`'s entry. The staged file must be dropped (by this) while
/// `held` lives: its path may be under `held`'s descriptor.
fn place(
    staged: upload::StagedFile,
    target: &WorkspacePath,
    held: &Anchor,
    what: &str,
) -> ApiResult<EntryInfo> {
    held.entry_path()
        .and_then(|entry| staged.persist(&entry))
        .map_err(|err| ApiError::from_io(&err, what))?;
    entry_info(target, held, what)
}

async fn write_file(
    State(workspace): State<Arc<Workspace>>,
    query: Result<ApiQuery<PathQuery>, ApiError>,
    body: Body,
) -> Response {
    let prepared = async {
        let ApiQuery(query) = query?;
        let (target, mut held) = locate(&workspace, &query.path).await?;
        let what = query.path.clone();
        let (held, parent) = blocking(move || {
            prepare_file_target(&mut held, &what)?;
            let parent = held
                .parent_path()
                .map_err(|err| ApiError::from_io(&err, &what))?;
            Ok((held, parent))
        })
        .await?;
        Ok::<_, ApiError>((query, target, held, parent))
    }
    .await;
    let (query, target, held, parent) = match prepared {
        Ok(prepared) => prepared,
        Err(err) => return crate::api::reject_unread_body(err, body).await,
    };
    // `held` outlives the staged file: `parent` is a path through its descriptor.
    let staged = match upload::stage(&parent, body.into_data_stream(), &query.path).await {
        Ok(staged) => staged,
        // A write that failed mid-body (a full disk) left the rest of it unread.
        Err(err) => return crate::api::closing_connection(err.into_response()),
    };
    blocking(move || place(staged, &target, &held, &query.path).map(Json))
        .await
        .into_response()
}

/// Multipart `files` parts with optional `paths` fields (same count, else each part's filename). Each part
/// streams to an unnamed staging file; nothing is placed (no directory even created) until every part
/// arrived and every target is checked.
async fn batch_write(
    State(workspace): State<Arc<Workspace>>,
    ApiMultipart(multipart): ApiMultipart,
) -> Response {
    let (paths, files) = match receive_parts(workspace.real_root(), multipart).await {
        Ok(parts) => parts,
        // The rest of the body is unread: no client may reuse this connection.
        Err(err) => return crate::api::closing_connection(err.into_response()),
    };
    place_parts(workspace, paths, files).await.into_response()
}

type Parts = (Vec<String>, Vec<(Option<String>, StagedFile)>);

async fn receive_parts(
    staging_dir: &std::path::Path,
    mut multipart: Multipart,
) -> ApiResult<Parts> {
    let mut paths: Vec<String> = Vec::new();
    let mut files: Vec<(Option<String>, StagedFile)> = Vec::new();
    let mut paths_budget = MAX_BATCH_PATHS_BYTES;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|err| ApiError::BadRequest(format!("malformed multipart body: {err}")))?
    {
        match field.name() {
            Some("paths") => {
                let path = read_capped_field(field, &mut paths_budget).await?;
                paths.push(path);
            }
            Some("files") => {
                if files.len() >= MAX_BATCH_FILES {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "a batch upload takes at most {MAX_BATCH_FILES} files; send the rest in \
                         another request"
                    )));
                }
                let filename = field.file_name().map(str::to_owned);
                let what = filename.clone().unwrap_or_else(|| "uploaded part".into());
                let staged = upload::stage(staging_dir, field, &what).await?;
                files.push((filename, staged));
            }
            _ => {}
        }
    }
    Ok((paths, files))
}

async fn place_parts(
    workspace: Arc<Workspace>,
    paths: Vec<String>,
    files: Vec<(Option<String>, StagedFile)>,
) -> ApiResult<Json<Vec<EntryInfo>>> {
    if !paths.is_empty() && paths.len() != files.len() {
        return Err(ApiError::BadRequest(format!(
            "`paths` length ({}) must match `files` length ({})",
            paths.len(),
            files.len()
        )));
    }
    blocking(move || {
        let mut checked = Vec::with_capacity(files.len());
        for (index, (filename, staged)) in files.into_iter().enumerate() {
            let requested = paths
                .get(index)
                .cloned()
                .or(filename)
                .filter(|path| !path.is_empty())
                .ok_or_else(|| ApiError::BadRequest("missing target path for a part".into()))?;
            let (target, held) = workspace.locate(&requested)?;
            check_file_target(&held, &requested)?;
            checked.push((requested, target, held, staged));
        }
        checked
            .into_iter()
            .map(|(requested, target, mut held, staged)| {
                prepare_file_target(&mut held, &requested)?;
                place(staged, &target, &held, &requested)
            })
            .collect::<ApiResult<Vec<_>>>()
            .map(Json)
    })
    .await
}

/// A text field read whole, its bytes counted against `budget` as they arrive: a huge `paths` field is
/// refused without being held in memory.
async fn read_capped_field(
    mut field: axum::extract::multipart::Field<'_>,
    budget: &mut usize,
) -> ApiResult<String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|err| ApiError::BadRequest(format!("malformed paths field: {err}")))?
    {
        *budget = budget.checked_sub(chunk.len()).ok_or_else(|| {
            ApiError::PayloadTooLarge(format!(
                "`paths` fields exceed {MAX_BATCH_PATHS_BYTES} bytes in total"
            ))
        })?;
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes)
        .map_err(|_| ApiError::BadRequest("a `paths` field is not UTF-8".into()))
}

#[derive(Deserialize)]
struct ListQuery {
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

/// One hop to the blocking pool for the whole listing (locate, check, walk, serialise), and the JSON
/// written as the walk goes: what `Json<Vec<EntryInfo>>` would write, without a record per entry.
async fn list(
    State(workspace): State<Arc<Workspace>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let depth = query.depth.unwrap_or(1);
    if depth == 0 {
        return Err(ApiError::BadRequest("depth must be at least 1".into()));
    }
    let json = blocking(move || {
        let (target, held) = workspace.locate(&query.path)?;
        let meta = held
            .metadata()
            .map_err(|err| ApiError::from_io(&err, &query.path))?;
        if !meta.is_dir() {
            return Err(ApiError::NotFound(format!(
                "not a directory: {}",
                query.path
            )));
        }
        let dir = held
            .open_dir()
            .map_err(|err| ApiError::from_io(&err, &query.path))?;
        let mut listing = Listing::default();
        let mut shown = target.shown.to_string_lossy().into_owned();
        listing
            .walk(&mut shown, &dir, depth)
            .map_err(|err| ApiError::from_io(&err, &query.path))?;
        Ok(listing.finish())
    })
    .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response())
}

/// A listing's JSON array, written entry by entry.
#[derive(Default)]
struct Listing {
    json: Vec<u8>,
}

impl Listing {
    /// Depth-first, names sorted; directories are entered by descriptor, by lstat type only, so a
    /// symlink is never followed (not even one swapped in for a directory while it is listed). `shown`
    /// is the directory's path as the answer shows it; it is extended for each entry and given back as
    /// it came.
    fn walk(&mut self, shown: &mut String, dir: &Dir, depth: u32) -> std::io::Result<()> {
        let mut names = match dir.entry_names() {
            Ok(names) => names,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
        };
        names.retain(|name| !is_staging_name(std::ffi::OsStr::from_bytes(name.as_bytes())));
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let own_length = shown.len();
        // As `Path::join` does: a separator unless the path is empty or already ends with one. Lossy
        // conversion piece by piece equals that of the whole, as pieces meet at a `/`.
        if !shown.is_empty() && !shown.ends_with('/') {
            shown.push('/');
        }
        let prefix_length = shown.len();
        // About what each entry takes (its path twice, the rest ~70 bytes), to grow the buffer rarely.
        let per_entry = prefix_length.saturating_mul(2).saturating_add(96);
        self.json.reserve(names.len().saturating_mul(per_entry));
        for name in &names {
            // Gone since it was listed, or not ours to see: left out.
            let Ok(stat) = dir.child_stat(name) else {
                continue;
            };
            shown.truncate(prefix_length);
            shown.push_str(&String::from_utf8_lossy(name.as_bytes()));
            let entry = EntryInfo::from_stat(shown.as_str(), &shown[prefix_length..], &stat);
            let is_dir = entry.kind == "dir";
            self.push(&entry)?;
            if is_dir && depth > 1 {
                match dir.open_child(std::ffi::OsStr::from_bytes(name.as_bytes())) {
                    Ok(sub) => self.walk(shown, &sub, depth - 1)?,
                    // Gone, or no longer a directory, since it was listed.
                    Err(err) if vanished(&err) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        shown.truncate(own_length);
        Ok(())
    }

    fn push(&mut self, entry: &EntryInfo<&str>) -> std::io::Result<()> {
        self.json
            .push(if self.json.is_empty() { b'[' } else { b',' });
        serde_json::to_writer(&mut self.json, entry).map_err(std::io::Error::other)
    }

    fn finish(mut self) -> Vec<u8> {
        if self.json.is_empty() {
            self.json.push(b'[');
        }
        self.json.push(b']');
        self.json
    }
}

fn vanished(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound
            | std::io::ErrorKind::NotADirectory
            | std::io::ErrorKind::InvalidInput
    )
}

async fn exists(
    State(workspace): State<Arc<Workspace>>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let (_, held) = locate_entry(&workspace, &query.path).await?;
    let found = blocking(move || Ok(held.exists())).await?;
    Ok(Json(json!({ "exists": found })))
}

async fn remove(
    State(workspace): State<Arc<Workspace>>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> ApiResult<StatusCode> {
    let (_, held) = locate_entry(&workspace, &query.path).await?;
    if held.is_root() {
        return Err(ApiError::Forbidden(
            "refusing to delete the workspace directory".into(),
        ));
    }
    blocking(move || match held.remove() {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        result => result.map_err(|err| ApiError::from_io(&err, &query.path)),
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct MoveRequest {
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
}

async fn move_entry(
    State(workspace): State<Arc<Workspace>>,
    ApiJson(request): ApiJson<MoveRequest>,
) -> ApiResult<Json<EntryInfo>> {
    if request.source.is_empty() || request.destination.is_empty() {
        return Err(ApiError::BadRequest(
            "source and destination are required".into(),
        ));
    }
    let (source, source_held) = locate_entry(&workspace, &request.source).await?;
    let (destination, mut destination_held) =
        locate_entry(&workspace, &request.destination).await?;
    if source_held.is_root() || destination_held.is_root() {
        return Err(ApiError::Forbidden(
            "cannot move the workspace directory".into(),
        ));
    }
    blocking(move || {
        let source_meta = source_held
            .metadata()
            .map_err(|err| ApiError::from_io(&err, &format!("source {}", request.source)))?;
        if source_meta.is_dir() && destination.real.starts_with(&source.real) {
            return Err(ApiError::BadRequest(format!(
                "cannot move {} into itself",
                request.source
            )));
        }
        destination_held
            .create_parents()
            .and_then(|()| source_held.rename_to(&destination_held, false))
            .map_err(|err| ApiError::from_io(&err, &request.destination))?;
        entry_info(&destination, &destination_held, &request.destination).map(Json)
    })
    .await
}

#[derive(Deserialize)]
struct MkdirRequest {
    #[serde(default)]
    path: String,
}

async fn mkdir(
    State(workspace): State<Arc<Workspace>>,
    ApiJson(request): ApiJson<MkdirRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    if request.path.is_empty() {
        return Err(ApiError::BadRequest("path is required".into()));
    }
    let (_, mut held) = locate(&workspace, &request.path).await?;
    blocking(move || match held.metadata() {
        Ok(meta) if meta.is_dir() => Ok(Json(json!({ "created": false }))),
        Ok(_) => Err(ApiError::Conflict(format!(
            "path exists and is not a directory: {}",
            request.path
        ))),
        Err(_) => held
            .create_dir_all()
            .map(|created| Json(json!({ "created": created })))
            .map_err(|err| ApiError::from_io(&err, &request.path)),
    })
    .await
}
