//! Sessions: isolated browser contexts of the one browser (`Target.createBrowserContext`, like an
//! incognito window), each with its own cookies, storage, tabs, refs and downloads directory. The
//! default session is the browser's own context, what every tool acts in when no session is named.
//!
//! A session is a set of tabs and its context's id ([`Context`]); every verb of [`Running`] acts on the
//! tabs of the session the call addresses (`here`), so none is written per session: addressing another
//! session swaps its tabs in ([`Running::address`]). Sessions live as long as the browser: when it
//! exits, only the default one comes back with the next browser, and the answer says so.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use super::super::launch::Process;
use super::{CALL, Running, Tab};
use crate::tools::ToolError;

/// The session of a call that names none: the browser's own context.
pub const DEFAULT: &str = "default";
/// Sessions open at once besides the default one.
pub const MAX_SESSIONS: usize = 16;
/// Characters of a session name a refusal repeats.
const MAX_NAME_SHOWN: usize = 64;

/// One session's tabs (see the module's documentation).
pub struct Context {
    /// `default`, or `s1`, `s2`, ... as [`super::Session`] handed it out.
    pub(super) name: String,
    /// The order sessions were opened in (0 for the default one), which lists keep.
    number: u64,
    /// The browser context's id; `None`: the browser's default context.
    pub(super) id: Option<String>,
    /// Where the browser writes this session's downloads, under their guids, until boxd moves them
    /// into the workspace.
    pub(super) downloads: PathBuf,
    pub(super) tabs: Vec<Tab>,
    pub(super) current: usize,
}

impl Context {
    /// The default session of a browser just started: no tabs yet.
    pub(super) fn default_session(process: &Process) -> Context {
        Context {
            name: DEFAULT.to_owned(),
            number: 0,
            id: None,
            downloads: process.downloads.clone(),
            tabs: Vec::new(),
            current: 0,
        }
    }
}

/// A session as `browser_session_list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub session: String,
    pub tabs: usize,
    /// The address of its current tab; `None` when it has no tab.
    pub current_url: Option<String>,
}

/// The refusal of a session that is not open.
pub(super) fn unknown(name: &str, open: &[String]) -> ToolError {
    let shown: String = name.chars().take(MAX_NAME_SHOWN).collect();
    ToolError::Reported(format!(
        "Unknown session {shown:?}: the open sessions are {}. browser_session_new opens one; \
         browser_session_list lists them.",
        open.join(", ")
    ))
}

/// Said after the browser went away with sessions open ("" when there were none).
pub fn lost(sessions: &[String]) -> String {
    if sessions.is_empty() {
        return String::new();
    }
    format!(
        " The sessions {} were closed with it; only the default session is open.",
        sessions.join(", ")
    )
}

impl Running {
    /// The open sessions other than the default one, in the order they were opened.
    pub fn session_names(&self) -> Vec<String> {
        let mut sessions: Vec<&Context> = std::iter::once(&self.here)
            .chain(&self.others)
            .filter(|context| context.id.is_some())
            .collect();
        sessions.sort_by_key(|context| context.number);
        sessions
            .into_iter()
            .map(|context| context.name.clone())
            .collect()
    }

    /// Every open session, the default one first.
    fn open_sessions(&self) -> Vec<String> {
        std::iter::once(DEFAULT.to_owned())
            .chain(self.session_names())
            .collect()
    }

    /// Sessions open besides the default one.
    pub fn session_count(&self) -> usize {
        std::iter::once(&self.here)
            .chain(&self.others)
            .filter(|context| context.id.is_some())
            .count()
    }

    /// Makes session `name` the one the tabs, refs and downloads of this call are taken from.
    pub(super) fn address(&mut self, name: &str) -> Result<(), ToolError> {
        if self.here.name == name {
            return Ok(());
        }
        let open = self.open_sessions();
        let Some(other) = self.others.iter_mut().find(|context| context.name == name) else {
            return Err(unknown(name, &open));
        };
        std::mem::swap(&mut self.here, other);
        Ok(())
    }

    /// Whether a page of browser context `browser_context` is a tab of `context`: of the default
    /// session when it is of no context boxd made (nor one it disposed, whose pages may linger).
    pub(super) fn owns(&self, context: &Context, browser_context: &str) -> bool {
        match &context.id {
            Some(id) => id == browser_context,
            None => {
                !std::iter::once(&self.here)
                    .chain(&self.others)
                    .any(|other| other.id.as_deref() == Some(browser_context))
                    && !self.disposed.iter().any(|gone| gone == browser_context)
            }
        }
    }

    /// The browser context of the session this call addresses (`None`: the default one).
    pub fn browser_context(&self) -> Option<&str> {
        self.here.id.as_deref()
    }

    /// Where each session's downloads are written, the addressed session's first.
    pub fn download_dirs(&self) -> Vec<PathBuf> {
        std::iter::once(&self.here)
            .chain(&self.others)
            .map(|context| context.downloads.clone())
            .collect()
    }

    /// Opens session `name`: a new browser context with its own downloads directory and one blank
    /// tab, addressed by the rest of the call. Nothing of it is left when a step fails.
    pub(super) async fn open_session(
        &mut self,
        name: String,
        number: u64,
        viewport: (u32, u32),
    ) -> Result<(), ToolError> {
        let created = self
            .cdp()
            .call(None, "Target.createBrowserContext", json!({}), CALL)
            .await?;
        let id = created["browserContextId"]
            .as_str()
            .ok_or_else(|| {
                ToolError::Reported("the browser did not create a browser context".into())
            })?
            .to_owned();
        let downloads = self.process.session_downloads(&name);
        let context = Context {
            name: name.clone(),
            number,
            id: Some(id.clone()),
            downloads: downloads.clone(),
            tabs: Vec::new(),
            current: 0,
        };
        let previous = std::mem::replace(&mut self.here, context);
        self.others.push(previous);
        // Saved under their guid in the session's own directory, as the default session's are.
        let behavior = json!({"behavior": "allowAndName", "browserContextId": id,
                              "downloadPath": downloads, "eventsEnabled": true});
        let opened = match self
            .cdp()
            .call(None, "Browser.setDownloadBehavior", behavior, CALL)
            .await
        {
            Ok(_) => self.new_tab(viewport).await,
            Err(err) => Err(err.into()),
        };
        if let Err(err) = opened {
            if let Err(cleanup) = self.close_session(&name).await {
                tracing::warn!(session = %name, "closing a session that failed to open: {cleanup:?}");
            }
            return Err(err);
        }
        Ok(())
    }

    /// Closes session `name`: its browser context is disposed (its pages with it, their renderers
    /// exit), its tabs and refs are forgotten, its downloads directory removed.
    pub(super) async fn close_session(&mut self, name: &str) -> Result<(), ToolError> {
        self.address(DEFAULT)?;
        let Some(index) = self
            .others
            .iter()
            .position(|context| context.name == name && context.id.is_some())
        else {
            return Err(unknown(name, &self.open_sessions()));
        };
        let context = self.others.remove(index);
        let events = self.browser_events();
        for tab in &context.tabs {
            events.forget(&tab.session);
        }
        let mut disposed = Ok(());
        if let Some(id) = &context.id {
            self.disposed.push(id.clone());
            events.forget_downloads_of(id);
            disposed = self
                .cdp()
                .call(
                    None,
                    "Target.disposeBrowserContext",
                    json!({"browserContextId": id}),
                    CALL,
                )
                .await
                .map(|_| ());
        }
        let downloads = context.downloads.clone();
        // Its frame pumps stop with its tabs.
        drop(context);
        let removed =
            tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&downloads) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            })
            .await;
        if let Ok(Err(err)) = removed {
            tracing::warn!(session = %name, "cannot remove the session's downloads: {err}");
        }
        Ok(disposed?)
    }

    /// Closes every tab of the addressed session: how many there were.
    pub async fn close_all_tabs(&mut self) -> Result<usize, ToolError> {
        let count = self.here.tabs.len();
        for index in (0..count).rev() {
            self.close_tab(index).await?;
        }
        Ok(count)
    }

    /// Every open session with its tabs (the browser's pages of its context, so pages it opened by
    /// itself count) and the address of its current tab, the default one first.
    pub async fn session_infos(&self) -> Result<Vec<SessionInfo>, ToolError> {
        let targets = self.targets().await?;
        let mut contexts: Vec<&Context> = std::iter::once(&self.here).chain(&self.others).collect();
        contexts.sort_by_key(|context| context.number);
        Ok(contexts
            .into_iter()
            .map(|context| {
                let pages: Vec<_> = targets
                    .iter()
                    .filter(|target| {
                        self.owns(context, &target.context) && !self.closing.contains(&target.id)
                    })
                    .collect();
                let current = context
                    .tabs
                    .get(context.current)
                    .and_then(|tab| pages.iter().find(|page| page.id == tab.target))
                    .or(pages.first());
                SessionInfo {
                    session: context.name.clone(),
                    tabs: pages.len(),
                    current_url: current.map(|page| page.url.clone()),
                }
            })
            .collect())
    }
}
