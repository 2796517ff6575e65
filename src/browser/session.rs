//! The one browser and its tabs, as the tools see them: launched on the first call, relaunched on the
//! next call after it died (and the answer says so), tabs reconciled with the browser's own list on
//! every call (a page may open or close tabs by itself), refs kept per tab.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::cdp::{Cdp, CdpError};
use super::events::{self, TabEvents};
use super::frames::{ActiveCall, FramePump, Pacer};
use super::launch::{self, Isolation, Options, Process};
use super::snapshot::{self, MAX_SNAPSHOT_CHARS, NodeKey};
use crate::core::health::Health;
use crate::tools::ToolError;

mod page;
pub use page::{Capture, Image};

/// An ordinary protocol call's bound.
pub const CALL: Duration = Duration::from_secs(10);
/// Bound of the work of the page itself: a navigation's commit, a screenshot or PDF of a big page.
pub const SLOW_CALL: Duration = Duration::from_secs(30);
/// How long an action waits for the page to settle: a started navigation to commit and the DOM to be
/// quiet for [`QUIET`].
pub const SETTLE_CAP: Duration = Duration::from_secs(3);
/// The DOM is settled when it has not changed for this long.
const QUIET: Duration = Duration::from_millis(100);
/// Installed in every document before its scripts run: the time of the last DOM change since the
/// document finished loading (0: none), so a settle after the load event can tell at once that nothing
/// moved, instead of waiting out a quiet window. Changes while the parser builds the page are no sign
/// of pending work; changes after `load` (a load handler, a fetch's answer being rendered) are. It sits
/// on the page's window under a registered symbol, not enumerable, so page code does not trip on it.
const WATCH_MUTATIONS: &str = "(() => { const key = Symbol.for('boxd.settle'); \
    if (Object.prototype.hasOwnProperty.call(window, key)) return; const state = { last: 0 }; \
    Object.defineProperty(window, key, { value: state }); new MutationObserver(() => { \
    if (document.readyState === 'complete') state.last = performance.now(); }).observe(document, \
    { subtree: true, childList: true, attributes: true, characterData: true }); })()";
/// Refs kept per tab before the oldest document's are forgotten (a page that churns nodes forever
/// would otherwise grow the map without bound).
const MAX_REFS: usize = 200_000;
/// Renderer sessions refs are kept for before all of them are forgotten (a page whose frames keep
/// moving to new processes would otherwise grow the list without bound).
const MAX_SCOPES: usize = 1024;
/// Child frames a snapshot walks at most (a page of endless nested iframes costs two calls per frame).
pub const MAX_FRAMES: usize = 16;
/// The largest accessibility tree of a tab's page a snapshot takes, in bytes of the browser's answer
/// (a page of about 10 MB of text). A larger one is read past, not kept, and the answer says the page
/// is too large to snapshot: the browser and its tabs are left as they are, and boxd holds at most
/// this much (with its parse) per snapshot.
pub const MAX_TREE_BYTES: usize = 32 * 1024 * 1024;
/// The largest DOM snapshot (read only to find the elements that look clickable) a snapshot takes;
/// past it those elements get no refs of their own.
pub const MAX_DOM_BYTES: usize = 16 * 1024 * 1024;
/// The bytes of the trees and DOM snapshots of all child frames of one snapshot together; frames past
/// it are left empty, and the answer says so.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// A ref's frame (in another process) went away between the snapshot and the action.
pub const FRAME_GONE: &str = "The frame of that element is no longer in the page (it was removed or \
    navigated). Take a new snapshot (browser_snapshot) and use a ref from it.";

pub const NO_PAGE: &str =
    "No open pages available. Use the \"browser_navigate\" tool to navigate to a page first.";

/// What the model reads when the browser fails a call: what became of the browser and what to do.
impl From<CdpError> for ToolError {
    fn from(err: CdpError) -> Self {
        ToolError::Reported(match err {
            CdpError::Closed => {
                "The browser exited during this call; the next call starts a new one.".to_owned()
            }
            CdpError::Timeout(..) => {
                format!("{err}. The page may be busy or stuck; try again, or navigate elsewhere.")
            }
            CdpError::Protocol(message) => format!("The browser refused the action: {message}"),
            CdpError::TooLarge { .. } => format!(
                "{err}: it was not kept. The browser and its tabs are unharmed; ask for less (a \
                 narrower page, an element instead of the whole page)."
            ),
        })
    }
}

/// A renderer refs were handed out in: the session reaching it and, for a frame in another process,
/// the `<iframe>` hosting it (the scope of its parent's renderer and the iframe's backend node id
/// there).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scope {
    session: String,
    host: Option<NodeKey>,
}

/// The tab's refs: each number names a node by its scope (an index of `scopes`) and its backend node
/// id there, since backend node ids are per renderer process.
#[derive(Default)]
pub struct Refs {
    by_node: HashMap<NodeKey, u64>,
    by_ref: HashMap<u64, NodeKey>,
    scopes: Vec<Scope>,
    next: u64,
    document: u64,
}

/// A ref's DOM node, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The session of the renderer holding it: the tab's own for the page and its same-process
    /// frames, a frame's own for a frame in another process.
    session: String,
    backend: i64,
    /// The `<iframe>` elements hosting its frame when that runs in another process, innermost
    /// first, each as (the session of its renderer, its backend node id there).
    hosts: Vec<(String, i64)>,
}

/// A ref's element, found live in its page: what tools act on, without the protocol's ids.
pub struct Element {
    node: Located,
    /// The protocol's handle of the element in its renderer.
    object: String,
}

impl Element {
    pub fn node(&self) -> &Located {
        &self.node
    }
}

impl Refs {
    /// Refs name nodes of one document: a new document voids them (its node ids may repeat).
    /// Numbers keep growing, so an old ref can never name a node of the new document.
    fn sync(&mut self, document: u64) {
        if self.document != document
            || self.by_node.len() > MAX_REFS
            || self.scopes.len() > MAX_SCOPES
        {
            self.by_node.clear();
            self.by_ref.clear();
            self.scopes.clear();
            self.document = document;
        }
    }

    /// The scope of the renderer reached by `session`, added (hosted by `host`) if new. A session
    /// reaches one frame's renderer for its whole life, so its host never changes.
    fn scope(&mut self, session: &str, host: Option<NodeKey>) -> usize {
        if let Some(known) = self
            .scopes
            .iter()
            .position(|scope| scope.session == session)
        {
            return known;
        }
        self.scopes.push(Scope {
            session: session.to_owned(),
            host,
        });
        self.scopes.len() - 1
    }

    /// Numbers are shared by all frames of the tab, so the `fN` prefix only tells the reader where a
    /// node is.
    fn assign(&mut self, node: NodeKey, frame: usize) -> String {
        let number = match self.by_node.get(&node) {
            Some(number) => *number,
            None => {
                self.next += 1;
                self.by_node.insert(node, self.next);
                self.by_ref.insert(self.next, node);
                self.next
            }
        };
        match frame {
            0 => format!("e{number}"),
            frame => format!("f{frame}e{number}"),
        }
    }

    /// The node ref number `number` names, with the iframes hosting its renderer.
    fn locate(&self, number: u64) -> Option<Located> {
        let (scope, backend) = *self.by_ref.get(&number)?;
        let own = self.scopes.get(scope)?;
        let mut hosts = Vec::new();
        let mut host = own.host;
        while let Some((parent, owner)) = host {
            // Hosts point to earlier scopes; the bound only guards against a malformed chain.
            if hosts.len() >= self.scopes.len() {
                return None;
            }
            let parent = self.scopes.get(parent)?;
            hosts.push((parent.session.clone(), owner));
            host = parent.host;
        }
        Some(Located {
            session: own.session.clone(),
            backend,
            hosts,
        })
    }
}

pub struct Tab {
    target: String,
    session: String,
    refs: Refs,
    /// Sends the tab's frames when boxd paces them (the headless shell).
    frames: Option<FramePump>,
}

pub struct Running {
    process: Process,
    tabs: Vec<Tab>,
    current: usize,
    pacer: Pacer,
    /// Targets this session closed that the browser still lists: `Target.closeTarget` answers before
    /// the target is gone, and attaching to a closing one waits out every setup call.
    closing: Vec<String>,
    /// The answer's location and snapshot, asked for together with the settle check after a load and
    /// kept when that check found the page settled at once (see [`Running::settle_loaded`]); only the
    /// answer of the same call uses it.
    ahead: Option<Ahead>,
}

pub struct Ahead {
    session: String,
    marks: Marks,
    location: (String, String),
    parts: SnapshotParts,
}

pub struct Session {
    running: Option<Running>,
    /// Said once, in the next answer: the browser had died and was started again.
    notice: Option<String>,
    options: Options,
    /// Tool activity, which sets the pace of the tabs' frames.
    pacer: Pacer,
    /// The family's health, told when the browser falls back to `--no-sandbox`.
    health: Option<Health>,
}

impl Session {
    pub fn new(options: Options) -> Session {
        Session {
            running: None,
            notice: None,
            options,
            pacer: Pacer::default(),
            health: None,
        }
    }

    pub fn set_isolation(&mut self, isolation: Isolation, health: Health) {
        self.options.isolation = isolation;
        self.health = Some(health);
    }

    /// Starts the browser; if its sandbox is refused (the probe passed but Chromium found otherwise),
    /// starts it again with `--no-sandbox`, for good, and says so in the log and `/readyz`.
    async fn launch(&mut self) -> Result<Process, ToolError> {
        match launch::launch(&self.options).await {
            Ok(process) => Ok(process),
            Err(failure) if failure.sandbox_refused => {
                self.options.isolation.no_sandbox = Some(format!(
                    "Chromium's sandbox did not start ({})",
                    failure.message
                ));
                let detail = self.options.isolation.describe();
                tracing::warn!("{detail}");
                if let Some(health) = &self.health {
                    health.ready_with(detail);
                }
                launch::launch(&self.options)
                    .await
                    .map_err(|failure| ToolError::Reported(failure.message))
            }
            Err(failure) => Err(ToolError::Reported(failure.message)),
        }
    }

    /// The running browser with its tabs reconciled, launched (again) if needed. A browser found dead
    /// (before the call or by its first request) is started again once, and the answer says so.
    pub async fn browser(&mut self) -> Result<&mut Running, ToolError> {
        let viewport = self.options.viewport;
        let mut attempts = 0;
        loop {
            attempts += 1;
            if let Some(running) = self.running.as_mut()
                && running.process.cdp.is_closed()
            {
                let words = running.process.last_words().await;
                running.process.close().await;
                self.running = None;
                self.notice = Some(format!(
                    "The browser had exited{words}; a new one was started: earlier tabs, refs and \
                     page state are gone."
                ));
            }
            if self.running.is_none() {
                let process = self.launch().await?;
                self.running = Some(Running {
                    process,
                    tabs: Vec::new(),
                    current: 0,
                    pacer: self.pacer.clone(),
                    closing: Vec::new(),
                    ahead: None,
                });
            }
            let Some(running) = self.running.as_mut() else {
                return Err(ToolError::Reported("the browser is not running".into()));
            };
            match running.sync_tabs(viewport).await {
                Err(_) if attempts == 1 && running.process.cdp.is_closed() => continue,
                Err(failure) => return Err(failure),
                Ok(()) => break,
            }
        }
        self.running
            .as_mut()
            .ok_or_else(|| ToolError::Reported("the browser is not running".into()))
    }

    /// The browser with a current tab (a new blank one if every tab was closed).
    pub async fn page(&mut self) -> Result<&mut Running, ToolError> {
        let viewport = self.options.viewport;
        let running = self.browser().await?;
        if running.tabs.is_empty() {
            running.new_tab(viewport).await?;
        }
        Ok(running)
    }

    /// Marks a tool call as running for its duration (the tabs' frames come at a call's pace).
    pub fn call_started(&self) -> ActiveCall {
        self.pacer.call()
    }

    /// What the next answer says first (the browser had died and was started again), once.
    pub fn take_notice(&mut self) -> Option<String> {
        self.notice.take()
    }

    /// The viewport tabs get (new ones, and the browser's window when it starts).
    pub fn viewport(&self) -> (u32, u32) {
        self.options.viewport
    }

    pub fn set_viewport(&mut self, viewport: (u32, u32)) {
        self.options.viewport = viewport;
    }

    /// Closes the browser (a no-op when none runs).
    pub async fn close(&mut self) -> bool {
        match self.running.take() {
            Some(mut running) => {
                running.process.close().await;
                true
            }
            None => false,
        }
    }
}

impl Running {
    /// Where uploads are copied for a browser under its own user, and that user (see
    /// [`launch::stage_uploads`]); `None` when it reads the files where they are.
    pub fn upload_staging(&self) -> Option<(std::path::PathBuf, crate::core::child::Identity)> {
        self.process.upload_staging()
    }
}

impl Running {
    fn cdp(&self) -> &Cdp {
        &self.process.cdp
    }

    fn tab(&self) -> Result<&Tab, ToolError> {
        self.tabs
            .get(self.current)
            .ok_or_else(|| ToolError::Reported(NO_PAGE.into()))
    }

    fn tab_mut(&mut self) -> Result<&mut Tab, ToolError> {
        self.tabs
            .get_mut(self.current)
            .ok_or_else(|| ToolError::Reported(NO_PAGE.into()))
    }

    pub fn events<T>(&self, read: impl FnOnce(&mut TabEvents) -> T) -> Result<T, ToolError> {
        let session = &self.tab()?.session;
        Ok(self.cdp().events.with(session, read))
    }

    /// The browser's page targets, in its order: (target id, url, title).
    async fn targets(&self) -> Result<Vec<(String, String, String)>, ToolError> {
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
                (field("targetId"), field("url"), field("title"))
            })
            .collect())
    }

    async fn sync_tabs(&mut self, viewport: (u32, u32)) -> Result<(), ToolError> {
        let targets = self.targets().await?;
        self.closing
            .retain(|closing| targets.iter().any(|(id, ..)| id == closing));
        let current = self.tabs.get(self.current).map(|tab| tab.target.clone());
        let events = std::sync::Arc::clone(&self.cdp().events);
        self.tabs.retain(|tab| {
            let open = targets.iter().any(|(id, ..)| *id == tab.target);
            if !open {
                events.forget(&tab.session);
            }
            open
        });
        for (target, ..) in &targets {
            if !self.tabs.iter().any(|tab| tab.target == *target) && !self.closing.contains(target)
            {
                let tab = attach(
                    self.cdp(),
                    target,
                    viewport,
                    &self.pacer,
                    self.process.frame_control,
                )
                .await?;
                self.tabs.push(tab);
            }
        }
        self.current = match current.and_then(|id| self.tabs.iter().position(|t| t.target == id)) {
            Some(index) => index,
            None => self.current.min(self.tabs.len().saturating_sub(1)),
        };
        Ok(())
    }

    pub async fn new_tab(&mut self, viewport: (u32, u32)) -> Result<(), ToolError> {
        let created = self
            .cdp()
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank",
                       "enableBeginFrameControl": self.process.frame_control}),
                CALL,
            )
            .await?;
        let target = created["targetId"].as_str().unwrap_or_default().to_owned();
        let tab = attach(
            self.cdp(),
            &target,
            viewport,
            &self.pacer,
            self.process.frame_control,
        )
        .await?;
        self.tabs.push(tab);
        self.current = self.tabs.len() - 1;
        Ok(())
    }

    pub async fn close_tab(&mut self, index: usize) -> Result<(), ToolError> {
        let Some(tab) = self.tabs.get(index) else {
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
        let tab = self.tabs.remove(index);
        self.cdp().events.forget(&tab.session);
        self.closing.push(tab.target);
        if self.current > index || self.current >= self.tabs.len() {
            self.current = self.current.saturating_sub(1);
        }
        Ok(())
    }

    /// `### Open tabs` as upstream lists them (1-based, the current one marked).
    pub async fn tab_list(&self) -> Result<String, ToolError> {
        if self.tabs.is_empty() {
            return Ok("### No tabs open".into());
        }
        let targets = self.targets().await?;
        let mut lines = vec!["### Open tabs".to_owned()];
        for (index, tab) in self.tabs.iter().enumerate() {
            let (url, mut title) = targets
                .iter()
                .find(|(id, ..)| *id == tab.target)
                .map(|(_, url, title)| (url.as_str(), title.as_str()))
                .unwrap_or_default();
            // The browser shows the address as the title of a page without one; upstream shows none.
            if title == url || url.split_once("://").is_some_and(|(_, rest)| rest == title) {
                title = "";
            }
            let current = if index == self.current {
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

    /// The modal state lines (an open dialog, a file chooser), empty when there is none.
    /// A dialog another tab shows is listed too: its page is blocked until it is answered there.
    pub fn modal_lines(&self) -> Result<Vec<String>, ToolError> {
        let mut lines = self.events(|events| {
            let mut lines = Vec::new();
            if let Some(dialog) = &events.dialog {
                lines.push(format!(
                    "- [{}]: can be handled by the \"browser_handle_dialog\" tool",
                    dialog.label()
                ));
            }
            if events.file_chooser.is_some() {
                lines.push(
                    "- [File chooser]: can be handled by the \"browser_file_upload\" tool".into(),
                );
            }
            lines
        })?;
        for (index, tab) in self.tabs.iter().enumerate() {
            if index == self.current {
                continue;
            }
            if let Some(dialog) = self
                .cdp()
                .events
                .with(&tab.session, |events| events.dialog.clone())
            {
                lines.push(format!(
                    "- [{}] in tab {}: select it (browser_tab_select) to handle it with the \
                     \"browser_handle_dialog\" tool",
                    dialog.label(),
                    index + 1
                ));
            }
        }
        Ok(lines)
    }

    /// The current page's URL and title, and (when `with_snapshot`) its accessibility snapshot as
    /// YAML with refs. The browser's work for all of it is asked for at once.
    pub async fn location_and_snapshot(
        &mut self,
        with_snapshot: bool,
    ) -> Result<(String, String, Option<String>), ToolError> {
        if let Some(ahead) = self.ahead.take()
            && with_snapshot
            && ahead.session == self.tab()?.session
            && ahead.marks == self.marks()?
        {
            let (url, title) = ahead.location;
            let snapshot = self.render_snapshot(ahead.parts)?;
            return Ok((url, title, Some(snapshot)));
        }
        if !with_snapshot {
            let (url, title) = self.location().await?;
            return Ok((url, title, None));
        }
        let (location, parts) = self.location_and_snapshot_parts().await?;
        let snapshot = self.render_snapshot(parts)?;
        Ok((location.0, location.1, Some(snapshot)))
    }

    async fn location_and_snapshot_parts(
        &self,
    ) -> Result<((String, String), SnapshotParts), ToolError> {
        let (location, parts) =
            futures_util::future::join(self.location(), self.snapshot_parts()).await;
        Ok((location?, parts?))
    }

    /// What a snapshot is made of: the page's accessibility tree, the elements that look clickable
    /// and the trees of its same-process child frames.
    async fn snapshot_parts(&self) -> Result<SnapshotParts, ToolError> {
        let document = self.events(|events| events.documents)?;
        let session = self.tab()?.session.clone();
        // Sent together: the renderer answers one after the other, without a round trip between.
        let (tree, dom, frames) = futures_util::future::join3(
            self.cdp().call_bounded(
                Some(&session),
                "Accessibility.getFullAXTree",
                json!({}),
                SLOW_CALL,
                MAX_TREE_BYTES,
            ),
            self.cdp().call_bounded(
                Some(&session),
                "DOMSnapshot.captureSnapshot",
                json!({"computedStyles": ["cursor"]}),
                SLOW_CALL,
                MAX_DOM_BYTES,
            ),
            self.child_frames(&session),
        )
        .await;
        let mut tree = match tree {
            Ok((tree, _)) => tree,
            // The page is too large to snapshot: said in place of the snapshot (the answer's other
            // parts stand), and nothing of it was kept.
            Err(CdpError::TooLarge { bytes, .. }) => {
                tracing::info!(bytes, "a page too large to snapshot");
                return Ok(SnapshotParts {
                    document,
                    nodes: Vec::new(),
                    scopes: vec![(session, None)],
                    clickable: HashMap::new(),
                    frames: HashMap::new(),
                    frames_cut: false,
                    frames_over_budget: false,
                    too_large: Some(bytes),
                });
            }
            Err(err) => return Err(err.into()),
        };
        let mut frames = frames?;
        // Without it the snapshot only lacks the refs of elements that merely look clickable.
        match dom {
            Ok((dom, _)) => frames.clickable.extend(
                snapshot::clickable(&dom)
                    .into_iter()
                    .map(|(node, looks)| ((0, node), looks)),
            ),
            Err(CdpError::Protocol(message)) => {
                tracing::debug!("no DOM snapshot for clickable elements: {message}");
            }
            Err(CdpError::TooLarge { bytes, .. }) => {
                tracing::debug!(bytes, "no DOM snapshot for clickable elements: too large");
            }
            Err(err) => return Err(err.into()),
        }
        let nodes = match tree["nodes"].take() {
            Value::Array(nodes) => nodes,
            _ => Vec::new(),
        };
        Ok(SnapshotParts {
            document,
            nodes,
            scopes: frames.scopes,
            clickable: frames.clickable,
            frames: frames.frames,
            frames_cut: frames.cut,
            frames_over_budget: frames.over_budget,
            too_large: None,
        })
    }

    fn render_snapshot(&mut self, parts: SnapshotParts) -> Result<String, ToolError> {
        if let Some(bytes) = parts.too_large {
            return Ok(format!(
                "- Page Snapshot: the page is too large to snapshot (its accessibility tree is {} \
                 MiB, over the {} MiB bound); no refs were given. The browser and its tabs are \
                 unharmed. See the page with browser_take_screenshot, or navigate to a narrower \
                 page (a section's own address, a search or filter with fewer results).",
                bytes.div_ceil(1024 * 1024),
                MAX_TREE_BYTES / (1024 * 1024)
            ));
        }
        let tab = self.tab_mut()?;
        tab.refs.sync(parts.document);
        // The snapshot's scopes as the tab's refs number them (a host's scope comes before the
        // scopes it hosts).
        let mut scopes: Vec<usize> = Vec::with_capacity(parts.scopes.len());
        for (session, host) in &parts.scopes {
            let host = host.and_then(|(parent, owner)| Some((*scopes.get(parent)?, owner)));
            scopes.push(tab.refs.scope(session, host));
        }
        let rendered = snapshot::render(
            &parts.nodes,
            &parts.frames,
            &parts.clickable,
            &mut |(scope, backend), frame| {
                // Every scope of the trees is in the list; an unknown one gets a ref that never
                // resolves rather than another renderer's node.
                let scope = scopes.get(scope).copied().unwrap_or(usize::MAX);
                tab.refs.assign((scope, backend), frame)
            },
        );
        let mut text = format!("- Page Snapshot\n```yaml\n{}\n```", rendered.yaml);
        if parts.frames_cut {
            text.push_str(&format!(
                "\n- Frames cut: the page has more than {MAX_FRAMES} frames; the contents of \
                 {MAX_FRAMES} are shown, the other iframe lines are empty. Navigate to a frame's own \
                 address to see its content."
            ));
        }
        if parts.frames_over_budget {
            text.push_str(&format!(
                "\n- Frames cut: the page's frames hold more than {} MiB of content together; the \
                 frames past it are shown empty. Navigate to a frame's own address to see its \
                 content.",
                MAX_FRAME_BYTES / (1024 * 1024)
            ));
        }
        if rendered.cut_lines > 0 {
            text.push_str(&format!(
                "\n- Snapshot cut: {} of {} lines shown (the first {MAX_SNAPSHOT_CHARS} characters, \
                 in document order; scrolling does not change which). Refs of the lines shown work. \
                 To reach the rest, navigate to a narrower page (a section's own address, a search \
                 or filter with fewer results), or see it with browser_take_screenshot.",
                rendered.total_lines - rendered.cut_lines,
                rendered.total_lines
            ));
        }
        Ok(text)
    }

    /// The accessibility trees of the page's child frames, by the node of the `<iframe>` hosting
    /// each: frames in the page's renderer are asked for through the tab's session, frames Chromium
    /// runs in another process (site isolation) through their own sessions (attached as they appear,
    /// see [`events::auto_attach`]), and so on down. At most [`MAX_FRAMES`]; a frame that goes away
    /// meanwhile is left empty.
    async fn child_frames(&self, session: &str) -> Result<ChildTrees, ToolError> {
        let cdp = self.cdp();
        let others = cdp.events.child_frames(session);
        let mut walk = ChildTrees {
            scopes: vec![(session.to_owned(), None)],
            frames: HashMap::new(),
            clickable: HashMap::new(),
            cut: false,
            over_budget: false,
        };
        // What is left of [`MAX_FRAME_BYTES`]: each frame's answers may take all of it at most.
        let mut budget = MAX_FRAME_BYTES;
        let mut trees = vec![
            cdp.call(Some(session), "Page.getFrameTree", json!({}), CALL)
                .await?,
        ];
        let mut visited = 0;
        let mut scope = 0;
        while scope < walk.scopes.len() && visited < MAX_FRAMES {
            let here = walk.scopes[scope].0.clone();
            // The frames of this renderer, below its own frame.
            let tree = trees.get_mut(scope).map(Value::take).unwrap_or_default();
            let mut pending: Vec<&Value> = tree
                .pointer("/frameTree/childFrames")
                .and_then(Value::as_array)
                .map(|children| children.iter().collect())
                .unwrap_or_default();
            while let Some(child) = pending.pop() {
                if visited >= MAX_FRAMES {
                    walk.cut = true;
                    break;
                }
                visited += 1;
                if let Some(grandchildren) = child.get("childFrames").and_then(Value::as_array) {
                    pending.extend(grandchildren);
                }
                let Some(id) = child.pointer("/frame/id").and_then(Value::as_str) else {
                    continue;
                };
                let Some(owner) = self.frame_owner(&here, id).await? else {
                    continue;
                };
                if walk.over_budget {
                    continue;
                }
                match cdp
                    .call_bounded(
                        Some(&here),
                        "Accessibility.getFullAXTree",
                        json!({"frameId": id}),
                        SLOW_CALL,
                        budget,
                    )
                    .await
                {
                    Ok((mut tree, length)) => {
                        budget = budget.saturating_sub(length);
                        if let Value::Array(nodes) = tree["nodes"].take() {
                            walk.frames
                                .insert((scope, owner), snapshot::Frame { scope, nodes });
                        }
                    }
                    Err(CdpError::Protocol(_)) => {}
                    Err(CdpError::TooLarge { .. }) => walk.over_budget = true,
                    Err(err) => return Err(err.into()),
                }
            }
            // The frames in other processes that this renderer hosts: each is a scope of its own.
            for (child, frame) in others.iter().filter(|(_, frame)| frame.parent == here) {
                if visited >= MAX_FRAMES {
                    walk.cut = true;
                    break;
                }
                visited += 1;
                if walk.over_budget {
                    continue;
                }
                let Some(owner) = self.frame_owner(&here, &frame.frame).await? else {
                    continue;
                };
                let (tree, dom, frames) = futures_util::future::join3(
                    cdp.call_bounded(
                        Some(child),
                        "Accessibility.getFullAXTree",
                        json!({}),
                        SLOW_CALL,
                        budget,
                    ),
                    cdp.call_bounded(
                        Some(child),
                        "DOMSnapshot.captureSnapshot",
                        json!({"computedStyles": ["cursor"]}),
                        SLOW_CALL,
                        budget,
                    ),
                    cdp.call_bounded(Some(child), "Page.getFrameTree", json!({}), CALL, budget),
                )
                .await;
                // A frame gone meanwhile answers with a protocol error: it is left empty. One over
                // what is left of the budget is left empty too, and ends the walk.
                let mut over = false;
                let mut kept = |answer: Result<(Value, usize), CdpError>| match answer {
                    Ok((answer, length)) => {
                        budget = budget.saturating_sub(length);
                        Ok(answer)
                    }
                    Err(CdpError::Protocol(_)) => Ok(Value::Null),
                    Err(CdpError::TooLarge { .. }) => {
                        over = true;
                        Ok(Value::Null)
                    }
                    Err(err) => Err(ToolError::from(err)),
                };
                let mut tree = kept(tree)?;
                let dom = kept(dom)?;
                let frames = kept(frames)?;
                walk.over_budget |= over;
                let Value::Array(nodes) = tree["nodes"].take() else {
                    continue;
                };
                let inner = walk.scopes.len();
                walk.scopes.push((child.clone(), Some((scope, owner))));
                walk.frames.insert(
                    (scope, owner),
                    snapshot::Frame {
                        scope: inner,
                        nodes,
                    },
                );
                walk.clickable.extend(
                    snapshot::clickable(&dom)
                        .into_iter()
                        .map(|(node, looks)| ((inner, node), looks)),
                );
                trees.push(frames);
            }
            scope += 1;
        }
        Ok(walk)
    }

    /// The backend node id of the `<iframe>` hosting frame `frame`, asked of the session of its
    /// parent's renderer; `None` when the frame is gone.
    async fn frame_owner(&self, session: &str, frame: &str) -> Result<Option<i64>, ToolError> {
        match self
            .cdp()
            .call(
                Some(session),
                "DOM.getFrameOwner",
                json!({"frameId": frame}),
                CALL,
            )
            .await
        {
            Ok(owner) => Ok(owner.get("backendNodeId").and_then(Value::as_i64)),
            Err(CdpError::Protocol(_)) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// The node a ref names, or an error saying to take a new snapshot.
    pub fn node_of(&mut self, reference: &str) -> Result<Located, ToolError> {
        let document = self.events(|events| events.documents)?;
        let tab = self.tab_mut()?;
        tab.refs.sync(document);
        let trimmed = reference.trim();
        // `f2e7` (a node of a child frame) and `e7` name the same node: numbers are per tab.
        let unframed = match trimmed.strip_prefix('f') {
            Some(rest) => {
                let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
                // `fe7` is no ref: an `f` carries the frame's number.
                if after.len() == rest.len() { "" } else { after }
            }
            None => trimmed,
        };
        let number = unframed
            .strip_prefix('e')
            .and_then(|number| number.parse::<u64>().ok())
            .ok_or_else(|| {
                ToolError::Reported(format!(
                    "{reference:?} is not a ref from a page snapshot (refs look like e12). Take a \
                     snapshot (browser_snapshot) and use a ref from it."
                ))
            })?;
        tab.refs.locate(number).ok_or_else(|| {
            ToolError::Reported(format!(
                "Ref {reference} not found in the current page. It is from an earlier page or was \
                 never handed out; take a new snapshot (browser_snapshot) and use a ref from it."
            ))
        })
    }

    /// The JS object of a ref's element (in its renderer's session), checked to be still in the
    /// document.
    pub async fn element(&mut self, reference: &str) -> Result<Element, ToolError> {
        let node = self.node_of(reference)?;
        let session = node.session.clone();
        let gone = || {
            ToolError::Reported(format!(
                "The element of ref {reference} is no longer in the page (it was removed or \
                 replaced). Take a new snapshot (browser_snapshot) and use a ref from it."
            ))
        };
        let resolved = match self
            .cdp()
            .call(
                Some(&session),
                "DOM.resolveNode",
                json!({"backendNodeId": node.backend}),
                CALL,
            )
            .await
        {
            Ok(resolved) => resolved,
            Err(CdpError::Protocol(_)) => return Err(gone()),
            Err(err) => return Err(err.into()),
        };
        let object = resolved
            .pointer("/object/objectId")
            .and_then(Value::as_str)
            .ok_or_else(gone)?
            .to_owned();
        let element = Element { node, object };
        let connected = self
            .call_on(
                &element,
                "function() { return this.isConnected; }",
                json!([]),
            )
            .await?;
        if connected != json!(true) {
            return Err(gone());
        }
        Ok(element)
    }

    /// Calls `function` with `this` = the object (of the renderer of `session`) and `arguments`
    /// (JSON values); its value.
    pub async fn call_on(
        &self,
        element: &Element,
        function: &str,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let (session, object) = (element.node.session.as_str(), element.object.as_str());
        let arguments: Vec<Value> = arguments
            .as_array()
            .map(|list| list.iter().map(|value| json!({"value": value})).collect())
            .unwrap_or_default();
        let answer = self
            .cdp()
            .call(
                Some(session),
                "Runtime.callFunctionOn",
                json!({"objectId": object, "functionDeclaration": function, "arguments": arguments,
                       "returnByValue": true, "awaitPromise": true}),
                CALL,
            )
            .await
            .map_err(|err| self.in_frame(session, err))?;
        if let Some(details) = answer.get("exceptionDetails") {
            return Err(ToolError::Reported(format!(
                "The page threw: {}",
                details
                    .pointer("/exception/description")
                    .and_then(Value::as_str)
                    .unwrap_or("an exception")
            )));
        }
        Ok(answer
            .pointer("/result/value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// A failed call to a frame's renderer: a protocol error there means the frame went away (its
    /// session with it), which a new snapshot shows.
    fn in_frame(&self, session: &str, err: CdpError) -> ToolError {
        let tab = self
            .tab()
            .map(|tab| tab.session.as_str())
            .unwrap_or_default();
        match err {
            CdpError::Protocol(_) if session != tab => ToolError::Reported(FRAME_GONE.into()),
            err => err.into(),
        }
    }

    /// The centre of a node's first box on screen (after scrolling it into view), in CSS pixels of
    /// the page's viewport.
    pub async fn center(&self, node: &Located, reference: &str) -> Result<(f64, f64), ToolError> {
        let cdp = self.cdp();
        // Best effort: the iframes hosting it first (outermost first), then the node in its frame; a
        // node without a layout box cannot be scrolled to, and is refused just below.
        let hosts = node
            .hosts
            .iter()
            .rev()
            .map(|(session, owner)| (session, *owner));
        for (session, backend) in hosts.chain([(&node.session, node.backend)]) {
            let _ = cdp
                .call(
                    Some(session),
                    "DOM.scrollIntoViewIfNeeded",
                    json!({"backendNodeId": backend}),
                    CALL,
                )
                .await;
        }
        let invisible = || {
            ToolError::Reported(format!(
                "The element of ref {reference} is not visible (it has no box on the page). Take a \
                 new snapshot and choose a visible element."
            ))
        };
        let quads = match cdp
            .call(
                Some(&node.session),
                "DOM.getContentQuads",
                json!({"backendNodeId": node.backend}),
                CALL,
            )
            .await
        {
            Ok(answer) => answer,
            Err(CdpError::Protocol(_)) => return Err(invisible()),
            Err(err) => return Err(err.into()),
        };
        let quads = quads["quads"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for quad in quads {
            let Some((left, top, right, bottom)) = bounds(quad) else {
                continue;
            };
            if right - left >= 1.0 && bottom - top >= 1.0 {
                let (x, y) = self.frame_offset(node).await?;
                if !node.hosts.is_empty() {
                    self.frame_drawn().await?;
                }
                return Ok((x + (left + right) / 2.0, y + (top + bottom) / 2.0));
            }
        }
        Err(invisible())
    }

    /// Waits (boundedly) for the page to draw a frame. Input for a frame in another process is sent
    /// to it by where the page last drew it: after a relayout (an element's screenshot resizes the
    /// page for its capture and back), a click sent at once can land on the page's `<iframe>`
    /// element instead.
    async fn frame_drawn(&self) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.evaluate_promise(
            &session,
            "new Promise(resolve => { requestAnimationFrame(() => requestAnimationFrame(resolve)); \
             setTimeout(resolve, 200); })",
            CALL,
        )
        .await?;
        Ok(())
    }

    /// Where the frame of a node in another process sits in the page's viewport: the corners of the
    /// content boxes of the iframes hosting it, added up ((0, 0) for a node of the tab's renderer).
    /// Box coordinates of a frame's renderer are relative to that frame's viewport.
    async fn frame_offset(&self, node: &Located) -> Result<(f64, f64), ToolError> {
        let mut offset = (0.0, 0.0);
        for (session, owner) in &node.hosts {
            let model = self
                .cdp()
                .call(
                    Some(session),
                    "DOM.getBoxModel",
                    json!({"backendNodeId": owner}),
                    CALL,
                )
                .await
                .map_err(|err| match err {
                    CdpError::Protocol(_) => ToolError::Reported(FRAME_GONE.into()),
                    err => err.into(),
                })?;
            let (left, top, ..) = model
                .pointer("/model/content")
                .and_then(bounds)
                .ok_or_else(|| ToolError::Reported(FRAME_GONE.into()))?;
            offset = (offset.0 + left, offset.1 + top);
        }
        Ok(offset)
    }

    async fn mouse(&self, kind: &str, (x, y): (f64, f64), buttons: i64) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        let mut event = json!({"type": kind, "x": x, "y": y, "buttons": buttons});
        if kind != "mouseMoved" || buttons != 0 {
            event["button"] = json!("left");
        }
        if kind != "mouseMoved" {
            event["clickCount"] = json!(1);
        }
        self.cdp()
            .call(Some(session), "Input.dispatchMouseEvent", event, CALL)
            .await?;
        Ok(())
    }

    pub async fn keys(&self, events: Vec<Value>) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        for event in events {
            self.cdp()
                .call(Some(session), "Input.dispatchKeyEvent", event, CALL)
                .await?;
        }
        Ok(())
    }

    pub fn marks(&self) -> Result<Marks, ToolError> {
        self.events(|events| Marks {
            navigation_requested: events.navigation_requested,
            documents: events.documents,
            dom_content_loaded: events.dom_content_loaded,
            stopped_loading: events.stopped_loading,
            loads: events.loads,
            loading: events.loading,
        })
    }

    /// Waits until `done` holds for the current tab's events, a dialog opens, the browser goes away,
    /// or `deadline`; true unless the deadline passed.
    pub async fn wait_until(
        &self,
        deadline: Instant,
        done: impl Fn(&TabEvents) -> bool,
    ) -> Result<bool, ToolError> {
        let session = self.tab()?.session.clone();
        let cdp = self.cdp();
        let mut changes = cdp.events.subscribe();
        loop {
            let satisfied = cdp.events.with(&session, |events| {
                done(events) || events.dialog.is_some() || events.crashed
            });
            if satisfied || cdp.is_closed() {
                return Ok(true);
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(true),
                Err(_) => return Ok(false),
            }
        }
    }

    /// Runs `action` unless a dialog opens first (the page is then blocked, and so may the action's
    /// answer be); `None` when the dialog won.
    /// Evaluates `expression`, a promise, in the page's session and waits for its value (within
    /// `timeout`), unless a dialog opens first (`None`).
    async fn evaluate_promise(
        &self,
        session: &str,
        expression: &str,
        timeout: Duration,
    ) -> Result<Option<Value>, ToolError> {
        self.racing(async {
            self.cdp()
                .call(
                    Some(session),
                    "Runtime.evaluate",
                    json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                    timeout,
                )
                .await
                .map_err(ToolError::from)
        })
        .await
    }

    pub async fn racing<T>(
        &self,
        action: impl std::future::Future<Output = Result<T, ToolError>>,
    ) -> Result<Option<T>, ToolError> {
        let forever = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            outcome = action => outcome.map(Some),
            _ = self.wait_until(forever, |events| events.dialog.is_some()) => Ok(None),
        }
    }

    /// Waits for what an action set off: a navigation it started to commit (its DOMContentLoaded),
    /// then the DOM to be quiet for [`QUIET`]; all within [`SETTLE_CAP`], and never past a dialog.
    pub async fn settle(&self, before: Marks) -> Result<(), ToolError> {
        self.settle_until(before, Instant::now() + SETTLE_CAP).await
    }

    /// [`Running::settle`] within a deadline given by the caller (a navigation's whole wait shares
    /// one cap).
    async fn settle_until(&self, before: Marks, deadline: Instant) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        for _ in 0..3 {
            let now = self.marks()?;
            let (loading, blocked) =
                self.events(|e| (e.loading, e.dialog.is_some() || e.crashed))?;
            if blocked || self.cdp().is_closed() {
                return Ok(());
            }
            // A load under way before the action (an image that never arrives) is not one it started.
            let navigating = (loading && !before.loading)
                || now.navigation_requested != before.navigation_requested;
            if navigating {
                let committed = self
                    .wait_until(deadline, |events| {
                        events.dom_content_loaded != before.dom_content_loaded
                            || (!events.loading && events.stopped_loading != before.stopped_loading)
                    })
                    .await?;
                if !committed {
                    return Ok(());
                }
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(());
            }
            let quiet = format!(
                "new Promise(resolve => {{ let timer; const done = () => {{ observer.disconnect(); \
                 clearTimeout(cap); resolve(true); }}; const observer = new MutationObserver(() => \
                 {{ clearTimeout(timer); timer = setTimeout(done, {quiet}); }}); \
                 observer.observe(document, {{subtree: true, childList: true, attributes: true, \
                 characterData: true}}); timer = setTimeout(done, {quiet}); const cap = \
                 setTimeout(done, {cap}); }})",
                quiet = QUIET.as_millis(),
                cap = remaining.as_millis()
            );
            match self
                .evaluate_promise(&session, &quiet, remaining + Duration::from_millis(200))
                .await
            {
                // The document went away under the observer: a navigation; wait for it above.
                Ok(Some(answer)) if answer.get("exceptionDetails").is_some() => continue,
                Ok(_) => {
                    let after = self.marks()?;
                    let started = (after.loading && !now.loading)
                        || after.navigation_requested != now.navigation_requested;
                    if !started {
                        return Ok(());
                    }
                }
                Err(_) if !self.cdp().is_closed() => continue,
                Err(failure) => return Err(failure),
            }
        }
        Ok(())
    }
}

impl Running {
    /// Settles a page whose load event has fired (or whose wait for it hit the cap) by `deadline`,
    /// the cap its navigation started (waits never stack past it): done as soon as
    /// no request is in flight and the DOM has not changed since `load` (or not for [`QUIET`]); a
    /// page that keeps changing, or starts another navigation, is waited for as [`Running::settle`]
    /// waits. No quiet window is waited out when nothing is pending: a static page settles in one
    /// round trip.
    pub async fn settle_loaded(
        &mut self,
        before: Marks,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        let requests_pending = !self.events(|events| events.in_flight.is_empty())?;
        if requests_pending {
            self.wait_until(deadline, |events| events.in_flight.is_empty())
                .await?;
        }
        let (blocked, navigating) = self.events(|events| {
            (
                events.dialog.is_some() || events.crashed,
                events.loading || events.navigation_requested != before.navigation_requested,
            )
        })?;
        if blocked || self.cdp().is_closed() {
            return Ok(());
        }
        if navigating {
            return self.settle_until(before, deadline).await;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(());
        }
        // One task's hop first when requests just finished, so the page's handlers of their answers
        // have run (and changed the DOM) before it is judged quiet. Without the watcher (a document
        // boxd attached to late), the quiet window is waited out from now.
        let check = format!(
            "new Promise(resolve => {{ const state = window[Symbol.for('boxd.settle')]; \
             const started = performance.now(); const look = () => {{ const now = performance.now(); \
             const last = state ? state.last : started; const quiet = now - last; \
             if ((state && last === 0) || quiet >= {quiet} || now - started >= {cap}) \
             return resolve(first ? 'at once' : true); first = false; \
             setTimeout(look, Math.min({quiet} - quiet, {cap} - (now - started)) + 1); }}; \
             let first = !{hop}; if ({hop}) setTimeout(look, 0); else look(); }})",
            quiet = QUIET.as_millis(),
            cap = remaining.as_millis(),
            hop = requests_pending,
        );
        let checked =
            self.evaluate_promise(&session, &check, remaining + Duration::from_millis(200));
        // A page found settled at its first look is what the answer shows: its location and snapshot
        // are asked for right behind the check (the renderer takes them in order), saving two round
        // trips; otherwise they are dropped and asked for again once the page is done.
        let (checked, ahead) = if requests_pending {
            (checked.await, None)
        } else {
            let ahead = self.racing(self.location_and_snapshot_parts());
            let (checked, ahead) = futures_util::future::join(checked, ahead).await;
            (checked, ahead.ok().flatten())
        };
        let at_once = matches!(&checked, Ok(Some(answer))
            if answer.pointer("/result/value").and_then(Value::as_str) == Some("at once"));
        match checked {
            Ok(Some(answer)) if answer.get("exceptionDetails").is_none() => {}
            // The document went away under the check (a navigation), or the check failed: the
            // ordinary settle tells when the page is done.
            Ok(Some(_)) => return self.settle_until(before, deadline).await,
            Ok(None) => return Ok(()),
            Err(_) if !self.cdp().is_closed() => return self.settle_until(before, deadline).await,
            Err(failure) => return Err(failure),
        }
        let started = self.events(|events| {
            events.loading || events.navigation_requested != before.navigation_requested
        })?;
        if started {
            return self.settle_until(before, deadline).await;
        }
        if at_once && let Some((location, parts)) = ahead {
            self.ahead = Some(Ahead {
                session,
                marks: self.marks()?,
                location,
                parts,
            });
        }
        Ok(())
    }
}

/// A quad's (or box's) bounds: left, top, right, bottom; `None` unless it has its 8 numbers.
pub fn bounds(quad: &Value) -> Option<(f64, f64, f64, f64)> {
    let points: Vec<f64> = quad.as_array()?.iter().filter_map(Value::as_f64).collect();
    if points.len() != 8 {
        return None;
    }
    let xs = [points[0], points[2], points[4], points[6]];
    let ys = [points[1], points[3], points[5], points[7]];
    Some((
        xs.iter().copied().fold(f64::MAX, f64::min),
        ys.iter().copied().fold(f64::MAX, f64::min),
        xs.iter().copied().fold(f64::MIN, f64::max),
        ys.iter().copied().fold(f64::MIN, f64::max),
    ))
}

/// The renderer sessions of a snapshot's trees, by scope: the tab's first, then those of frames in
/// other processes, each with the `<iframe>` hosting it (its parent's scope and node id there).
type Scopes = Vec<(String, Option<NodeKey>)>;

/// The trees of a page's child frames, and what the walk met on the way.
struct ChildTrees {
    scopes: Scopes,
    frames: HashMap<NodeKey, snapshot::Frame>,
    clickable: HashMap<NodeKey, snapshot::Looks>,
    /// Frames were left unwalked past [`MAX_FRAMES`]: the answer says so.
    cut: bool,
    /// Frames were left empty past [`MAX_FRAME_BYTES`]: the answer says so.
    over_budget: bool,
}

struct SnapshotParts {
    /// The document the node ids belong to.
    document: u64,
    nodes: Vec<Value>,
    scopes: Scopes,
    clickable: HashMap<NodeKey, snapshot::Looks>,
    frames: HashMap<NodeKey, snapshot::Frame>,
    /// More frames than [`MAX_FRAMES`]: the later ones' `iframe` lines are empty.
    frames_cut: bool,
    /// Frames past [`MAX_FRAME_BYTES`] were left empty.
    frames_over_budget: bool,
    /// The page's accessibility tree was larger than [`MAX_TREE_BYTES`] (its length): the answer
    /// says so in place of the snapshot.
    too_large: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    pub navigation_requested: u64,
    pub documents: u64,
    pub dom_content_loaded: u64,
    pub stopped_loading: u64,
    pub loads: u64,
    /// The main frame was loading (a page whose load never fired still is).
    pub loading: bool,
}

async fn attach(
    cdp: &Cdp,
    target: &str,
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
        events.main_frame = Some(target.to_owned())
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
        refs: Refs::default(),
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_stable_within_a_document_and_never_reused_after() {
        let mut refs = Refs::default();
        refs.sync(1);
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 40), 0), "e1");
        assert_eq!(refs.assign((page, 41), 2), "f2e2");
        assert_eq!(refs.assign((page, 40), 0), "e1");
        refs.sync(2);
        assert!(refs.by_ref.is_empty());
        assert!(refs.scopes.is_empty());
        // The same node id in the new document gets a new number: e1 stays void.
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 40), 0), "e3");
        assert_eq!(refs.locate(1), None);
    }

    #[test]
    fn refs_of_frames_in_other_processes_name_their_session_and_hosting_iframes() {
        let mut refs = Refs::default();
        refs.sync(1);
        let page = refs.scope("TAB", None);
        // A frame in another process hosted by the page's <iframe> 12, and one in it hosted by 5.
        let frame = refs.scope("FRAME", Some((page, 12)));
        let nested = refs.scope("NESTED", Some((frame, 5)));
        assert_eq!(refs.scope("FRAME", Some((page, 99))), frame);
        // Backend node ids repeat across processes: the same id is three different nodes.
        assert_eq!(refs.assign((page, 7), 0), "e1");
        assert_eq!(refs.assign((frame, 7), 1), "f1e2");
        assert_eq!(refs.assign((nested, 7), 2), "f2e3");
        // Stable across snapshots of the same document.
        assert_eq!(refs.assign((frame, 7), 1), "f1e2");
        assert_eq!(
            refs.locate(1),
            Some(Located {
                session: "TAB".into(),
                backend: 7,
                hosts: vec![]
            })
        );
        assert_eq!(
            refs.locate(2),
            Some(Located {
                session: "FRAME".into(),
                backend: 7,
                hosts: vec![("TAB".into(), 12)]
            })
        );
        assert_eq!(
            refs.locate(3),
            Some(Located {
                session: "NESTED".into(),
                backend: 7,
                hosts: vec![("FRAME".into(), 5), ("TAB".into(), 12)]
            })
        );
        // A new document voids them all; numbers keep growing.
        refs.sync(2);
        assert_eq!(refs.locate(2), None);
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 7), 0), "e4");
    }
}
