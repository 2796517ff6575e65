//! The browser's tabs: its page targets reconciled with boxd's list, new and closed tabs, the list
//! upstream shows, the current page's location, and the set-up of a tab boxd attaches to.

use serde_json::{Value, json};

use super::super::cdp::Cdp;
use super::super::events;
use super::super::pacing::{FramePump, Pacer};
use super::refs::Refs;
use super::settle::WATCH_MUTATIONS;
use super::{CALL, Context, Running, Tab, page};
use crate::tools::ToolError;

/// An open tab as the toolset's report names it: its target id (stable for the tab's life), the
/// address and title its page shows, and whether it is the current one.
#[derive(Debug, Clone)]
pub struct TabInfo {
    pub target: String,
    pub url: String,
    pub title: String,
    pub current: bool,
}

/// A page target as the browser lists it.
pub(super) struct PageTarget {
    pub(super) id: String,
    pub(super) url: String,
    pub(super) title: String,
    /// Its browser context's id (see [`super::contexts`]).
    pub(super) context: String,
}

impl Running {
    /// The open tabs in boxd's order, with what each shows (the browser's view of it, so a tab
    /// blocked by a dialog answers too).
    pub async fn tab_infos(&self) -> Result<Vec<TabInfo>, ToolError> {
        let targets = self.targets().await?;
        Ok(self
            .here
            .tabs
            .iter()
            .enumerate()
            .map(|(index, tab)| {
                let (url, title) = targets
                    .iter()
                    .find(|page| page.id == tab.target)
                    .map(|page| (page.url.clone(), page.title.clone()))
                    .unwrap_or_default();
                TabInfo {
                    target: tab.target.clone(),
                    url,
                    title,
                    current: index == self.here.current,
                }
            })
            .collect())
    }

    /// The target of the tab actions address now.
    pub fn current_target(&self) -> Option<String> {
        self.here
            .tabs
            .get(self.here.current)
            .map(|tab| tab.target.clone())
    }

    /// The index of the open tab of target `target`.
    pub fn tab_index(&self, target: &str) -> Option<usize> {
        self.here.tabs.iter().position(|tab| tab.target == target)
    }

    /// Makes tab `index` the one the next actions address, without bringing it to the front (a call
    /// addressed to a background tab leaves the active tab as it was).
    pub fn address_tab(&mut self, index: usize) {
        if index < self.here.tabs.len() {
            self.here.current = index;
        }
    }

    /// The browser's page targets (of every session), in its order.
    pub(super) async fn targets(&self) -> Result<Vec<PageTarget>, ToolError> {
        let answer = self
            .cdp()
            .call(None, "Target.getTargets", json!({}), CALL)
            .await?;
        Ok(answer["targetInfos"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|info| info["type"] == "page")
            .map(|info| {
                let field = |name: &str| info[name].as_str().unwrap_or_default().to_owned();
                PageTarget {
                    id: field("targetId"),
                    url: field("url"),
                    title: field("title"),
                    context: field("browserContextId"),
                }
            })
            .collect())
    }

    /// Reconciles the addressed session's tabs with the browser's pages of its context.
    pub(super) async fn sync_tabs(&mut self, viewport: (u32, u32)) -> Result<(), ToolError> {
        let mut targets = self.targets().await?;
        self.closing
            .retain(|closing| targets.iter().any(|page| page.id == *closing));
        self.disposed
            .retain(|gone| targets.iter().any(|page| page.context == *gone));
        targets.retain(|page| self.owns(&self.here, &page.context));
        let current = self
            .here
            .tabs
            .get(self.here.current)
            .map(|tab| tab.target.clone());
        let events = std::sync::Arc::clone(&self.cdp().events);
        self.here.tabs.retain(|tab| {
            let open = targets.iter().any(|page| page.id == tab.target);
            if !open {
                events.forget(&tab.session);
            }
            open
        });
        for PageTarget { id: target, .. } in &targets {
            if !self.here.tabs.iter().any(|tab| tab.target == *target)
                && !self.closing.contains(target)
            {
                let tab = attach(
                    self.cdp(),
                    target,
                    &self.here,
                    viewport,
                    &self.pacer,
                    self.process.frame_control,
                )
                .await?;
                self.here.tabs.push(tab);
            }
        }
        self.here.current =
            match current.and_then(|id| self.here.tabs.iter().position(|t| t.target == id)) {
                Some(index) => index,
                None => self
                    .here
                    .current
                    .min(self.here.tabs.len().saturating_sub(1)),
            };
        Ok(())
    }

    /// Opens a blank tab in the addressed session, made its current one.
    pub async fn new_tab(&mut self, viewport: (u32, u32)) -> Result<(), ToolError> {
        let mut params = json!({"url": "about:blank",
                                "enableBeginFrameControl": self.process.frame_control});
        if let Some(context) = &self.here.id {
            params["browserContextId"] = json!(context);
        }
        let created = self
            .cdp()
            .call(None, "Target.createTarget", params, CALL)
            .await?;
        let target = created["targetId"].as_str().unwrap_or_default().to_owned();
        let tab = attach(
            self.cdp(),
            &target,
            &self.here,
            viewport,
            &self.pacer,
            self.process.frame_control,
        )
        .await?;
        self.here.tabs.push(tab);
        self.here.current = self.here.tabs.len() - 1;
        Ok(())
    }

    pub async fn close_tab(&mut self, index: usize) -> Result<(), ToolError> {
        let Some(tab) = self.here.tabs.get(index) else {
            return Err(ToolError::Reported("no such tab".into()));
        };
        self.cdp()
            .call(
                None,
                "Target.closeTarget",
                json!({"targetId": tab.target}),
                CALL,
            )
            .await?;
        let tab = self.here.tabs.remove(index);
        self.cdp().events.forget(&tab.session);
        self.closing.push(tab.target);
        if self.here.current > index || self.here.current >= self.here.tabs.len() {
            self.here.current = self.here.current.saturating_sub(1);
        }
        Ok(())
    }

    /// `### Open tabs` as upstream lists them (1-based, the current one marked).
    pub async fn tab_list(&self) -> Result<String, ToolError> {
        if self.here.tabs.is_empty() {
            return Ok("### No tabs open".into());
        }
        let targets = self.targets().await?;
        let mut lines = vec!["### Open tabs".to_owned()];
        for (index, tab) in self.here.tabs.iter().enumerate() {
            let (url, mut title) = targets
                .iter()
                .find(|page| page.id == tab.target)
                .map(|page| (page.url.as_str(), page.title.as_str()))
                .unwrap_or_default();
            // The browser shows the address as the title of a page without one; upstream shows none.
            if title == url || url.split_once("://").is_some_and(|(_, rest)| rest == title) {
                title = "";
            }
            let current = if index == self.here.current {
                " (current)"
            } else {
                ""
            };
            lines.push(format!("- {}:{current} [{title}] ({url})", index + 1));
        }
        Ok(lines.join("\n"))
    }

    /// The current page's URL and title (from the browser's side while a dialog blocks the page or
    /// its renderer is gone).
    pub async fn location(&self) -> Result<(String, String), ToolError> {
        let tab = self.tab()?;
        let blocked = self.events(|events| events.dialog.is_some() || events.crashed)?;
        if !blocked
            && let Ok(answer) = self
                .cdp()
                .call(
                    Some(&tab.session),
                    "Runtime.evaluate",
                    json!({"expression": "[location.href, document.title]", "returnByValue": true}),
                    CALL,
                )
                .await
            && let Some([url, title]) = answer
                .pointer("/result/value")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
        {
            return Ok((
                url.as_str().unwrap_or_default().to_owned(),
                title.as_str().unwrap_or_default().to_owned(),
            ));
        }
        let info = self
            .cdp()
            .call(
                None,
                "Target.getTargetInfo",
                json!({"targetId": tab.target}),
                CALL,
            )
            .await?;
        let field = |name: &str| {
            info.pointer(&format!("/targetInfo/{name}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Ok((field("url"), field("title")))
    }
}

/// Attaches to the page `target` of session `context` and sets it up as a tab of it.
async fn attach(
    cdp: &Cdp,
    target: &str,
    context: &Context,
    viewport: (u32, u32),
    pacer: &Pacer,
    frame_control: bool,
) -> Result<Tab, ToolError> {
    let attached = cdp
        .call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            CALL,
        )
        .await?;
    let session = attached["sessionId"]
        .as_str()
        .ok_or_else(|| ToolError::Reported("the browser did not attach to the tab".into()))?
        .to_owned();
    // A page target's id is its main frame's.
    cdp.events.with(&session, |events| {
        events.main_frame = Some(target.to_owned());
        events.browser_context = context.id.clone();
    });
    let setup = [
        (
            "Page.addScriptToEvaluateOnNewDocument",
            json!({"source": WATCH_MUTATIONS}),
        ),
        ("Page.enable", json!({})),
        ("Runtime.enable", json!({})),
        // Frames in other processes come as sessions of their own (not waited for here).
        ("Target.setAutoAttach", events::auto_attach()),
        ("Network.enable", json!({})),
        (
            "Page.setInterceptFileChooserDialog",
            json!({"enabled": true}),
        ),
        (page::EMULATE_VIEWPORT, page::viewport_metrics(viewport)),
    ];
    futures_util::future::try_join_all(
        setup
            .into_iter()
            .map(|(method, params)| cdp.call(Some(&session), method, params, CALL)),
    )
    .await?;
    let frames = frame_control.then(|| FramePump::start(cdp, &session, pacer));
    Ok(Tab {
        target: target.to_owned(),
        session,
        refs: Refs::for_session(&context.name),
        frames,
        finder_world: None,
    })
}
