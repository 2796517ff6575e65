//! What the browser tells boxd without being asked, kept per tab (per attached session) so the tools
//! can answer from it: console messages, network requests, an open dialog or file chooser, loading and
//! navigation. Every list is bounded (oldest dropped first). Waiters watch one counter that moves on
//! every event.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::watch;

/// Console messages and network requests kept per tab, at most.
pub const MAX_LOG_ENTRIES: usize = 1000;
/// Downloads remembered (and listed in answers) at most, oldest dropped first.
pub const MAX_DOWNLOADS: usize = 50;

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

#[derive(Debug, Default)]
pub struct TabEvents {
    pub console: VecDeque<String>,
    pub requests: VecDeque<Request>,
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
    changed: watch::Sender<u64>,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            tabs: Mutex::default(),
            children: Mutex::default(),
            downloads: Mutex::default(),
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

fn push_bounded<T>(list: &mut VecDeque<T>, item: T) {
    if list.len() >= MAX_LOG_ENTRIES {
        list.pop_front();
    }
    list.push_back(item);
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

    fn browser_event(&self, method: &str, params: &Value) -> bool {
        let field = |name: &str| params[name].as_str().unwrap_or_default().to_owned();
        self.downloads(|downloads| match method {
            "Browser.downloadWillBegin" => {
                if downloads.len() >= MAX_DOWNLOADS {
                    downloads.pop_front();
                }
                downloads.push_back(Download {
                    guid: field("guid"),
                    suggested: field("suggestedFilename"),
                    state: DownloadState::InProgress,
                    saved: None,
                    announced: false,
                    reported: false,
                });
                true
            }
            "Browser.downloadProgress" => {
                let state = match params["state"].as_str() {
                    Some("completed") => DownloadState::Completed,
                    Some("canceled") => DownloadState::Canceled,
                    _ => return false,
                };
                let guid = params["guid"].as_str().unwrap_or_default();
                match downloads.iter_mut().find(|download| download.guid == guid) {
                    Some(download) => {
                        download.state = state;
                        true
                    }
                    None => false,
                }
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
                        .map(|args| args.iter().map(text_of).collect::<Vec<_>>().join(" "))
                        .unwrap_or_default();
                    push_bounded(
                        &mut tab.console,
                        format!("[{}] {text}", kind.to_uppercase()),
                    );
                }
                "Runtime.exceptionThrown" => {
                    let details = &params["exceptionDetails"];
                    let text = details
                        .pointer("/exception/description")
                        .and_then(Value::as_str)
                        .or_else(|| details.get("text").and_then(Value::as_str))
                        .unwrap_or("uncaught exception");
                    push_bounded(&mut tab.console, format!("[ERROR] {text}"));
                }
                "Network.requestWillBeSent" => {
                    let id = params["requestId"].as_str().unwrap_or_default().to_owned();
                    // A stream stays open for the page's life: nothing to wait for.
                    let stream = params["type"].as_str() == Some("EventSource");
                    if !stream && tab.in_flight.len() < MAX_LOG_ENTRIES {
                        tab.in_flight.insert(id.clone());
                    }
                    // A redirect reuses the id: the new hop is another request.
                    push_bounded(
                        &mut tab.requests,
                        Request {
                            id,
                            method: params
                                .pointer("/request/method")
                                .and_then(Value::as_str)
                                .unwrap_or("GET")
                                .to_owned(),
                            url: params
                                .pointer("/request/url")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            status: None,
                        },
                    );
                }
                "Network.responseReceived" => {
                    let id = params["requestId"].as_str().unwrap_or_default();
                    if let Some(request) = tab.requests.iter_mut().rev().find(|r| r.id == id) {
                        request.status = Some((
                            params
                                .pointer("/response/status")
                                .and_then(Value::as_i64)
                                .unwrap_or(0),
                            params
                                .pointer("/response/statusText")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        ));
                    }
                }
                "Network.loadingFinished" | "Network.loadingFailed" => {
                    let id = params["requestId"].as_str().unwrap_or_default();
                    tab.in_flight.remove(id);
                }
                "Page.javascriptDialogOpening" => {
                    tab.dialog = Some(Dialog {
                        kind: params["type"].as_str().unwrap_or("alert").to_owned(),
                        message: params["message"].as_str().unwrap_or_default().to_owned(),
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
            assert_eq!(tab.console, ["[WARN] low 3"]);
            assert_eq!(tab.requests[0].status, Some((201, "Created".into())));
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
            assert_eq!(tab.console[0], "[LOG] 5");
        });
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
            assert!(tab.console.is_empty());
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
