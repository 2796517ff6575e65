//! The git watcher (`/watcher/*`) on libgit2: commit everything, diff the working tree or two commits, and
//! the log with per-commit diffs. Diffs never touch the user's index; calls are serialised because libgit2
//! and `git` itself take the same index lock.

mod family;
pub use family::{family, limits};

mod diff_text;
mod pack;
mod pin;

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

use crate::api::extract::{ApiJsonObject, ApiQuery};
use crate::core::error::{ApiError, ApiResult};

/// `git_logs` without `limit` returns this many commits (upstream returned all, each with its full diff).
const DEFAULT_LOG_LIMIT: usize = 100;
/// The largest `limit` `git_logs` accepts.
const MAX_LOG_LIMIT: usize = 1000;
/// One commit's diff in `git_logs` is cut beyond this (the same figure as one file's diff).
const MAX_COMMIT_DIFF_BYTES: usize = diff_text::MAX_FILE_DIFF_BYTES;
/// All diff text of one answer (`generate_diff`, or every commit of a `git_logs` page together).
const MAX_RESPONSE_DIFF_BYTES: usize = 32 * 1024 * 1024;

/// Times one operation is run when files keep changing under it (see `AttemptError::Changed`).
const ATTEMPTS: usize = 5;

/// The names `upload::stage` gives a file on its way into place (`src/workspace/upload.rs`): an upload
/// that replaces a file is linked in under such a name and renamed over its target a moment later. Kept
/// out of every status, diff and commit by an in-memory ignore rule, so git never lists a file that is
/// about to vanish, and never commits one.
const STAGING_PATTERN: &str = ".boxd-upload-*.tmp";

/// What upstream writes into the repository config; boxd uses it only when no identity is configured.
const FALLBACK_NAME: &str = "User";
const FALLBACK_EMAIL: &str = "user@example.com";

/// Process-wide libgit2 settings; call once at start-up, before any thread uses libgit2.
///
/// Ownership validation is off: the workspace is bind-mounted from the host, so it belongs to the host
/// user while boxd runs as root in the container, and libgit2 would refuse every such repository
/// ("not owned by current user"). The check exists to stop `git` from running another user's hooks and
/// fsmonitor commands; libgit2 runs neither, and boxd is the only git user of this directory.
///
/// Global, XDG and system config are not read at all (empty search paths): they live outside the workspace,
/// may include further files, and name ignore and attribute files (`~/.config/git/ignore`) that would make
/// the watcher's answers depend on files outside it. Only the repository's own config counts, which is
/// also upstream's identity behaviour (it writes `User` into the repository config).
pub fn configure_library() {
    // SAFETY: called from main before the async runtime starts, so no other thread touches libgit2.
    if let Err(err) = unsafe { git2::opts::set_verify_owner_validation(false) } {
        tracing::warn!("cannot turn off libgit2 owner validation: {err}");
    }
    for level in [
        git2::ConfigLevel::System,
        git2::ConfigLevel::XDG,
        git2::ConfigLevel::Global,
        git2::ConfigLevel::ProgramData,
    ] {
        // SAFETY: as above, no other thread uses libgit2 yet.
        if let Err(err) = unsafe { git2::opts::set_search_path(level, "") } {
            tracing::warn!("cannot clear libgit2's {level:?} config search path: {err}");
        }
    }
}

pub struct GitWatcher {
    workdir: PathBuf,
    lock: Mutex<()>,
}

/// libgit2 errors here come from the workspace repository's state, which the client controls (it can write
/// anything under `.git`): a damaged index, object or ref, a bad config value, a path git cannot store. Those
/// are 409 with libgit2's message; only the host's own failures (I/O, memory, threads) stay 500. Names the
/// client gives are checked before they reach libgit2 (`find_commit`), so nothing here is a 400.
impl From<git2::Error> for ApiError {
    fn from(err: git2::Error) -> Self {
        use git2::ErrorClass as C;
        let message = format!("git: {}", err.message());
        match (err.code(), err.class()) {
            (ErrorCode::Locked, _) => ApiError::Conflict(message),
            (_, C::Os | C::NoMemory | C::Thread | C::Callback) => ApiError::Internal(message),
            _ => ApiError::Conflict(format!("the workspace repository: {message}")),
        }
    }
}

/// Why one attempt at a git operation failed.
enum AttemptError {
    /// A file changed size or vanished between libgit2 listing it and reading it (an upload renamed into
    /// place, a file deleted mid-walk). Not the client's error nor the host's: the operation is run
    /// again on what is there now.
    Changed(String),
    Api(ApiError),
}

type GitResult<T> = Result<T, AttemptError>;

impl From<ApiError> for AttemptError {
    fn from(err: ApiError) -> Self {
        AttemptError::Api(err)
    }
}

impl From<git2::Error> for AttemptError {
    fn from(err: git2::Error) -> Self {
        if diff_text::vanished(&err) {
            AttemptError::Changed(err.message().to_owned())
        } else {
            AttemptError::Api(err.into())
        }
    }
}

/// Below this much free space, a failed repository write is taken as the disk being full.
const LOW_SPACE_BYTES: u64 = 1024 * 1024;

/// Bytes an unprivileged writer may still use on the filesystem holding `path`.
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer of the right type for statvfs to fill.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// A file of the work tree that is gone by the time it is read: `git add -A` treats it as deleted.
fn vanished(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
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
    /// Present (true) when files of this commit's diff were left out for size.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    diff_truncated: bool,
}

pub struct LogPage {
    entries: Vec<LogEntry>,
    /// More commits follow the page.
    more: bool,
}

#[derive(Serialize)]
pub struct DiffAnswer {
    diffs: BTreeMap<String, String>,
    /// Present (true) when files were left out because the answer reached its size limit.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

impl From<diff_text::Rendered> for DiffAnswer {
    fn from(rendered: diff_text::Rendered) -> Self {
        DiffAnswer {
            diffs: rendered.files,
            truncated: rendered.truncated,
        }
    }
}

impl GitWatcher {
    pub fn new(workdir: PathBuf) -> Self {
        // `pin::open` compares what libgit2 resolved against this path, so it must be the real one.
        let workdir = std::fs::canonicalize(&workdir).unwrap_or(workdir);
        GitWatcher {
            workdir,
            lock: Mutex::new(()),
        }
    }

    /// Blocking. Runs `work` on the workspace repository, creating it on first use. The workspace is
    /// shared with the client's own writes, so a file may change while libgit2 walks it: `work` then
    /// runs again on a freshly opened repository (nothing is written before a walk is complete), a
    /// bounded number of times, and a work tree that never holds still is a 409 saying so.
    fn with_repo<T>(&self, work: impl Fn(&Repository) -> GitResult<T>) -> ApiResult<T> {
        let _serialised = self
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut attempt = 1;
        loop {
            let repo = pin::open(&self.workdir)?;
            repo.add_ignore_rule(STAGING_PATTERN)?;
            match work(&repo) {
                Ok(value) => return Ok(value),
                Err(AttemptError::Api(err)) => return Err(err),
                Err(AttemptError::Changed(reason)) if attempt < ATTEMPTS => {
                    tracing::debug!(attempt, %reason, "work tree changed during a git walk; again");
                    attempt += 1;
                }
                Err(AttemptError::Changed(reason)) => {
                    return Err(ApiError::Conflict(format!(
                        "the workspace kept changing while git read it ({reason}), {ATTEMPTS} times \
                         in a row; try again once writes to it have settled"
                    )));
                }
            }
        }
    }

    pub fn commit_all(&self, message: &str) -> ApiResult<CommitOutcome> {
        self.with_repo(|repo| self.commit_staged_all(repo, message))
            .map_err(|err| self.explain_write_failure(err))
    }

    /// libgit2 does not always say why a write failed: on a full disk it has answered "no error", or a
    /// stale message about another file, and left errno clear. A failed write with almost no space
    /// left on the workspace's filesystem is that.
    fn explain_write_failure(&self, err: ApiError) -> ApiError {
        if !matches!(err, ApiError::Internal(_) | ApiError::Conflict(_)) {
            return err;
        }
        match free_bytes(&self.workdir) {
            Some(free) if free < LOW_SPACE_BYTES => ApiError::InsufficientStorage(format!(
                "no space left on the workspace's device ({free} bytes free) while git wrote the commit; free some space and try again ({err})"
            )),
            _ => err,
        }
    }

    fn commit_staged_all(&self, repo: &Repository, message: &str) -> GitResult<CommitOutcome> {
        // A second handle on the same (checked) repository collects the new blobs and trees in memory
        // and writes them as one pack before the index file names them; `repo` itself writes loose,
        // so the commit object and HEAD are written the usual way once everything they name is on disk.
        let writer = pin::open(&self.workdir)?;
        let batched = pack::with_batch(&writer, repo, |batch| -> GitResult<Option<Oid>> {
            let mut index = writer.index()?;
            if !stage_unfiltered(repo, batch, &mut index)? {
                return Ok(None);
            }
            let tree = index.write_tree()?;
            batch.flush(Some(tree))?;
            index.write()?;
            Ok(Some(tree))
        })?;
        let tree = match batched {
            Some(tree) => tree,
            None => {
                // A content filter may apply: libgit2's own `add -A`, every object loose.
                let mut index = repo.index()?;
                index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
                index.update_all(["*"], None)?;
                index.write()?;
                index.write_tree()?
            }
        };
        let tree = repo.find_tree(tree)?;
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
    }

    /// Working tree (untracked files included, ignored ones not) against HEAD, or against the empty tree
    /// when there is no commit yet.
    pub fn diff_worktree(&self) -> ApiResult<DiffAnswer> {
        self.with_repo(|repo| {
            let head_tree = head_commit(repo)?.map(|commit| commit.tree()).transpose()?;
            let mut options = DiffOptions::new();
            options
                .include_untracked(true)
                .recurse_untracked_dirs(true)
                .show_untracked_content(true);
            let diff =
                repo.diff_tree_to_workdir_with_index(head_tree.as_ref(), Some(&mut options))?;
            Ok(diff_text::render(&diff, MAX_RESPONSE_DIFF_BYTES)?.into())
        })
    }

    pub fn diff_commits(&self, from: &str, to: &str) -> ApiResult<DiffAnswer> {
        self.with_repo(|repo| {
            let from_tree = find_commit(repo, from)?.tree()?;
            let to_tree = find_commit(repo, to)?.tree()?;
            let diff = repo.diff_tree_to_tree(Some(&from_tree), Some(&to_tree), None)?;
            Ok(diff_text::render(&diff, MAX_RESPONSE_DIFF_BYTES)?.into())
        })
    }

    /// Newest first, `limit` commits after `skip`; the caller checks `limit` against `MAX_LOG_LIMIT`.
    pub fn log(&self, skip: usize, limit: usize) -> ApiResult<LogPage> {
        self.with_repo(|repo| {
            if head_commit(repo)?.is_none() {
                return Ok(LogPage {
                    entries: Vec::new(),
                    more: false,
                });
            }
            let mut walk = repo.revwalk()?;
            walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)?;
            walk.push_head()?;
            let mut oids = walk.skip(skip).take(limit.saturating_add(1));
            let mut entries = Vec::new();
            let mut left = MAX_RESPONSE_DIFF_BYTES;
            for oid in oids.by_ref().take(limit) {
                let entry = log_entry(repo, oid?, left.min(MAX_COMMIT_DIFF_BYTES))?;
                let used: usize = entry.diff.values().map(String::len).sum();
                left = left.saturating_sub(used);
                entries.push(entry);
            }
            let more = oids.next().is_some();
            Ok(LogPage { entries, more })
        })
    }
}

/// `git add -A` for the common case, where no content filter can apply: stages exactly the paths
/// `statuses()` reports changed in the working tree, writing blobs straight from the files (up to
/// `pack::MAX_BATCHED_OBJECT_BYTES` into `batch`, larger ones loose and streamed by `repo`). libgit2's
/// `add_all` does the same work at ~0.6 ms per changed file (attribute and path lookups for its filters),
/// six times what `git add` needs. Returns `false`, having changed nothing, whenever a filter might apply
/// (`core.autocrlf`, any attributes file, `core.filemode` off) or an entry is not a plain file or symlink;
/// the caller then uses `add_all`.
fn stage_unfiltered(
    repo: &Repository,
    batch: &pack::Batch<'_, '_>,
    index: &mut git2::Index,
) -> GitResult<bool> {
    let config = repo.config()?;
    let autocrlf = config
        .get_string("core.autocrlf")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let filemode = config.get_bool("core.filemode").unwrap_or(true);
    if matches!(autocrlf.as_str(), "true" | "input")
        || !filemode
        || config.get_string("core.attributesfile").is_ok()
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
    // An untracked directory is reported whole only when it holds its own repository (a clone inside the
    // workspace). `git add -A` would record it as an embedded gitlink with a warning; libgit2 cannot
    // without a submodule entry, so say what is in the way instead of libgit2's "invalid path".
    if let Some((path, _)) = changes.iter().find(|(path, _)| path.ends_with(b"/")) {
        let shown = String::from_utf8_lossy(path);
        return Err(AttemptError::Api(ApiError::Conflict(format!(
            "{shown} is a git repository inside the workspace (a clone?): boxd does not commit nested \
             repositories; add it to .gitignore, or remove its .git directory to commit its files"
        ))));
    }
    if changes
        .iter()
        .any(|(path, _)| path.ends_with(b".gitattributes"))
    {
        return Ok(false);
    }
    for (path, status) in changes {
        let relative = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
        let full = workdir.join(relative);
        let shown = || relative.display().to_string();
        // A file gone since `statuses()` listed it (deleted, or renamed away mid-walk) is staged as
        // deleted, which is what `git add -A` run now would do; one never tracked is left out.
        let gone = |index: &mut git2::Index| -> GitResult<()> {
            if status.is_wt_new() {
                return Ok(());
            }
            match index.remove_path(relative) {
                Err(err) if err.code() == ErrorCode::NotFound => Ok(()),
                other => Ok(other?),
            }
        };
        let meta = match std::fs::symlink_metadata(&full) {
            Err(err) if vanished(&err) || status.is_wt_deleted() => {
                gone(index)?;
                continue;
            }
            Err(err) => return Err(ApiError::from_io(&err, &shown()).into()),
            Ok(meta) => meta,
        };
        let executable = meta.mode() & 0o100 != 0;
        let read = if meta.file_type().is_symlink() {
            std::fs::read_link(&full).map(|target| (target.into_os_string().into_vec(), 0o120000))
        } else if meta.is_file() && meta.len() <= pack::MAX_BATCHED_OBJECT_BYTES {
            std::fs::read(&full)
                .map(|content| (content, if executable { 0o100755 } else { 0o100644 }))
        } else if meta.is_file() {
            // Written loose by the handle that does not batch, streamed from the file.
            let id = repo.blob_path(&full)?;
            index.add(&index_entry(
                &meta,
                if executable { 0o100755 } else { 0o100644 },
                id,
                path,
            ))?;
            continue;
        } else {
            // libgit2 writes this blob through the batching handle: it must reach the pack too.
            index.add_path(relative)?;
            if let Some(entry) = index.get_path(relative, 0) {
                batch.hold(entry.id);
            }
            continue;
        };
        let (content, mode) = match read {
            Ok(read) => read,
            Err(err) if vanished(&err) => {
                gone(index)?;
                continue;
            }
            Err(err) => return Err(ApiError::from_io(&err, &shown()).into()),
        };
        let id = batch.blob(&content)?;
        index.add(&index_entry(&meta, mode, id, path))?;
    }
    Ok(true)
}

/// The index entry of a work tree file as `git add` records it, with the stat data read before it.
fn index_entry(meta: &std::fs::Metadata, mode: u32, id: Oid, path: Vec<u8>) -> git2::IndexEntry {
    // The index keeps 32-bit stat fields: git truncates the same way.
    git2::IndexEntry {
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
    }
}

fn log_entry(repo: &Repository, oid: Oid, budget: usize) -> GitResult<LogEntry> {
    let commit = repo.find_commit(oid)?;
    let parent_tree = match commit.parents().next() {
        Some(parent) => Some(parent.tree()?),
        None => None,
    };
    let tree = commit.tree()?;
    let (diff, diff_truncated) = if budget == 0 {
        // The answer's budget is spent: skip computing the diff, but say whether one was left out.
        let changed = parent_tree.as_ref().map(git2::Tree::id) != Some(tree.id());
        (BTreeMap::new(), changed)
    } else {
        let diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?;
        let rendered = diff_text::render(&diff, budget)?;
        let cut_file = rendered
            .files
            .values()
            .any(|text| text.ends_with(" bytes omitted]\n"));
        (rendered.files, rendered.truncated || cut_file)
    };
    Ok(LogEntry {
        commit: oid.to_string(),
        author: commit.author().name().unwrap_or_default().to_owned(),
        date: iso8601(commit.time()),
        message: commit.message().unwrap_or_default().trim().to_owned(),
        diff,
        diff_truncated,
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

fn head_commit(repo: &Repository) -> GitResult<Option<git2::Commit<'_>>> {
    match repo.head() {
        Ok(head) => Ok(Some(head.peel_to_commit()?)),
        Err(err) if matches!(err.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// A client-given revision as shown in messages: at most 100 characters, control characters escaped.
fn shown(spec: &str) -> String {
    let mut shown: String = spec
        .chars()
        .take(100)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if spec.chars().nth(100).is_some() {
        shown.push_str("...");
    }
    shown
}

/// What can be told wrong with a revision without the repository, checked for both before either resolves.
fn check_spec(spec: &str) -> ApiResult<()> {
    if spec.contains('\0') {
        return Err(ApiError::BadRequest(format!(
            "invalid commit {}: contains a NUL byte",
            shown(spec)
        )));
    }
    Ok(())
}

fn find_commit<'repo>(repo: &'repo Repository, spec: &str) -> ApiResult<git2::Commit<'repo>> {
    check_spec(spec)?;
    let object = repo.revparse_single(spec).map_err(|err| {
        use git2::ErrorClass as C;
        match (err.code(), err.class()) {
            (ErrorCode::Ambiguous, _) => {
                ApiError::BadRequest(format!("ambiguous commit: {}", shown(spec)))
            }
            (ErrorCode::InvalidSpec, _) | (_, C::Invalid | C::Regex) => {
                ApiError::BadRequest(format!("invalid commit {}: {}", shown(spec), err.message()))
            }
            // Whatever else fails to resolve a name (no such ref, a name too long to be a ref file) means
            // there is no such commit.
            _ => ApiError::NotFound(format!("unknown commit: {}", shown(spec))),
        }
    })?;
    let kind = object.kind();
    object.peel_to_commit().map_err(|_| {
        ApiError::BadRequest(format!(
            "not a commit: {} names a {}",
            shown(spec),
            kind.map_or("non-commit object", |kind| kind.str())
        ))
    })
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
    ApiJsonObject(request): ApiJsonObject<CommitRequest>,
) -> ApiResult<Json<CommitOutcome>> {
    let message = request
        .commit_message
        .unwrap_or_else(|| "Automated commit".to_owned());
    if message.contains('\0') {
        return Err(ApiError::BadRequest(
            "commit_message must not contain NUL bytes".into(),
        ));
    }
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
    ApiJsonObject(request): ApiJsonObject<DiffRequest>,
) -> ApiResult<Json<DiffAnswer>> {
    let given = |commit: Option<String>| commit.filter(|commit| !commit.trim().is_empty());
    let diffs = match (given(request.commit_a), given(request.commit_b)) {
        (None, None) => tokio::task::spawn_blocking(move || git.diff_worktree()).await??,
        (Some(from), Some(to)) => {
            check_spec(&from)?;
            check_spec(&to)?;
            tokio::task::spawn_blocking(move || git.diff_commits(&from, &to)).await??
        }
        _ => {
            return Err(ApiError::BadRequest(
                "Invalid commit range: give both commit_a and commit_b, or neither".into(),
            ));
        }
    };
    Ok(Json(diffs))
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
    let limit = query.limit.unwrap_or(DEFAULT_LOG_LIMIT);
    if !(1..=MAX_LOG_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and {MAX_LOG_LIMIT} (got {limit}); page with skip"
        )));
    }
    let skip = query.skip.unwrap_or(0);
    let page = tokio::task::spawn_blocking(move || git.log(skip, limit)).await??;
    let mut answer = serde_json::json!({ "logs": page.entries });
    if page.more {
        answer["has_more"] = serde_json::Value::Bool(true);
    }
    Ok(Json(answer))
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_config_outside_the_repository_is_searched() {
        super::configure_library();
        for level in [
            git2::ConfigLevel::System,
            git2::ConfigLevel::XDG,
            git2::ConfigLevel::Global,
        ] {
            // SAFETY: reads a process-wide setting that only configure_library writes.
            let path = unsafe { git2::opts::get_search_path(level) }.expect("search path");
            assert_eq!(path.as_bytes(), b"", "{level:?}");
        }
    }
}
