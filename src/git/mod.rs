//! The git watcher (`/watcher/*`) on libgit2: commit everything, diff the working tree or two commits, and
//! the log with per-commit diffs. Diffs never touch the user's index; calls are serialised because libgit2
//! and `git` itself take the same index lock.

mod family;
pub use family::family;

mod diff_text;

use std::collections::BTreeMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use git2::{DiffOptions, ErrorCode, IndexAddOption, Oid, Repository, Signature, Sort};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::http::extract::{ApiJson, ApiQuery};

/// What upstream writes into the repository config; boxd uses it only when no identity is configured.
const FALLBACK_NAME: &str = "User";
const FALLBACK_EMAIL: &str = "user@example.com";

/// Process-wide libgit2 settings; call once at start-up, before any thread uses libgit2.
///
/// Ownership validation is off: the workspace is bind-mounted from the host, so it belongs to the host
/// user while boxd runs as root in the container, and libgit2 would refuse every such repository
/// ("not owned by current user"). The check exists to stop `git` from running another user's hooks and
/// fsmonitor commands; libgit2 runs neither, and boxd is the only git user of this directory.
pub fn configure_library() {
    // SAFETY: called from main before the async runtime starts, so no other thread touches libgit2.
    if let Err(err) = unsafe { git2::opts::set_verify_owner_validation(false) } {
        tracing::warn!("cannot turn off libgit2 owner validation: {err}");
    }
}

pub struct GitWatcher {
    workdir: PathBuf,
    lock: Mutex<()>,
}

impl From<git2::Error> for ApiError {
    fn from(err: git2::Error) -> Self {
        match err.code() {
            ErrorCode::Locked => ApiError::Conflict(format!("git: {}", err.message())),
            _ => ApiError::Internal(format!("git: {}", err.message())),
        }
    }
}

#[derive(Serialize)]
pub struct CommitOutcome {
    commit: String,
    message: String,
}

#[derive(Serialize)]
pub struct LogEntry {
    commit: String,
    author: String,
    date: String,
    message: String,
    diff: BTreeMap<String, String>,
}

impl GitWatcher {
    pub fn new(workdir: PathBuf) -> Self {
        GitWatcher {
            workdir,
            lock: Mutex::new(()),
        }
    }

    /// Blocking. Runs `work` on the workspace repository, creating it on first use.
    fn with_repo<T>(&self, work: impl FnOnce(&Repository) -> ApiResult<T>) -> ApiResult<T> {
        let _serialised = self
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let repo = match Repository::open(&self.workdir) {
            Ok(repo) => repo,
            Err(err) if err.code() == ErrorCode::NotFound => {
                tracing::info!(workdir = %self.workdir.display(), "workspace is not a git repository; initialising one");
                Repository::init(&self.workdir)?
            }
            Err(err) => return Err(err.into()),
        };
        work(&repo)
    }

    pub fn commit_all(&self, message: &str) -> ApiResult<CommitOutcome> {
        self.with_repo(|repo| {
            let mut index = repo.index()?;
            if !stage_unfiltered(repo, &mut index)? {
                index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
                index.update_all(["*"], None)?;
            }
            index.write()?;
            let tree = repo.find_tree(index.write_tree()?)?;
            let signature = repo
                .signature()
                .or_else(|_| Signature::now(FALLBACK_NAME, FALLBACK_EMAIL))?;
            let parent = head_commit(repo)?;
            let parents: Vec<&git2::Commit> = parent.iter().collect();
            let oid = repo.commit(
                Some("HEAD"),
                &signature,
                &signature,
                message,
                &tree,
                &parents,
            )?;
            Ok(CommitOutcome {
                commit: oid.to_string(),
                message: message.to_owned(),
            })
        })
    }

    /// Working tree (untracked files included, ignored ones not) against HEAD, or against the empty tree
    /// when there is no commit yet.
    pub fn diff_worktree(&self) -> ApiResult<BTreeMap<String, String>> {
        self.with_repo(|repo| {
            let head_tree = head_commit(repo)?.map(|commit| commit.tree()).transpose()?;
            let mut options = DiffOptions::new();
            options
                .include_untracked(true)
                .recurse_untracked_dirs(true)
                .show_untracked_content(true);
            let diff =
                repo.diff_tree_to_workdir_with_index(head_tree.as_ref(), Some(&mut options))?;
            Ok(diff_text::render(&diff)?)
        })
    }

    pub fn diff_commits(&self, from: &str, to: &str) -> ApiResult<BTreeMap<String, String>> {
        self.with_repo(|repo| {
            let from_tree = find_commit(repo, from)?.tree()?;
            let to_tree = find_commit(repo, to)?.tree()?;
            let diff = repo.diff_tree_to_tree(Some(&from_tree), Some(&to_tree), None)?;
            Ok(diff_text::render(&diff)?)
        })
    }

    pub fn log(&self, skip: usize, limit: Option<usize>) -> ApiResult<Vec<LogEntry>> {
        self.with_repo(|repo| {
            if head_commit(repo)?.is_none() {
                return Ok(Vec::new());
            }
            let mut walk = repo.revwalk()?;
            walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)?;
            walk.push_head()?;
            let mut entries = Vec::new();
            for oid in walk.skip(skip).take(limit.unwrap_or(usize::MAX)) {
                entries.push(log_entry(repo, oid?)?);
            }
            Ok(entries)
        })
    }
}

/// Files above this go through libgit2's own path, which streams them instead of reading them whole.
const DIRECT_STAGE_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// `git add -A` for the common case, where no content filter can apply: stages exactly the paths
/// `statuses()` reports changed in the working tree, writing blobs straight from the files. libgit2's
/// `add_all` does the same work at ~0.6 ms per changed file (attribute and path lookups for its filters),
/// six times what `git add` needs. Returns `false`, having changed nothing, whenever a filter might apply
/// (`core.autocrlf`, any attributes file, `core.filemode` off) or an entry is not a plain file or symlink;
/// the caller then uses `add_all`.
fn stage_unfiltered(repo: &Repository, index: &mut git2::Index) -> ApiResult<bool> {
    let config = repo.config()?;
    let autocrlf = config
        .get_string("core.autocrlf")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let filemode = config.get_bool("core.filemode").unwrap_or(true);
    let home_attributes = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".config/git/attributes").exists())
        .unwrap_or(false);
    if matches!(autocrlf.as_str(), "true" | "input")
        || !filemode
        || config.get_string("core.attributesfile").is_ok()
        || home_attributes
        || repo.path().join("info/attributes").exists()
        || index
            .iter()
            .any(|entry| entry.path.ends_with(b".gitattributes"))
    {
        return Ok(false);
    }
    let Some(workdir) = repo.workdir().map(PathBuf::from) else {
        return Ok(false);
    };
    let mut options = git2::StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut options))?;
    let worktree_changes = git2::Status::WT_NEW
        | git2::Status::WT_MODIFIED
        | git2::Status::WT_TYPECHANGE
        | git2::Status::WT_DELETED;
    let changes: Vec<(Vec<u8>, git2::Status)> = statuses
        .iter()
        .filter(|entry| entry.status().intersects(worktree_changes))
        .map(|entry| (entry.path_bytes().to_vec(), entry.status()))
        .collect();
    if changes
        .iter()
        .any(|(path, _)| path.ends_with(b".gitattributes") || path.ends_with(b"/"))
    {
        return Ok(false);
    }
    for (path, status) in changes {
        let relative = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
        let full = workdir.join(relative);
        let meta = match std::fs::symlink_metadata(&full) {
            Err(_) if status.is_wt_deleted() => {
                index.remove_path(relative)?;
                continue;
            }
            Err(err) => return Err(ApiError::from_io(&err, &relative.display().to_string())),
            Ok(meta) => meta,
        };
        let (content, mode) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&full)
                .map_err(|err| ApiError::from_io(&err, &relative.display().to_string()))?;
            (target.into_os_string().into_vec(), 0o120000)
        } else if meta.is_file() && meta.len() <= DIRECT_STAGE_MAX_BYTES {
            let content = std::fs::read(&full)
                .map_err(|err| ApiError::from_io(&err, &relative.display().to_string()))?;
            let executable = meta.mode() & 0o100 != 0;
            (content, if executable { 0o100755 } else { 0o100644 })
        } else {
            index.add_path(relative)?;
            continue;
        };
        let id = repo.blob(&content)?;
        index.add(&git2::IndexEntry {
            ctime: git2::IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32),
            mtime: git2::IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32),
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            mode,
            uid: meta.uid(),
            gid: meta.gid(),
            file_size: meta.len() as u32,
            id,
            flags: path.len().min(0xfff) as u16,
            flags_extended: 0,
            path,
        })?;
    }
    Ok(true)
}

fn log_entry(repo: &Repository, oid: Oid) -> ApiResult<LogEntry> {
    let commit = repo.find_commit(oid)?;
    let parent_tree = match commit.parents().next() {
        Some(parent) => Some(parent.tree()?),
        None => None,
    };
    let diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&commit.tree()?), None)?;
    Ok(LogEntry {
        commit: oid.to_string(),
        author: commit.author().name().unwrap_or_default().to_owned(),
        date: iso8601(commit.time()),
        message: commit.message().unwrap_or_default().trim().to_owned(),
        diff: diff_text::render(&diff)?,
    })
}

/// Python's `datetime.isoformat()` of the commit time in its own offset, as upstream reports it.
fn iso8601(time: git2::Time) -> String {
    use chrono::{FixedOffset, TimeZone};
    FixedOffset::east_opt(time.offset_minutes() * 60)
        .and_then(|offset| offset.timestamp_opt(time.seconds(), 0).single())
        .map(|moment| moment.to_rfc3339())
        .unwrap_or_default()
}

fn head_commit(repo: &Repository) -> ApiResult<Option<git2::Commit<'_>>> {
    match repo.head() {
        Ok(head) => Ok(Some(head.peel_to_commit()?)),
        Err(err) if matches!(err.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

fn find_commit<'repo>(repo: &'repo Repository, spec: &str) -> ApiResult<git2::Commit<'repo>> {
    let object = repo.revparse_single(spec).map_err(|err| match err.code() {
        ErrorCode::Ambiguous => ApiError::BadRequest(format!("ambiguous commit: {spec}")),
        _ => ApiError::NotFound(format!("unknown commit: {spec}")),
    })?;
    object
        .peel_to_commit()
        .map_err(|_| ApiError::NotFound(format!("not a commit: {spec}")))
}

pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<GitWatcher>: axum::extract::FromRef<S>,
{
    Router::new()
        .route("/watcher/commit_changes", post(commit_changes))
        .route("/watcher/generate_diff", post(generate_diff))
        .route("/watcher/git_logs", get(git_logs))
}

#[derive(Deserialize)]
struct CommitRequest {
    #[serde(default)]
    commit_message: Option<String>,
}

async fn commit_changes(
    State(git): State<Arc<GitWatcher>>,
    ApiJson(request): ApiJson<CommitRequest>,
) -> ApiResult<Json<CommitOutcome>> {
    let message = request
        .commit_message
        .unwrap_or_else(|| "Automated commit".to_owned());
    Ok(Json(
        tokio::task::spawn_blocking(move || git.commit_all(&message)).await??,
    ))
}

#[derive(Deserialize)]
struct DiffRequest {
    #[serde(default)]
    commit_a: Option<String>,
    #[serde(default)]
    commit_b: Option<String>,
}

async fn generate_diff(
    State(git): State<Arc<GitWatcher>>,
    ApiJson(request): ApiJson<DiffRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let given = |commit: Option<String>| commit.filter(|commit| !commit.trim().is_empty());
    let diffs = match (given(request.commit_a), given(request.commit_b)) {
        (None, None) => tokio::task::spawn_blocking(move || git.diff_worktree()).await??,
        (Some(from), Some(to)) => {
            tokio::task::spawn_blocking(move || git.diff_commits(&from, &to)).await??
        }
        _ => {
            return Err(ApiError::BadRequest(
                "Invalid commit range: give both commit_a and commit_b, or neither".into(),
            ));
        }
    };
    Ok(Json(serde_json::json!({ "diffs": diffs })))
}

#[derive(Deserialize)]
struct LogQuery {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    skip: Option<usize>,
}

async fn git_logs(
    State(git): State<Arc<GitWatcher>>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let logs = tokio::task::spawn_blocking(move || git.log(query.skip.unwrap_or(0), query.limit))
        .await??;
    Ok(Json(serde_json::json!({ "logs": logs })))
}
