//! The one browser and its tabs, as the tools see them: launched on the first call, relaunched on the
//! next call after it died (and the answer says so), tabs reconciled with the browser's own list on
//! every call (a page may open or close tabs by itself), refs kept per tab. The tabs are those of the
//! session the call addresses: the default one, or an isolated browser context ([`contexts`]).
//!
//! The page type, [`Running`], is spread over files by job: the tabs ([`tabs`]), the ref table
//! ([`refs`]), a snapshot's fetching ([`tree`]), elements and their geometry ([`element`]), waiting for
//! the page to settle ([`settle`]), and the verbs the tools call ([`page`]).

use std::time::Duration;

use super::cdp::{Cdp, CdpError};
use super::events::TabEvents;
use super::launch::{self, Isolation, Options, Process};
use super::pacing::{ActiveCall, FramePump, Pacer};
use crate::core::health::Health;
use crate::tools::ToolError;

mod contexts;
mod element;
mod finder;
mod page;
mod refs;
mod settle;
mod tabs;
mod tree;

pub use contexts::{Context, DEFAULT, MAX_SESSIONS, SessionInfo, lost as sessions_lost};
pub use element::{RefStyle, SNAPSHOT_REFS};
pub use page::{Capture, Clip, Image, MouseButton};
use refs::Refs;
pub use refs::session_of_ref;
use settle::Marks;
pub use settle::SETTLE_CAP;
pub use tabs::TabInfo;
use tree::SnapshotParts;
pub use tree::{MAX_DOM_BYTES, MAX_FRAME_BYTES, MAX_FRAMES, MAX_TREE_BYTES};

/// An ordinary protocol call's bound.
pub const CALL: Duration = Duration::from_secs(10);
/// Bound of the work of the page itself: a navigation's commit, a screenshot or PDF of a big page.
pub const SLOW_CALL: Duration = Duration::from_secs(30);

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

pub struct Tab {
    target: String,
    session: String,
    refs: Refs,
    /// Sends the tab's frames when boxd paces them (the headless shell).
    frames: Option<FramePump>,
    /// The interactive view's finder's isolated world: the document it was made in (the tab's
    /// count of documents then) and its execution context.
    finder_world: Option<(u64, i64)>,
}

pub struct Running {
    process: Process,
    /// The tabs of the session the call addresses (see [`contexts`]); the other sessions' wait in
    /// `others` until a call addresses them.
    here: Context,
    others: Vec<Context>,
    /// Browser contexts disposed (closed sessions) whose pages the browser may still list: they are
    /// no tabs of the default session.
    disposed: Vec<String>,
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
    /// The number of the last session id handed out (`s1`, `s2`, ...): ids are never reused while
    /// boxd lives.
    last_session: u64,
    /// The session the call addresses ([`DEFAULT`] unless it names another).
    addressed: String,
}

impl Session {
    pub fn new(options: Options) -> Session {
        Session {
            running: None,
            notice: None,
            options,
            pacer: Pacer::default(),
            health: None,
            last_session: 0,
            addressed: DEFAULT.to_owned(),
        }
    }

    /// The session the tools of this call act in (`None`: the default one). Checked by
    /// [`Session::browser`], which refuses a session that is not open.
    pub fn address(&mut self, session: Option<String>) {
        self.addressed = session.unwrap_or_else(|| DEFAULT.to_owned());
    }

    /// The session the call addresses.
    pub fn addressed(&self) -> &str {
        &self.addressed
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
        // A session other than the default one lives in a running browser only: none is started
        // for a call that names one.
        if self.running.is_none() && self.addressed != DEFAULT {
            return Err(contexts::unknown(&self.addressed, &[DEFAULT.to_owned()]));
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            if let Some(running) = self.running.as_mut()
                && running.process.cdp.is_closed()
            {
                let words = running.process.last_words().await;
                let lost = running.session_names();
                running.process.close().await;
                self.running = None;
                self.notice = Some(format!(
                    "The browser had exited{words}; a new one was started: earlier tabs, refs and \
                     page state are gone.{}",
                    contexts::lost(&lost)
                ));
            }
            if self.running.is_none() {
                let process = self.launch().await?;
                self.running = Some(Running {
                    here: Context::default_session(&process),
                    others: Vec::new(),
                    disposed: Vec::new(),
                    process,
                    pacer: self.pacer.clone(),
                    closing: Vec::new(),
                    ahead: None,
                });
            }
            let Some(running) = self.running.as_mut() else {
                return Err(ToolError::Reported("the browser is not running".into()));
            };
            running.address(&self.addressed)?;
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
        if running.here.tabs.is_empty() {
            running.new_tab(viewport).await?;
        }
        Ok(running)
    }

    /// The running browser with its tabs reconciled (tabs a page opened or closed meanwhile), without
    /// starting one: `None` when none runs or it went away.
    pub async fn synced(&mut self) -> Result<Option<&mut Running>, ToolError> {
        let viewport = self.options.viewport;
        match self.running.as_mut() {
            Some(running) if !running.process.cdp.is_closed() => {
                running.address(&self.addressed)?;
                running.sync_tabs(viewport).await?;
                Ok(Some(running))
            }
            _ => Ok(None),
        }
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

    /// Closes the browser (a no-op when none runs); `Some` of the sessions other than the default
    /// one that closed with it when one ran.
    pub async fn close(&mut self) -> Option<Vec<String>> {
        let mut running = self.running.take()?;
        let lost = running.session_names();
        running.process.close().await;
        Some(lost)
    }

    /// Opens a new session (starting the browser if none runs), with one blank tab: its id.
    pub async fn open_session(&mut self) -> Result<String, ToolError> {
        self.addressed = DEFAULT.to_owned();
        let running = self.browser().await?;
        if running.session_count() >= MAX_SESSIONS {
            return Err(ToolError::Reported(format!(
                "At most {MAX_SESSIONS} sessions may be open at once besides the default one; \
                 these are: {}. Close one with browser_session_close first.",
                running.session_names().join(", ")
            )));
        }
        let viewport = self.options.viewport;
        let name = self.next_session_id();
        let number = self.last_session;
        let running = self
            .running
            .as_mut()
            .ok_or_else(|| ToolError::Reported("the browser is not running".into()))?;
        running.open_session(name.clone(), number, viewport).await?;
        self.addressed = name.clone();
        Ok(name)
    }

    /// Closes session `name` (any but the default one): its context, tabs, refs and downloads.
    pub async fn close_session(&mut self, name: &str) -> Result<(), ToolError> {
        if name == DEFAULT {
            return Err(ToolError::Reported(
                "The default session cannot be closed: it is the browser's own context. \
                 browser_close closes the browser; browser_session_close closes the sessions \
                 browser_session_new opened."
                    .into(),
            ));
        }
        self.addressed = DEFAULT.to_owned();
        let Some(running) = self
            .running
            .as_mut()
            .filter(|running| !running.process.cdp.is_closed())
        else {
            return Err(contexts::unknown(name, &[DEFAULT.to_owned()]));
        };
        running.close_session(name).await
    }

    /// Every open session (none is started: without a browser, the default session has no tab).
    pub async fn session_infos(&self) -> Result<Vec<SessionInfo>, ToolError> {
        match self.running() {
            Some(running) => running.session_infos().await,
            None => Ok(vec![SessionInfo {
                session: DEFAULT.to_owned(),
                tabs: 0,
                current_url: None,
            }]),
        }
    }

    /// A new session's id: `s1`, `s2`, ... in the order they were asked for.
    fn next_session_id(&mut self) -> String {
        self.last_session = self.last_session.saturating_add(1);
        format!("s{}", self.last_session)
    }

    /// The open sessions, the default one first.
    pub fn open_session_names(&self) -> Vec<String> {
        let others = self.running().map(Running::session_names);
        std::iter::once(DEFAULT.to_owned())
            .chain(others.into_iter().flatten())
            .collect()
    }

    /// The running browser, if one runs (none is started).
    pub fn running(&self) -> Option<&Running> {
        self.running
            .as_ref()
            .filter(|running| !running.process.cdp.is_closed())
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
        self.here
            .tabs
            .get(self.here.current)
            .ok_or_else(|| ToolError::Reported(NO_PAGE.into()))
    }

    fn tab_mut(&mut self) -> Result<&mut Tab, ToolError> {
        self.here
            .tabs
            .get_mut(self.here.current)
            .ok_or_else(|| ToolError::Reported(NO_PAGE.into()))
    }

    pub fn events<T>(&self, read: impl FnOnce(&mut TabEvents) -> T) -> Result<T, ToolError> {
        let session = &self.tab()?.session;
        Ok(self.cdp().events.with(session, read))
    }
}
