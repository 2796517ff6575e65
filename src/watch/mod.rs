//! `GET /watch`: a stream of create / modify / delete / rename events under a workspace path, from the
//! kernel's notifications (`notify`, inotify here), debounced so one save is one event, `.git` left out
//! unless asked for. Confined like the file routes; the number of open watches is capped.

mod family;
pub use family::{WatchArgs, family, limits};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use futures_util::Stream;
use notify::RecursiveMode;
use notify::event::{EventKind, ModifyKind, RenameMode};
use notify_debouncer_full::{DebounceEventResult, DebouncedEvent, new_debouncer};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::api::events::{self, Event, EventFormat};
use crate::api::extract::ApiQuery;
use crate::core::confine::Workspace;
use crate::core::error::{ApiError, ApiResult};

/// Events queued for one slow client before the stream reports an overflow and drops some.
const QUEUE: usize = 1024;

pub struct WatchHub {
    workspace: Arc<Workspace>,
    open: Arc<AtomicUsize>,
    max_open: usize,
}

impl WatchHub {
    pub fn new(workspace: Arc<Workspace>, max_open: usize) -> Self {
        WatchHub {
            workspace,
            open: Arc::new(AtomicUsize::new(0)),
            max_open,
        }
    }
}

pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<WatchHub>: FromRef<S>,
{
    Router::new().route("/watch", get(watch))
}

#[derive(Deserialize)]
struct WatchQuery {
    #[serde(default)]
    path: String,
    #[serde(default = "yes")]
    recursive: bool,
    #[serde(default)]
    include_git: bool,
    #[serde(default)]
    debounce_ms: Option<u64>,
}

fn yes() -> bool {
    true
}

/// Releases the watch's slot when its stream is dropped (the client went away).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn watch(
    State(hub): State<Arc<WatchHub>>,
    ApiQuery(query): ApiQuery<WatchQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let debounce = Duration::from_millis(query.debounce_ms.unwrap_or(100).clamp(10, 10_000));
    let target = {
        let workspace = Arc::clone(&hub.workspace);
        let path = query.path.clone();
        tokio::task::spawn_blocking(move || workspace.resolve(&path)).await??
    };
    if !target.real.exists() {
        return Err(ApiError::NotFound(format!("{} does not exist", query.path)));
    }
    let taken = hub.open.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(Arc::clone(&hub.open));
    if taken >= hub.max_open {
        return Err(ApiError::TooManyRequests(format!(
            "{taken} watches are open, the limit is {}",
            hub.max_open
        )));
    }

    let (sender, receiver) = mpsc::channel::<Value>(QUEUE);
    let overflowed = Arc::new(AtomicBool::new(false));
    let filter = EventFilter {
        real_root: hub.workspace.real_root().to_path_buf(),
        include_git: query.include_git,
    };
    let handler = {
        let overflowed = Arc::clone(&overflowed);
        move |result: DebounceEventResult| {
            let events = match result {
                Ok(events) => events
                    .iter()
                    .filter_map(|event| filter.describe(event))
                    .collect(),
                Err(errors) => errors
                    .iter()
                    .map(|err| json!({"type": "error", "message": err.to_string()}))
                    .collect::<Vec<_>>(),
            };
            for event in events {
                if sender.try_send(event).is_err() {
                    overflowed.store(true, Ordering::SeqCst);
                }
            }
        }
    };
    let mode = if query.recursive {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    // A recursive watch walks the whole tree to add one inotify watch per directory: blocking work.
    let debouncer = {
        let (real, shown) = (target.real.clone(), query.path.clone());
        tokio::task::spawn_blocking(move || {
            let mut debouncer = new_debouncer(debounce, None, handler)
                .map_err(|err| ApiError::Internal(format!("cannot watch: {err}")))?;
            debouncer.watch(&real, mode).map_err(|err| {
                ApiError::InsufficientStorage(format!(
                    "cannot watch {shown}: {err} (inotify limits?)"
                ))
            })?;
            Ok::<_, ApiError>(debouncer)
        })
        .await??
    };
    tracing::info!(path = %target.shown.display(), recursive = query.recursive, "watch opened");

    let watched = workspace_relative(hub.workspace.real_root(), &target.real).unwrap_or_default();
    let state = WatchStream {
        receiver,
        overflowed,
        _debouncer: Box::new(debouncer),
        _slot: slot,
        pending_ready: Some(json!({"type": "ready", "path": watched})),
        watched,
        ended: false,
    };
    Ok(events::respond(
        EventFormat::negotiate(&headers),
        watch_events(state),
    ))
}

struct WatchStream {
    receiver: mpsc::Receiver<Value>,
    overflowed: Arc<AtomicBool>,
    /// Dropping it stops the watch.
    _debouncer: Box<dyn std::any::Any + Send>,
    _slot: Slot,
    pending_ready: Option<Value>,
    /// Workspace-relative, like every event's path.
    watched: String,
    ended: bool,
}

/// Ends after the watched path itself is deleted or renamed away: its inotify watch is gone, so the
/// stream could only stay silent.
fn watch_events(state: WatchStream) -> impl Stream<Item = Event> + Send {
    futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        if let Some(ready) = state.pending_ready.take() {
            return Some((Event::new(ready), state));
        }
        if state.overflowed.swap(false, Ordering::SeqCst) {
            let overflow = json!({"type": "overflow", "message": "events were dropped: the client read too slowly"});
            return Some((Event::new(overflow), state));
        }
        let event = state.receiver.recv().await?;
        state.ended = matches!(event["type"].as_str(), Some("delete" | "rename"))
            && event["path"].as_str() == Some(state.watched.as_str());
        Some((Event::new(event), state))
    })
}

struct EventFilter {
    real_root: PathBuf,
    include_git: bool,
}

impl EventFilter {
    fn describe(&self, event: &DebouncedEvent) -> Option<Value> {
        let kind = match event.kind {
            EventKind::Create(_) => "create",
            EventKind::Remove(_) => "delete",
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => "rename",
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => "delete",
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => "create",
            EventKind::Modify(ModifyKind::Name(_)) => "rename",
            EventKind::Modify(_) => "modify",
            EventKind::Access(_) | EventKind::Any | EventKind::Other => return None,
        };
        // An upload renamed over its target: to the watcher, the target's content changed.
        if kind == "rename"
            && let [from, to] = event.paths.as_slice()
            && from
                .file_name()
                .is_some_and(crate::core::staging::is_staging_name)
        {
            return Some(json!({"type": "modify", "path": self.relative(to)?}));
        }
        let paths: Vec<String> = event
            .paths
            .iter()
            .map(|path| self.relative(path))
            .collect::<Option<_>>()?;
        let path = paths.first()?.clone();
        let mut described = json!({"type": kind, "path": path});
        if kind == "rename"
            && let Some(to) = paths.get(1)
        {
            described["to"] = json!(to);
        }
        Some(described)
    }

    /// Workspace-relative, or `None` for paths to leave out (under `.git`, or outside).
    fn relative(&self, path: &Path) -> Option<String> {
        if path
            .file_name()
            .is_some_and(crate::core::staging::is_staging_name)
        {
            return None;
        }
        let relative = workspace_relative(&self.real_root, path)?;
        let under_git = Path::new(&relative)
            .components()
            .any(|part| part.as_os_str() == ".git");
        (self.include_git || !under_git).then_some(relative)
    }
}

/// How the watch names a path: relative to the workspace's real root (`None` outside it).
fn workspace_relative(real_root: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(real_root).ok()?;
    Some(relative.to_string_lossy().into_owned())
}
