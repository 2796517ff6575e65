//! What the browser tells boxd without being asked, kept per tab (per attached session) so the tools
//! can answer from it: console messages, network requests, an open dialog or file chooser, loading and
//! navigation. Every list is bounded in entries and in bytes (oldest dropped first), and every text a
//! page controls (a console message, an exception, a URL, a dialog's message) is cut to
//! [`MAX_ENTRY_BYTES`] as it arrives: a page logging megabytes in a loop costs boxd a bounded few.
//! Waiters watch one counter that moves on every event.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::watch;

/// Console messages and network requests kept per tab, at most.
pub const MAX_LOG_ENTRIES: usize = 1000;
/// The bytes of one kept text a page controls (a console message, an exception, a request's URL, a
/// dialog's message), at most; the rest is cut, and the text says how much.
pub const MAX_ENTRY_BYTES: usize = 4096;
/// The bytes of a tab's console messages, and of its network requests, at most (each list on its
/// own): past it the oldest entries are dropped, as past [`MAX_LOG_ENTRIES`].
pub const MAX_LOG_BYTES: usize = 1024 * 1024;
/// Downloads remembered (and listed in answers) at most, oldest dropped first.
pub const MAX_DOWNLOADS: usize = 50;

/// The bounds of the downloads of one browser (`--browser-max-download-bytes`,
/// `--browser-max-downloads`): past them a download is cancelled, its partial file deleted, and the
/// next answer says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// The bytes of one download.
    pub max_bytes: u64,
    /// The downloads one browser takes (from its start; `browser_close` starts counting again).
    pub max_count: usize,
}

impl Default for DownloadLimits {
    fn default() -> Self {
        DownloadLimits {
            max_bytes: 100 * 1024 * 1024,
            max_count: 100,
        }
    }
}

/// What the downloads of one browser may still do, and what the reader must tell the browser.
#[derive(Debug, Default)]
struct DownloadPolicy {
    limits: DownloadLimits,
    /// Downloads let through so far.
    taken: usize,
    /// Downloads to cancel (their guids), sent by the reader as it gets to them.
    cancels: Vec<String>,
}

/// The events [`Events::handle`] keeps something of; the browser's other events are not parsed
/// past their method. Keep in step with `handle`'s match.
pub const HANDLED: &[&str] = &[
    "Browser.downloadWillBegin",
    "Browser.downloadProgress",
    "Runtime.consoleAPICalled",
    "Runtime.exceptionThrown",
    "Network.requestWillBeSent",
    "Network.responseReceived",
    "Network.loadingFinished",
    "Network.loadingFailed",
    "Page.javascriptDialogOpening",
    "Page.javascriptDialogClosed",
    "Page.fileChooserOpened",
    "Page.frameRequestedNavigation",
    "Page.frameScheduledNavigation",
    "Page.frameStartedLoading",
    "Page.frameStoppedLoading",
    "Page.frameNavigated",
    "Page.domContentEventFired",
    "Page.loadEventFired",
    "Inspector.targetCrashed",
    "Inspector.targetReloadedAfterCrash",
    "Input.dragIntercepted",
    "Target.attachedToTarget",
    "Target.detachedFromTarget",
];

/// Out-of-process frames remembered at most (across tabs); more are left unattached to snapshots.
pub const MAX_CHILD_FRAMES: usize = 256;

/// The `Target.setAutoAttach` parameters of every tab session and every frame session: frames
/// Chromium runs in another renderer process (site isolation) are attached as sessions of their own,
/// running at once (nothing waits for a debugger).
pub fn auto_attach() -> Value {
    serde_json::json!({"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true,
                       "filter": [{"type": "iframe"}]})
}

/// A frame Chromium runs in another renderer process (an out-of-process iframe), attached as its own
/// session: its frame id (its target id), the session of its parent frame's renderer and the session
/// of the tab it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildFrame {
    pub frame: String,
    pub parent: String,
    pub tab: String,
}

/// A download the browser started (`Browser.downloadWillBegin`), saved under its guid in the downloads
/// directory until boxd gives it its name.
#[derive(Debug, Clone)]
pub struct Download {
    pub guid: String,
    pub suggested: String,
    pub state: DownloadState,
    /// Its final name in the downloads directory, once boxd gave it one.
    pub saved: Option<String>,
    /// Said in an answer while still running: later answers do not wait for it again.
    pub announced: bool,
    /// Its outcome was said in an answer: later answers leave it out.
    pub reported: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownloadState {
    InProgress,
    Completed,
    Canceled,
    /// Stopped by boxd past [`DownloadLimits::max_bytes`], after `received` bytes.
    TooLarge {
        received: u64,
    },
    /// Refused by boxd past [`DownloadLimits::max_count`].
    OverCount,
}

impl DownloadState {
    /// Stopped by boxd: its partial file is to be deleted, and what the browser says of it later
    /// (cancelled, or even completed) changes nothing.
    pub fn stopped(&self) -> bool {
        matches!(
            self,
            DownloadState::TooLarge { .. } | DownloadState::OverCount
        )
    }
}

#[derive(Debug, Clone)]
pub struct Dialog {
    pub kind: String,
    pub message: String,
}

impl Dialog {
    /// How the modal state names it: `"alert" dialog with message "Hello"`.
    pub fn label(&self) -> String {
        format!(
            "\"{}\" dialog with message {}",
            self.kind,
            serde_json::to_string(&self.message).unwrap_or_default()
        )
    }
}

#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub method: String,
    pub url: String,
    pub status: Option<(i64, String)>,
}

impl Request {
    /// What it holds, for [`MAX_LOG_BYTES`] (its fields are cut as they arrive).
    fn size(&self) -> usize {
        let reason = self.status.as_ref().map_or(0, |(_, reason)| reason.len());
        self.id
            .len()
            .saturating_add(self.method.len())
            .saturating_add(self.url.len())
            .saturating_add(reason)
    }
}

/// A per-tab list bounded in entries ([`MAX_LOG_ENTRIES`]) and bytes ([`MAX_LOG_BYTES`]), the oldest
/// dropped first.
#[derive(Debug)]
pub struct Log<T> {
    entries: VecDeque<(T, usize)>,
    bytes: usize,
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log {
            entries: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<T> Log<T> {
    /// Keeps `item` of `size` bytes, dropping the oldest entries it has no room beside.
    fn push(&mut self, item: T, size: usize) {
        while !self.entries.is_empty()
            && (self.entries.len() >= MAX_LOG_ENTRIES
                || self.bytes.saturating_add(size) > MAX_LOG_BYTES)
        {
            if let Some((_, dropped)) = self.entries.pop_front() {
                self.bytes = self.bytes.saturating_sub(dropped);
            }
        }
        self.bytes = self.bytes.saturating_add(size);
        self.entries.push_back((item, size));
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.entries.iter().map(|(item, _)| item)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The bytes its entries hold.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Log<Request> {
    /// Changes the newest request with id `id`, its size accounted anew.
    fn update_last(&mut self, id: &str, change: impl FnOnce(&mut Request)) {
        let Some((request, size)) = self
            .entries
            .iter_mut()
            .rev()
            .find(|(request, _)| request.id == id)
        else {
            return;
        };
        change(request);
        let grown = request.size();
        self.bytes = self.bytes.saturating_sub(*size).saturating_add(grown);
        *size = grown;
    }
}

/// `text` cut to [`MAX_ENTRY_BYTES`] (at a character boundary), saying how much it was and how much is
/// kept: `xxxx… [cut: 8388608 bytes, kept 4096]`. Only the kept part is copied.
pub fn cut(text: &str) -> String {
    let mut kept = String::new();
    push_cut(&mut kept, text);
    end_cut(kept, text.len())
}

/// Appends to `kept` as much of `part` as leaves it at most one byte over [`MAX_ENTRY_BYTES`] (so that
/// [`end_cut`] can tell a text that had more), at a character boundary.
fn push_cut(kept: &mut String, part: &str) {
    let room = MAX_ENTRY_BYTES.saturating_add(1).saturating_sub(kept.len());
    let mut end = part.len().min(room);
    while !part.is_char_boundary(end) {
        end -= 1;
    }
    kept.push_str(&part[..end]);
}

/// `kept`, the start of a text of `total` bytes, as [`cut`] answers it.
fn end_cut(mut kept: String, total: usize) -> String {
    if total <= MAX_ENTRY_BYTES {
        return kept;
    }
    let mut length = MAX_ENTRY_BYTES.min(kept.len());
    while !kept.is_char_boundary(length) {
        length -= 1;
    }
    kept.truncate(length);
    kept.push_str(&format!("… [cut: {total} bytes, kept {length}]"));
    kept
}

/// A console message's text: its arguments' texts joined by spaces, cut as [`cut`] cuts, without
/// ever keeping more than the kept part.
fn console_text(args: &[Value]) -> String {
    let mut kept = String::new();
    let mut total: usize = 0;
    for (index, arg) in args.iter().enumerate() {
        let part = text_of(arg);
        if index > 0 {
            total = total.saturating_add(1);
            push_cut(&mut kept, " ");
        }
        total = total.saturating_add(part.len());
        push_cut(&mut kept, &part);
    }
    end_cut(kept, total)
}

#[derive(Debug, Default)]
pub struct TabEvents {
    pub console: Log<String>,
    pub requests: Log<Request>,
    pub dialog: Option<Dialog>,
    /// The `<input type=file>` whose chooser the page opened: the session of its renderer (the tab's,
    /// or an out-of-process frame's) and its backend node id there.
    pub file_chooser: Option<(String, i64)>,
    /// The main frame started loading a document and has not stopped.
    pub loading: bool,
    /// Moves when the main frame commits a new document (refs of the old one are void).
    pub documents: u64,
    pub dom_content_loaded: u64,
    pub loads: u64,
    /// The renderer of the tab's page exited; its session answers nothing until a navigation gives
    /// the tab a new one.
    pub crashed: bool,
    /// The id of the tab's main frame: only its loading and navigations are the tab's (a child
    /// frame that never stops loading must not hold every action for the settle cap).
    pub main_frame: Option<String>,
    /// Data of a drag the page started while drags are intercepted (`Input.dragIntercepted`).
    pub drag: Option<Value>,
    /// A new document was requested (a click on a link, a form submit, `location = ...`).
    pub navigation_requested: u64,
    pub stopped_loading: u64,
    /// Requests sent and not yet finished or failed (long-lived streams left out): what a settling
    /// page may still be waiting for.
    pub in_flight: HashSet<String>,
}

pub struct Events {
    tabs: Mutex<HashMap<String, TabEvents>>,
    /// Out-of-process frames by their session. Their own events never reach a tab's [`TabEvents`]
    /// (their documents and loads are not the tab's), except a file chooser they open.
    children: Mutex<HashMap<String, ChildFrame>>,
    /// Downloads are the browser's, not a tab's: a tab may close while its download runs.
    downloads: Mutex<VecDeque<Download>>,
    download_policy: Mutex<DownloadPolicy>,
    changed: watch::Sender<u64>,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            tabs: Mutex::default(),
            children: Mutex::default(),
            downloads: Mutex::default(),
            download_policy: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

fn text_of(value: &Value) -> String {
    if let Some(text) = value.get("value") {
        return match text {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
    }
    value
        .get("description")
        .or_else(|| value.get("unserializableValue"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| value.get("type").and_then(Value::as_str).unwrap_or(""))
        .to_owned()
}

/// Keeps a console line (its text already cut).
fn push_console(tab: &mut TabEvents, line: String) {
    let size = line.len();
    tab.console.push(line, size);
}

impl Events {
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether the tab attached as `session` shows a dialog (which blocks its renderer).
    pub fn dialog_open(&self, session: &str) -> bool {
        self.tabs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(session)
            .is_some_and(|events| events.dialog.is_some())
    }

    /// Reads (or changes) the events of the tab attached as `session`.
    pub fn with<T>(&self, session: &str, read: impl FnOnce(&mut TabEvents) -> T) -> T {
        let mut tabs = self
            .tabs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(tab) = tabs.get_mut(session) {
            return read(tab);
        }
        read(tabs.entry(session.to_owned()).or_default())
    }

    /// Reads (or changes) the browser's downloads.
    pub fn downloads<T>(&self, read: impl FnOnce(&mut VecDeque<Download>) -> T) -> T {
        let mut downloads = self
            .downloads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        read(&mut downloads)
    }

    pub fn forget(&self, session: &str) {
        self.tabs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(session);
        self.children().retain(|_, child| child.tab != session);
    }

    fn children(&self) -> std::sync::MutexGuard<'_, HashMap<String, ChildFrame>> {
        self.children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The out-of-process frames of the tab attached as `tab`, by their session.
    pub fn child_frames(&self, tab: &str) -> Vec<(String, ChildFrame)> {
        let mut frames: Vec<(String, ChildFrame)> = self
            .children()
            .iter()
            .filter(|(_, child)| child.tab == tab)
            .map(|(session, child)| (session.clone(), child.clone()))
            .collect();
        // A stable order (the map's is not), so a page's frames are walked alike every time.
        frames.sort_by(|a, b| a.1.frame.cmp(&b.1.frame));
        frames
    }

    /// Remembers a frame session attached under `session` (a tab's or another frame's); the new
    /// session when it is one, to be set up by the caller.
    fn attached(&self, session: &str, params: &Value) -> Option<String> {
        if params.pointer("/targetInfo/type").and_then(Value::as_str) != Some("iframe") {
            return None;
        }
        let child = params.get("sessionId").and_then(Value::as_str)?;
        let frame = params
            .pointer("/targetInfo/targetId")
            .and_then(Value::as_str)?;
        let mut children = self.children();
        if children.len() >= MAX_CHILD_FRAMES {
            return None;
        }
        let tab = children
            .get(session)
            .map_or_else(|| session.to_owned(), |parent| parent.tab.clone());
        children.insert(
            child.to_owned(),
            ChildFrame {
                frame: frame.to_owned(),
                parent: session.to_owned(),
                tab,
            },
        );
        Some(child.to_owned())
    }

    /// Forgets a frame session that went away, and the frames attached under it.
    fn detached(&self, params: &Value) {
        let Some(gone) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let mut children = self.children();
        let mut gone = vec![gone.to_owned()];
        while let Some(session) = gone.pop() {
            children.remove(&session);
            gone.extend(
                children
                    .iter()
                    .filter(|(_, child)| child.parent == session)
                    .map(|(session, _)| session.clone()),
            );
        }
    }

    pub fn closed(&self) {
        self.changed
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// Sets the bounds of this browser's downloads.
    pub fn set_download_limits(&self, limits: DownloadLimits) {
        self.policy().limits = limits;
    }

    /// The downloads boxd stopped since the last call (their guids): the browser is to cancel them.
    pub fn take_cancels(&self) -> Vec<String> {
        std::mem::take(&mut self.policy().cancels)
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, DownloadPolicy> {
        self.download_policy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn browser_event(&self, method: &str, params: &Value) -> bool {
        let field = |name: &str| cut(params[name].as_str().unwrap_or_default());
        let mut policy = self.policy();
        self.downloads(|downloads| match method {
            "Browser.downloadWillBegin" => {
                if downloads.len() >= MAX_DOWNLOADS {
                    downloads.pop_front();
                }
                let guid = field("guid");
                let state = if policy.taken >= policy.limits.max_count {
                    policy.cancels.push(guid.clone());
                    DownloadState::OverCount
                } else {
                    policy.taken = policy.taken.saturating_add(1);
                    DownloadState::InProgress
                };
                downloads.push_back(Download {
                    guid,
                    suggested: field("suggestedFilename"),
                    state,
                    saved: None,
                    announced: false,
                    reported: false,
                });
                true
            }
            "Browser.downloadProgress" => {
                let guid = params["guid"].as_str().unwrap_or_default();
                let Some(download) = downloads.iter_mut().find(|download| download.guid == guid)
                else {
                    return false;
                };
                if download.state.stopped() {
                    return false;
                }
                // The larger of what came and what the server announced: a download announced
                // over the bound is stopped at once.
                let received = params["receivedBytes"].as_f64().unwrap_or(0.0);
                let total = params["totalBytes"].as_f64().unwrap_or(0.0);
                let max = policy.limits.max_bytes;
                // Byte counts are whole numbers well within f64's exact range.
                if received > max as f64 || total > max as f64 {
                    download.state = DownloadState::TooLarge {
                        received: received.max(0.0) as u64,
                    };
                    policy.cancels.push(download.guid.clone());
                    return true;
                }
                download.state = match params["state"].as_str() {
                    Some("completed") => DownloadState::Completed,
                    Some("canceled") => DownloadState::Canceled,
                    _ => return false,
                };
                true
            }
            _ => false,
        })
    }

    /// Keeps what an event says. A frame session attached by it is returned: the caller sets it up
    /// (see [`auto_attach`]).
    pub fn handle(&self, session: Option<&str>, method: &str, params: &Value) -> Option<String> {
        let Some(session) = session else {
            if self.browser_event(method, params) {
                self.changed
                    .send_modify(|count| *count = count.wrapping_add(1));
            }
            return None;
        };
        match method {
            "Target.attachedToTarget" => {
                let attached = self.attached(session, params);
                self.changed
                    .send_modify(|count| *count = count.wrapping_add(1));
                return attached;
            }
            "Target.detachedFromTarget" => {
                self.detached(params);
                self.changed
                    .send_modify(|count| *count = count.wrapping_add(1));
                return None;
            }
            _ => {}
        }
        let frame_tab = self.children().get(session).map(|child| child.tab.clone());
        if let Some(tab) = frame_tab {
            // A frame's own loads, console and requests are not the tab's; only the file chooser
            // it opens is the tab's modal state.
            if method == "Page.fileChooserOpened"
                && let Some(node) = params.get("backendNodeId").and_then(Value::as_i64)
            {
                self.with(&tab, |tab| {
                    tab.file_chooser = Some((session.to_owned(), node))
                });
                self.changed
                    .send_modify(|count| *count = count.wrapping_add(1));
            }
            return None;
        }
        let is_main_frame = || params.pointer("/frame/parentId").is_none();
        let relevant = self.with(session, |tab| {
            let of_main_frame = || {
                let frame = params["frameId"].as_str();
                match (&tab.main_frame, frame) {
                    (Some(main), Some(frame)) => main == frame,
                    _ => true,
                }
            };
            match method {
                "Runtime.consoleAPICalled" => {
                    let kind = params.get("type").and_then(Value::as_str).unwrap_or("log");
                    let kind = match kind {
                        "warning" => "warn",
                        other => other,
                    };
                    let text = params
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|args| console_text(args))
                        .unwrap_or_default();
                    // The kind is the page's too (`console.table`, ...): cut like the text.
                    let kind = cut(&kind.to_uppercase());
                    push_console(tab, format!("[{kind}] {text}"));
                }
                "Runtime.exceptionThrown" => {
                    let details = &params["exceptionDetails"];
                    let text = details
                        .pointer("/exception/description")
                        .and_then(Value::as_str)
                        .or_else(|| details.get("text").and_then(Value::as_str))
                        .unwrap_or("uncaught exception");
                    push_console(tab, format!("[ERROR] {}", cut(text)));
                }
                "Network.requestWillBeSent" => {
                    let id = cut(params["requestId"].as_str().unwrap_or_default());
                    // A stream stays open for the page's life: nothing to wait for.
                    let stream = params["type"].as_str() == Some("EventSource");
                    if !stream && tab.in_flight.len() < MAX_LOG_ENTRIES {
                        tab.in_flight.insert(id.clone());
                    }
                    // A redirect reuses the id: the new hop is another request.
                    let request = Request {
                        id,
                        method: cut(params
                            .pointer("/request/method")
                            .and_then(Value::as_str)
                            .unwrap_or("GET")),
                        url: cut(params
                            .pointer("/request/url")
                            .and_then(Value::as_str)
                            .unwrap_or_default()),
                        status: None,
                    };
                    let size = request.size();
                    tab.requests.push(request, size);
                }
                "Network.responseReceived" => {
                    let id = params["requestId"].as_str().unwrap_or_default();
                    let status = (
                        params
                            .pointer("/response/status")
                            .and_then(Value::as_i64)
                            .unwrap_or(0),
                        cut(params
                            .pointer("/response/statusText")
                            .and_then(Value::as_str)
                            .unwrap_or_default()),
                    );
                    tab.requests
                        .update_last(id, |request| request.status = Some(status));
                }
                "Network.loadingFinished" | "Network.loadingFailed" => {
                    let id = params["requestId"].as_str().unwrap_or_default();
                    tab.in_flight.remove(id);
                }
                "Page.javascriptDialogOpening" => {
                    tab.dialog = Some(Dialog {
                        kind: cut(params["type"].as_str().unwrap_or("alert")),
                        message: cut(params["message"].as_str().unwrap_or_default()),
                    });
                }
                "Page.javascriptDialogClosed" => tab.dialog = None,
                "Page.fileChooserOpened" => {
                    tab.file_chooser = params
                        .get("backendNodeId")
                        .and_then(Value::as_i64)
                        .map(|node| (session.to_owned(), node));
                }
                "Page.frameRequestedNavigation" | "Page.frameScheduledNavigation"
                    if of_main_frame() =>
                {
                    tab.navigation_requested = tab.navigation_requested.wrapping_add(1);
                }
                "Page.frameStartedLoading" if of_main_frame() => tab.loading = true,
                "Page.frameStoppedLoading" if of_main_frame() => {
                    tab.loading = false;
                    tab.stopped_loading = tab.stopped_loading.wrapping_add(1);
                }
                "Page.frameNavigated" if is_main_frame() => {
                    tab.documents = tab.documents.wrapping_add(1);
                    tab.file_chooser = None;
                    tab.crashed = false;
                    if let Some(id) = params.pointer("/frame/id").and_then(Value::as_str) {
                        tab.main_frame = Some(id.to_owned());
                    }
                    // The old document's requests were cancelled with it; some say so, some do not.
                    tab.in_flight.clear();
                }
                "Page.domContentEventFired" => {
                    tab.dom_content_loaded = tab.dom_content_loaded.wrapping_add(1);
                }
                "Page.loadEventFired" => {
                    tab.loads = tab.loads.wrapping_add(1);
                    tab.loading = false;
                }
                "Inspector.targetCrashed" => tab.crashed = true,
                "Inspector.targetReloadedAfterCrash" => tab.crashed = false,
                "Input.dragIntercepted" => tab.drag = params.get("data").cloned(),
                _ => return false,
            }
            true
        });
        if relevant {
            self.changed
                .send_modify(|count| *count = count.wrapping_add(1));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn console_network_and_dialogs_are_kept_per_tab() {
        let events = Events::default();
        events.handle(
            Some("A"),
            "Runtime.consoleAPICalled",
            &json!({"type": "warning", "args": [{"type": "string", "value": "low"}, {"type": "number", "value": 3}]}),
        );
        events.handle(
            Some("A"),
            "Network.requestWillBeSent",
            &json!({"requestId": "1", "request": {"method": "POST", "url": "http://x/api"}}),
        );
        events.handle(
            Some("A"),
            "Network.responseReceived",
            &json!({"requestId": "1", "response": {"status": 201, "statusText": "Created"}}),
        );
        events.handle(
            Some("B"),
            "Page.javascriptDialogOpening",
            &json!({"type": "confirm", "message": "sure?"}),
        );
        events.with("A", |tab| {
            assert_eq!(tab.console.iter().collect::<Vec<_>>(), ["[WARN] low 3"]);
            assert_eq!(
                tab.requests.iter().next().and_then(|r| r.status.clone()),
                Some((201, "Created".into()))
            );
            assert!(tab.dialog.is_none());
        });
        assert_eq!(
            events.with("B", |tab| tab.dialog.clone()).unwrap().kind,
            "confirm"
        );
        for n in 0..MAX_LOG_ENTRIES + 5 {
            events.handle(
                Some("C"),
                "Runtime.consoleAPICalled",
                &json!({"type": "log", "args": [{"type": "number", "value": n}]}),
            );
        }
        events.with("C", |tab| {
            assert_eq!(tab.console.len(), MAX_LOG_ENTRIES);
            assert_eq!(tab.console.iter().next().unwrap(), "[LOG] 5");
        });
    }

    #[test]
    fn page_texts_are_cut_and_each_tabs_logs_are_bounded_in_bytes() {
        let events = Events::default();
        let big = "x".repeat(8 * 1024 * 1024);
        let string = |text: &str| json!({"type": "string", "value": text});
        events.handle(
            Some("T"),
            "Runtime.consoleAPICalled",
            &json!({"type": "log", "args": [string("a"), string(&big)]}),
        );
        events.handle(
            Some("T"),
            "Runtime.exceptionThrown",
            &json!({"exceptionDetails": {"exception": {"description": big}}}),
        );
        events.handle(
            Some("T"),
            "Network.requestWillBeSent",
            &json!({"requestId": "1", "request": {"method": "GET", "url": big}}),
        );
        events.handle(
            Some("T"),
            "Network.responseReceived",
            &json!({"requestId": "1", "response": {"status": 200, "statusText": big}}),
        );
        events.handle(
            Some("T"),
            "Page.javascriptDialogOpening",
            &json!({"type": "alert", "message": big}),
        );
        let total = big.len();
        events.with("T", |tab| {
            let console: Vec<&String> = tab.console.iter().collect();
            let log = format!(
                "[LOG] a {}… [cut: {} bytes, kept 4096]",
                &big[..4094],
                total + 2
            );
            assert_eq!(console[0], &log);
            let error = format!("[ERROR] {}… [cut: {total} bytes, kept 4096]", &big[..4096]);
            assert_eq!(console[1], &error);
            let request = tab.requests.iter().next().unwrap();
            assert!(
                request
                    .url
                    .ends_with(&format!("… [cut: {total} bytes, kept 4096]"))
            );
            assert!(request.url.len() < MAX_ENTRY_BYTES + 64);
            let reason = &request.status.as_ref().unwrap().1;
            assert!(reason.len() < MAX_ENTRY_BYTES + 64);
            assert_eq!(tab.requests.bytes(), request.size());
            let dialog = tab.dialog.as_ref().unwrap();
            assert!(dialog.message.len() < MAX_ENTRY_BYTES + 64);
        });
        // A character is never split.
        assert_eq!(
            cut(&"é".repeat(3000)),
            format!("{}… [cut: 6000 bytes, kept 4096]", "é".repeat(2048))
        );
        assert_eq!(cut("short"), "short");
        // 1000 lines of 4 KiB are 4 MiB: the tab keeps the newest within 1 MiB.
        let line = "y".repeat(MAX_ENTRY_BYTES);
        for n in 0..MAX_LOG_ENTRIES {
            events.handle(
                Some("U"),
                "Runtime.consoleAPICalled",
                &json!({"type": "log", "args": [{"type": "number", "value": n}, string(&line)]}),
            );
        }
        events.with("U", |tab| {
            assert!(tab.console.bytes() <= MAX_LOG_BYTES);
            let kept: usize = tab.console.iter().map(String::len).sum();
            assert_eq!(kept, tab.console.bytes());
            assert!(tab.console.len() > 200, "{}", tab.console.len());
            assert!(tab.console.iter().last().unwrap().starts_with("[LOG] 999 "));
        });
    }

    #[test]
    fn downloads_past_their_bounds_are_stopped_and_cancelled() {
        let events = Events::default();
        events.set_download_limits(DownloadLimits {
            max_bytes: 1000,
            max_count: 2,
        });
        let begin = |guid: &str| {
            events.handle(
                None,
                "Browser.downloadWillBegin",
                &json!({"guid": guid, "suggestedFilename": "f.bin"}),
            );
        };
        let progress = |guid: &str, received: u64, total: u64, state: &str| {
            events.handle(
                None,
                "Browser.downloadProgress",
                &json!({"guid": guid, "receivedBytes": received, "totalBytes": total, "state": state}),
            );
        };
        begin("a");
        begin("b");
        begin("c");
        progress("a", 500, 500, "completed");
        // Announced over the bound: stopped before a byte came.
        progress("b", 0, 5000, "inProgress");
        // The browser's later word on a stopped download changes nothing.
        progress("b", 0, 5000, "canceled");
        let states: Vec<DownloadState> =
            events.downloads(|list| list.iter().map(|d| d.state.clone()).collect());
        assert_eq!(
            states,
            [
                DownloadState::Completed,
                DownloadState::TooLarge { received: 0 },
                DownloadState::OverCount
            ]
        );
        assert_eq!(events.take_cancels(), ["c", "b"]);
        assert!(events.take_cancels().is_empty());
    }

    #[test]
    fn only_the_main_frame_loads_and_navigates_for_the_tab() {
        let events = Events::default();
        events.with("T", |tab| tab.main_frame = Some("main".into()));
        for method in ["Page.frameStartedLoading", "Page.frameRequestedNavigation"] {
            events.handle(Some("T"), method, &json!({"frameId": "child"}));
        }
        events.with("T", |tab| {
            assert!(!tab.loading);
            assert_eq!(tab.navigation_requested, 0);
        });
        events.handle(
            Some("T"),
            "Page.frameStartedLoading",
            &json!({"frameId": "main"}),
        );
        // A child frame that stops does not end the main frame's load.
        events.handle(
            Some("T"),
            "Page.frameStoppedLoading",
            &json!({"frameId": "child"}),
        );
        events.with("T", |tab| assert!(tab.loading));
        events.handle(Some("T"), "Inspector.targetCrashed", &json!({}));
        events.handle(
            Some("T"),
            "Page.frameNavigated",
            &json!({"frame": {"id": "main2"}}),
        );
        events.with("T", |tab| {
            assert!(!tab.crashed, "a new document has a new renderer");
            assert_eq!(tab.main_frame.as_deref(), Some("main2"));
        });
    }

    #[test]
    fn every_event_let_through_is_one_handle_keeps() {
        let events = Events::default();
        let changes = events.subscribe();
        for method in HANDLED {
            let before = *changes.borrow();
            let (session, params) = match *method {
                "Browser.downloadWillBegin" => (None, json!({"guid": "g"})),
                "Browser.downloadProgress" => (None, json!({"guid": "g", "state": "completed"})),
                "Target.attachedToTarget" => (
                    Some("T"),
                    json!({"sessionId": "F", "targetInfo": {"type": "iframe", "targetId": "X"}}),
                ),
                "Target.detachedFromTarget" => (Some("T"), json!({"sessionId": "F"})),
                _ => (Some("T"), json!({})),
            };
            events.handle(session, method, &params);
            assert_ne!(
                *changes.borrow(),
                before,
                "{method} is let through but not kept"
            );
        }
    }

    #[test]
    fn frame_sessions_are_tracked_per_tab_and_their_events_are_not_the_tabs() {
        let events = Events::default();
        let iframe = |session: &str, frame: &str| json!({"sessionId": session, "targetInfo": {"type": "iframe", "targetId": frame}});
        assert_eq!(
            events.handle(Some("T"), "Target.attachedToTarget", &iframe("C", "F1")),
            Some("C".into())
        );
        // A frame in the frame: attached under the frame's session, still the tab's.
        assert_eq!(
            events.handle(Some("C"), "Target.attachedToTarget", &iframe("D", "F2")),
            Some("D".into())
        );
        // Workers and other targets are not frames.
        let worker = json!({"sessionId": "W", "targetInfo": {"type": "worker", "targetId": "W1"}});
        assert_eq!(
            events.handle(Some("T"), "Target.attachedToTarget", &worker),
            None
        );
        let frames = events.child_frames("T");
        let sessions: Vec<&str> = frames.iter().map(|(session, _)| session.as_str()).collect();
        assert_eq!(sessions, ["C", "D"]);
        assert_eq!(
            frames[1].1,
            ChildFrame {
                frame: "F2".into(),
                parent: "C".into(),
                tab: "T".into()
            }
        );
        // The frame's own document and load do not move the tab's counters, nor make a tab of it.
        events.handle(Some("T"), "Page.loadEventFired", &json!({}));
        events.handle(
            Some("C"),
            "Page.frameNavigated",
            &json!({"frame": {"id": "F1"}}),
        );
        events.handle(Some("C"), "Page.loadEventFired", &json!({}));
        events.handle(
            Some("C"),
            "Runtime.consoleAPICalled",
            &json!({"type": "log"}),
        );
        events.with("T", |tab| {
            assert_eq!((tab.documents, tab.loads), (0, 1));
            assert_eq!(tab.console.len(), 0);
        });
        assert!(!events.tabs.lock().unwrap().contains_key("C"));
        // Its file chooser is the tab's modal state, naming the frame's session.
        events.handle(
            Some("D"),
            "Page.fileChooserOpened",
            &json!({"backendNodeId": 7}),
        );
        assert_eq!(
            events.with("T", |tab| tab.file_chooser.clone()),
            Some(("D".into(), 7))
        );
        // A frame that goes away takes the frames in it along.
        events.handle(
            Some("T"),
            "Target.detachedFromTarget",
            &json!({"sessionId": "C"}),
        );
        assert!(events.child_frames("T").is_empty());
        events.handle(Some("T"), "Target.attachedToTarget", &iframe("E", "F3"));
        events.forget("T");
        assert!(events.child_frames("T").is_empty());
    }
}
