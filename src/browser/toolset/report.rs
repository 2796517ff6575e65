//! The `browser_state` every answer carries: the open tabs under stable `tab_id`s (`tab_1`, `tab_2`,
//! ..., never reused) with the active one marked, and what changed since the previous report as the
//! SDK's `BetaBrowserStateChange*` types (and its `BetaDialogDismissed`) define it: tabs opened,
//! downloads started, completed (with the file's path in the workspace) or failed, dialogs the
//! toolset dismissed.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::super::events::{Dialog, DownloadState};
use super::super::session::{Running, Session, TabInfo};
use super::super::tools::Browser;
use crate::tools::ToolError;

/// Dismissed dialogs kept for the next report at most (a page can open them in a loop); the rest are
/// counted.
pub const MAX_DIALOGS: usize = 20;

/// What the toolset reported last, and what it keeps between calls.
#[derive(Default)]
pub struct Reports {
    /// `tab_id`s by target id, for the open tabs.
    ids: HashMap<String, String>,
    /// The number of the last `tab_id` handed out.
    last_id: u64,
    /// The targets of the tabs in the last report; `None` before the first.
    reported_tabs: Option<HashSet<String>>,
    /// The last change reported of each download (by its id).
    downloads: HashMap<String, &'static str>,
    /// Dialogs dismissed since the last report, and how many more.
    dialogs: Vec<Dialog>,
    dialogs_dropped: usize,
    /// Console messages and requests read so far, per tab (by target id).
    pub(super) console_read: HashMap<String, u64>,
    pub(super) network_read: HashMap<String, u64>,
    /// The left mouse button is held (a `left_mouse_down` not yet released).
    pub(super) mouse_held: bool,
}

/// A report: the `browser_state` as the SDK's `BetaBrowserState` reads it, and the tabs' entries.
pub struct State {
    pub value: Value,
    pub tabs: Vec<Value>,
}

impl Reports {
    /// The `tab_id` of the tab of target `target`, given one if it has none yet.
    pub fn tab_id(&mut self, target: &str) -> String {
        if let Some(id) = self.ids.get(target) {
            return id.clone();
        }
        self.last_id = self.last_id.saturating_add(1);
        let id = format!("tab_{}", self.last_id);
        self.ids.insert(target.to_owned(), id.clone());
        id
    }

    /// The target of the open tab `tab_id` names.
    pub fn target_of(&self, tab_id: &str) -> Option<&str> {
        self.ids
            .iter()
            .find(|(_, id)| id.as_str() == tab_id)
            .map(|(target, _)| target.as_str())
    }

    /// Dismisses the dialogs the tabs show, kept for the next report; their kinds.
    pub async fn dismiss_dialogs(&mut self, running: &Running) -> Result<Vec<String>, ToolError> {
        let mut kinds = Vec::new();
        for dialog in running.dismiss_dialogs().await? {
            kinds.push(dialog.kind.clone());
            if self.dialogs.len() < MAX_DIALOGS {
                self.dialogs.push(dialog);
            } else {
                self.dialogs_dropped = self.dialogs_dropped.saturating_add(1);
            }
        }
        Ok(kinds)
    }

    /// The entry of a tab, as `BetaBrowserStateTabEntryParam`.
    fn entry(&mut self, tab: &TabInfo) -> Value {
        // The browser shows the address as the title of a page without one: such a page has none.
        let untitled = tab.title == tab.url
            || tab
                .url
                .split_once("://")
                .is_some_and(|(_, rest)| rest == tab.title);
        json!({
            "tab_id": self.tab_id(&tab.target),
            "title": if untitled { "" } else { tab.title.as_str() },
            "url": tab.url,
            "active": tab.current,
        })
    }

    /// The browser after a call (no browser is started for it: none running reports no tabs), and
    /// the changes since the previous report, which are then forgotten.
    pub async fn report(&mut self, browser: &Browser, session: &mut Session) -> State {
        let mut changes = Vec::new();
        let mut tabs = Vec::new();
        let running = match session.synced().await {
            Ok(running) => running,
            Err(err) => {
                tracing::debug!("reading the tabs for the browser state: {err}");
                None
            }
        };
        let mut open = HashSet::new();
        if let Some(running) = running {
            if let Err(err) = self.dismiss_dialogs(running).await {
                tracing::debug!("dismissing dialogs for the browser state: {err}");
            }
            // Saves the downloads that completed in the workspace (the playwright tools' answers
            // then leave them out, as said).
            let _ = browser.downloads_lines(running).await;
            changes.extend(self.download_changes(browser, running));
            match running.tab_infos().await {
                Ok(infos) => {
                    for info in &infos {
                        open.insert(info.target.clone());
                        tabs.push(self.entry(info));
                    }
                }
                Err(err) => tracing::debug!("listing the tabs for the browser state: {err}"),
            }
        }
        self.ids.retain(|target, _| open.contains(target));
        self.console_read.retain(|target, _| open.contains(target));
        self.network_read.retain(|target, _| open.contains(target));
        let opened: Vec<Value> = match &self.reported_tabs {
            Some(reported) => tabs
                .iter()
                .filter(|tab| {
                    tab["tab_id"]
                        .as_str()
                        .and_then(|id| self.target_of(id))
                        .is_some_and(|target| !reported.contains(target))
                })
                .map(|tab| json!({"type": "tab_opened", "tab_id": tab["tab_id"]}))
                .collect(),
            // The first report's tabs were there before the toolset: none was opened by a call.
            None => Vec::new(),
        };
        self.reported_tabs = Some(open);
        let mut changes = [opened, changes].concat();
        for dialog in self.dialogs.drain(..) {
            changes.push(json!({"type": "dialog_dismissed", "kind": dialog.kind,
                                "message": dialog.message}));
        }
        if self.dialogs_dropped > 0 {
            changes.push(json!({"type": "dialog_dismissed", "kind": "dialog",
                                "message": format!("and {} more dialogs", self.dialogs_dropped)}));
            self.dialogs_dropped = 0;
        }
        let mut value = json!({"tabs": tabs});
        if !changes.is_empty() {
            value["state_changes"] = Value::Array(changes);
        }
        State { value, tabs }
    }

    /// The downloads whose state moved since the last report, as state changes.
    fn download_changes(&mut self, browser: &Browser, running: &Running) -> Vec<Value> {
        let context = running.browser_context().map(str::to_owned);
        let downloads = running.browser_events().downloads(|downloads| {
            downloads
                .iter()
                .filter(|download| download.context == context)
                .cloned()
                .collect::<Vec<_>>()
        });
        let shown = browser.workspace_shown();
        let mut changes = Vec::new();
        let mut known = HashMap::new();
        for download in downloads {
            let (kind, change) = match (&download.state, &download.saved) {
                (DownloadState::InProgress, _) => (
                    "download_started",
                    json!({"type": "download_started", "download_id": download.guid,
                           "url": download.url}),
                ),
                (DownloadState::Completed, Some(saved)) => (
                    "download_completed",
                    json!({"type": "download_completed", "download_id": download.guid,
                           "url": download.url,
                           "path": shown.join(saved).display().to_string(),
                           "size_bytes": download.received}),
                ),
                (state, _) => {
                    let error = match state {
                        DownloadState::Completed => {
                            "it could not be saved in the workspace".to_owned()
                        }
                        DownloadState::TooLarge { received } => format!(
                            "stopped after {received} bytes: over the bound of bytes per download \
                             (--browser-max-download-bytes)"
                        ),
                        DownloadState::OverCount => {
                            "refused: this browser took as many downloads as it may \
                             (--browser-max-downloads)"
                                .to_owned()
                        }
                        _ => "canceled".to_owned(),
                    };
                    (
                        "download_failed",
                        json!({"type": "download_failed", "download_id": download.guid,
                               "url": download.url, "error": error}),
                    )
                }
            };
            if self.downloads.get(&download.guid) != Some(&kind) {
                changes.push(change);
            }
            known.insert(download.guid, kind);
        }
        // The browser keeps a bounded list of downloads: those it dropped are not reported again.
        self.downloads = known;
        changes
    }
}
