//! What the browser tells boxd without being asked, kept per tab (per attached session) so the tools
//! can answer from it: console messages, network requests, an open dialog or file chooser, loading and
//! navigation. Every list is bounded in entries and in bytes (oldest dropped first), and every text a
//! page controls (a console message, an exception, a URL, a dialog's message) is cut to
//! [`MAX_ENTRY_BYTES`] as it arrives: a page logging megabytes in a loop costs boxd a bounded few.
//! Waiters watch one counter that moves on every event.
//!
//! Its parts: the bounded logs and the cutting of page texts ([`log`]), the browser's downloads
//! ([`downloads`]) and out-of-process iframes ([`iframes`]); this file keeps each tab's state and
//! dispatches every event ([`Events::handle`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::watch;

mod downloads;
mod iframes;
mod log;

use downloads::DownloadPolicy;
pub use downloads::{Download, DownloadLimits, DownloadState};
use iframes::ChildFrame;
pub use iframes::{MAX_CHILD_FRAMES, auto_attach};
use log::{Log, Request, console_text, cut};
pub use log::{MAX_ENTRY_BYTES, MAX_LOG_BYTES, MAX_LOG_ENTRIES};

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
    /// The browser context of the tab's session (`None`: the default one): a download its main
    /// frame starts is that session's.
    pub browser_context: Option<String>,
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

    /// The browser context of the tab whose main frame is `frame` (`None`: the default one, or a
    /// frame that is no tab's).
    fn context_of_frame(&self, frame: &str) -> Option<String> {
        self.tabs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .values()
            .find(|tab| tab.main_frame.as_deref() == Some(frame))
            .and_then(|tab| tab.browser_context.clone())
    }

    pub fn forget(&self, session: &str) {
        self.tabs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(session);
        self.children().retain(|_, child| child.tab != session);
    }

    pub fn closed(&self) {
        self.changed
            .send_modify(|count| *count = count.wrapping_add(1));
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
                        mime: None,
                        sent_at: params["timestamp"].as_f64(),
                        done_at: None,
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
                    let mime = params
                        .pointer("/response/mimeType")
                        .and_then(Value::as_str)
                        .map(cut);
                    tab.requests.update_last(id, |request| {
                        request.status = Some(status);
                        request.mime = mime;
                    });
                }
                "Network.loadingFinished" | "Network.loadingFailed" => {
                    let id = params["requestId"].as_str().unwrap_or_default();
                    tab.in_flight.remove(id);
                    let at = params["timestamp"].as_f64();
                    tab.requests.update_last(id, |request| request.done_at = at);
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
}
