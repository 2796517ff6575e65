//! The tools (upstream's 23, and Anthropic's browser toolset as one tool, see [`toolset`]), each
//! declared once in the file of its capability: its argument struct (whose schema, upstream's, is
//! what the tool advertises), its policy (what state of the page it may run in) and what it does.
//! Every call holds the
//! browser session for its duration (one browser, one current tab, as upstream), every wait in it is
//! bounded, and the policies are applied here, for all tools alike. So is boxd's one argument of every
//! tool, `session` ([`InSession`]): the isolated session ([`sessions`]) the call acts in, the default
//! one when absent.

mod capture;
mod dialogs;
mod files;
mod input;
pub(super) mod navigate;
mod sessions;
mod tabs;
mod wait;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::GROUP;
use super::events::DownloadLimits;
use super::launch::Options;
use super::session::{Capture, Running, Session};
use super::snapshot::SnapshotOptions;
use super::toolset;
use crate::core::confine::AllowedDirs;
use crate::core::confine::Workspace;
use crate::tools::{
    BadArguments, CallToolResult, ContentItem, SchemaDialect, Tool, ToolError, ToolResult, ToolSpec,
};

/// Said of a tab whose renderer exited.
const CRASHED: &str = "The page in this tab crashed (its renderer process exited: out of memory, or a \
    browser bug).";

pub struct Browser {
    session: tokio::sync::Mutex<Session>,
    workspace: Workspace,
    /// Where `browser_file_upload` may take files from.
    uploads: AllowedDirs,
    /// The bounds of the browser's downloads, as the answers name them.
    download_limits: DownloadLimits,
    /// What the browser toolset reported last, per session (locked after `session`, by toolset
    /// calls only).
    toolset: tokio::sync::Mutex<std::collections::HashMap<String, toolset::Reports>>,
}

/// What state of the current tab a page tool may run in, applied by [`Browser::call`] before the
/// tool runs.
#[derive(Debug, Clone, Copy)]
struct Policy {
    /// Refused while the tab shows a dialog (upstream's modal state); the answer says how to handle it.
    blocked_by_dialog: bool,
    /// Refused while the tab's renderer is gone: its session answers nothing until a navigation gives
    /// the tab a new one.
    needs_live_page: bool,
    /// A navigation, which brings a crashed page back: a crash it causes is seen anew.
    navigates: bool,
}

impl Policy {
    /// Acts on the page: needs it alive and free of dialogs.
    const ACTION: Policy = Policy {
        blocked_by_dialog: true,
        needs_live_page: true,
        navigates: false,
    };
    /// Loads a page in the tab (also over a crashed one).
    const NAVIGATION: Policy = Policy {
        blocked_by_dialog: true,
        needs_live_page: false,
        navigates: true,
    };
    /// Answers the modal state (a dialog, a file chooser) of a live page.
    const MODAL: Policy = Policy {
        blocked_by_dialog: false,
        needs_live_page: true,
        navigates: false,
    };
    /// Acts on the browser's tabs or reads what it recorded: whatever state the page is in.
    const ANY_PAGE: Policy = Policy {
        blocked_by_dialog: false,
        needs_live_page: false,
        navigates: false,
    };
}

/// What a page tool acts with: the current tab (opened, and checked by the tool's policy), the
/// browser's files, and the viewport new tabs get.
struct PageCall<'a> {
    page: &'a mut Running,
    browser: &'a Browser,
    viewport: (u32, u32),
}

/// What a page tool answers.
enum Answer {
    /// This text alone.
    Text(String),
    /// A line saying what was done (none when empty), then the page: modal state, downloads, tabs,
    /// URL, title and (when `snapshot`, and the page can give one) its snapshot.
    Page { done: String, snapshot: bool },
    /// The page with its snapshot as these options ask (`browser_snapshot`).
    Snapshot(SnapshotOptions),
    /// The page's answer, made while this screenshot is captured; saved under the name asked for.
    Screenshot {
        capture: Capture,
        filename: Option<String>,
    },
    /// The last tab was closed: the browser closes with it, and this text is the answer.
    LastTabClosed(String),
}

impl Answer {
    /// `done`, then the page with its snapshot.
    fn page(done: impl Into<String>) -> Answer {
        Answer::Page {
            done: done.into(),
            snapshot: true,
        }
    }
}

type PageAct<A> = for<'a> fn(PageCall<'a>, A) -> BoxFuture<'a, Result<Answer, ToolError>>;
/// The viewport a call asks for (see [`BrowserTool::sets_viewport`]).
type RequestedViewport<A> = fn(&A) -> Result<(u32, u32), ToolError>;
/// Makes a declared tool a [`Tool`] of a browser.
type Serve = Box<dyn Fn(&Arc<Browser>) -> Tool + Send + Sync>;
type SessionAct<A> = for<'a> fn(&'a mut Session, A) -> BoxFuture<'a, Result<String, ToolError>>;

enum Act<A> {
    /// Acts on the browser as a whole (no page is opened for it); answers with its text alone.
    Session(SessionAct<A>),
    /// Acts on the current tab, opened (with the browser) when there is none, as its policy allows.
    Page(Policy, PageAct<A>),
}

/// A browser tool as its capability's file declares it.
struct BrowserTool<A> {
    name: &'static str,
    description: &'static str,
    act: Act<A>,
    /// The viewport the call asks for, set before the page is opened so that a browser or tab it
    /// starts has it.
    viewport: Option<RequestedViewport<A>>,
}

impl<A: DeserializeOwned + JsonSchema + Send + 'static> BrowserTool<A> {
    fn on_page(
        name: &'static str,
        description: &'static str,
        policy: Policy,
        act: PageAct<A>,
    ) -> BrowserTool<A> {
        BrowserTool {
            name,
            description,
            act: Act::Page(policy, act),
            viewport: None,
        }
    }

    fn on_session(
        name: &'static str,
        description: &'static str,
        act: SessionAct<A>,
    ) -> BrowserTool<A> {
        BrowserTool {
            name,
            description,
            act: Act::Session(act),
            viewport: None,
        }
    }

    /// The call sets the viewport of the session (new tabs, a browser it starts) before its page is
    /// opened; refused arguments leave it as it was.
    fn sets_viewport(mut self, requested: RequestedViewport<A>) -> Self {
        self.viewport = Some(requested);
        self
    }

    fn declared(self) -> Declared {
        let tool = Arc::new(self);
        Declared {
            #[cfg(test)]
            name: tool.name,
            serve: Box::new(move |browser| serve(browser, Arc::clone(&tool))),
        }
    }
}

/// A declared tool, whatever its arguments: made a [`Tool`] of a browser.
struct Declared {
    /// Only read by the test that counts the tools: the served tool carries its name.
    #[cfg(test)]
    name: &'static str,
    serve: Serve,
}

/// A tool's own arguments and the one boxd adds to every tool of the family: the session it acts in.
/// Upstream's calls, without it, act in the default session as before.
#[derive(serde::Deserialize, JsonSchema)]
pub(super) struct InSession<A> {
    #[serde(flatten)]
    pub(super) arguments: A,
    /// The session to act in: an id browser_session_new answered (e.g. "s1"). Default: the default
    /// session.
    pub(super) session: Option<String>,
}

/// Arguments are checked as Playwright MCP's one `inputSchema.parse` checks them (a bad one is
/// answered with zod's problem list), after the SDK's defaults are left out.
fn serve<A: DeserializeOwned + JsonSchema + Send + 'static>(
    browser: &Arc<Browser>,
    tool: Arc<BrowserTool<A>>,
) -> Tool {
    let browser = Arc::clone(browser);
    ToolSpec::declare::<InSession<A>>(GROUP, tool.name, tool.description)
        .dialect(SchemaDialect::ZodToJsonSchema)
        .sdk_defaults_mean_absent()
        .bad_arguments(BadArguments::ZodError)
        .handler(move |called: InSession<A>, _| {
            let browser = Arc::clone(&browser);
            let tool = Arc::clone(&tool);
            async move { browser.call(&tool, called.session, called.arguments).await }
        })
}

/// Every browser tool, as @playwright/mcp 0.0.25 declares them.
fn declarations() -> Vec<Declared> {
    [
        navigate::declarations(),
        input::declarations(),
        tabs::declarations(),
        dialogs::declarations(),
        files::declarations(),
        capture::declarations(),
        wait::declarations(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

pub fn tools(browser: &Arc<Browser>) -> Vec<Tool> {
    let mut tools: Vec<Tool> = declarations()
        .iter()
        .map(|declared| (declared.serve)(browser))
        .collect();
    tools.extend(sessions::tools(browser));
    tools.push(toolset_tool(browser));
    tools
}

/// Anthropic's browser toolset as one tool of its own group: a member's name and that member's input
/// (see [`toolset`]). Bad input is the member's refusal, worded as the SDK words it, so the tool
/// reads its arguments itself.
fn toolset_tool(browser: &Arc<Browser>) -> Tool {
    let browser = Arc::clone(browser);
    ToolSpec::declare::<InSession<toolset::MemberCall>>(
        toolset::GROUP,
        toolset::NAME,
        toolset::DESCRIPTION,
    )
    .handler(move |called: InSession<toolset::MemberCall>, _| {
        let browser = Arc::clone(&browser);
        async move { browser.toolset_call(called.session, called.arguments).await }
    })
}

impl Browser {
    pub fn new(options: Options, workspace: Workspace, uploads: AllowedDirs) -> Browser {
        Browser {
            download_limits: options.download_limits,
            session: tokio::sync::Mutex::new(Session::new(options)),
            workspace,
            uploads,
            toolset: tokio::sync::Mutex::default(),
        }
    }

    /// A browser toolset call: holds the session for its duration, as every call does, and the
    /// toolset's reports of the session it acts in behind it.
    async fn toolset_call(
        &self,
        in_session: Option<String>,
        call: toolset::MemberCall,
    ) -> ToolResult {
        let mut session = self.session.lock().await;
        let _active = session.call_started();
        session.address(in_session);
        let mut reports = self.toolset.lock().await;
        let open = session.open_session_names();
        reports.retain(|name, _| open.contains(name));
        let reports = reports.entry(session.addressed().to_owned()).or_default();
        toolset::call(self, &mut session, reports, call).await
    }

    /// Where the workspace is, as answers show it (downloads are saved at its top).
    pub(in crate::browser) fn workspace_shown(&self) -> &std::path::Path {
        self.workspace.root()
    }

    pub async fn close(&self) {
        self.session.lock().await.close().await;
    }

    /// Who the next browser runs as and whether with its sandbox; `health` is told if a sandboxed start
    /// fails and the browser falls back to `--no-sandbox`.
    pub async fn set_isolation(
        &self,
        isolation: super::launch::Isolation,
        health: crate::core::health::Health,
    ) {
        self.session.lock().await.set_isolation(isolation, health);
    }

    /// A failure is an `isError` answer, said after the notice of a browser that was started again,
    /// as a success is. `in_session`: the session the call names (`None`: the default one).
    async fn call<A>(
        &self,
        tool: &BrowserTool<A>,
        in_session: Option<String>,
        arguments: A,
    ) -> ToolResult {
        let mut session = self.session.lock().await;
        let _active = session.call_started();
        session.address(in_session);
        let outcome = self.run(&mut session, tool, arguments).await;
        let notice = session.take_notice();
        let (mut items, failed) = match outcome {
            Ok(items) => (items, false),
            Err(err) => (vec![text(err.into_report()?)], true),
        };
        if let Some(notice) = notice
            && let Some(ContentItem::Text { text, .. }) = items.last_mut()
        {
            *text = format!("{notice}\n\n{text}");
        }
        Ok(CallToolResult::new(items, failed))
    }

    async fn run<A>(
        &self,
        session: &mut Session,
        tool: &BrowserTool<A>,
        arguments: A,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let (policy, act) = match &tool.act {
            Act::Session(act) => return Ok(vec![text(act(session, arguments).await?)]),
            Act::Page(policy, act) => (*policy, *act),
        };
        if let Some(requested) = tool.viewport {
            session.set_viewport(requested(&arguments)?);
        }
        let viewport = session.viewport();
        let page = session.page().await?;
        page.forget_ahead();
        admit(page, tool.name, policy).await?;
        let call = PageCall {
            page: &mut *page,
            browser: self,
            viewport,
        };
        let (mut done, snapshot, capture) = match act(call, arguments).await? {
            Answer::Text(said) => return Ok(vec![text(said)]),
            Answer::LastTabClosed(said) => {
                // The browser closes with the default session's last tab, as upstream's does,
                // unless other sessions still live in it.
                if session.open_session_names().len() == 1 {
                    session.close().await;
                }
                return Ok(vec![text(said)]);
            }
            Answer::Page { done, snapshot } => {
                (done, snapshot.then(SnapshotOptions::default), None)
            }
            Answer::Snapshot(options) => (String::new(), Some(options), None),
            Answer::Screenshot { capture, filename } => (
                String::new(),
                Some(SnapshotOptions::default()),
                Some((capture, filename)),
            ),
        };
        let downloads = self.downloads_lines(page).await;
        let answer = page_answer(page, snapshot, downloads).await;
        let mut items = Vec::new();
        if let Some((capture, filename)) = capture {
            let (image, saved) = self.finish_screenshot(capture, filename.as_deref()).await?;
            items.push(image);
            done = format!("Took a screenshot, saved to {saved}");
        }
        let mut lines = Vec::new();
        if !done.is_empty() {
            lines.push(format!("- {done}"));
            lines.push(String::new());
        }
        lines.push(answer?);
        items.push(text(lines.join("\n")));
        Ok(items)
    }
}

/// Refuses the call when the current tab's state is one `policy` does not run in.
async fn admit(page: &mut Running, tool: &str, policy: Policy) -> Result<(), ToolError> {
    let dialog_open = page.events(|events| events.dialog.is_some())?;
    if dialog_open && policy.blocked_by_dialog {
        let mut lines = vec![
            format!("Tool \"{tool}\" does not handle the modal state."),
            "### Modal state".to_owned(),
        ];
        lines.extend(page.modal_lines()?);
        return Err(ToolError::Reported(lines.join("\n")));
    }
    let crashed = page.events(|events| events.crashed)?;
    if crashed && policy.needs_live_page {
        let (url, _) = page.location().await?;
        return Err(ToolError::Reported(format!(
            "{CRASHED} Tool \"{tool}\" needs a live page: load it again with browser_navigate \
             (it was at {url}), or open another tab (browser_tab_new)."
        )));
    }
    if policy.navigates {
        page.events(|events| events.crashed = false)?;
    }
    Ok(())
}

/// The answer after an action: modal state, tabs, URL, title and (unless a dialog blocks the page)
/// the snapshot.
async fn page_answer(
    running: &mut Running,
    snapshot: Option<SnapshotOptions>,
    downloads: Vec<String>,
) -> Result<String, ToolError> {
    let mut lines = Vec::new();
    let modal = running.modal_lines()?;
    let (blocked, crashed) = running.events(|events| (events.dialog.is_some(), events.crashed))?;
    if crashed {
        lines.push(format!(
            "### Page crashed\n- {CRASHED} browser_navigate loads a page in this tab again."
        ));
        lines.push(String::new());
    }
    if !modal.is_empty() {
        lines.push("### Modal state".to_owned());
        lines.extend(modal);
        lines.push(String::new());
    }
    if !downloads.is_empty() {
        lines.push("### Downloads".to_owned());
        lines.extend(downloads);
        lines.push(String::new());
    }
    if running.tab_count() > 1 {
        lines.push(running.tab_list().await?);
        lines.push(String::new());
        lines.push("### Current tab".to_owned());
    }
    let (url, title, snapshot) = running
        .location_and_snapshot(snapshot.filter(|_| !blocked && !crashed).as_ref())
        .await?;
    lines.push(format!("- Page URL: {url}"));
    lines.push(format!("- Page Title: {title}"));
    lines.extend(snapshot);
    Ok(lines.join("\n"))
}

fn text(text: impl Into<String>) -> ContentItem {
    ContentItem::Text {
        text: text.into(),
        description: None,
    }
}

/// The arguments of a tool that takes none.
#[derive(serde::Deserialize, JsonSchema)]
struct NoArguments {}

/// An element as the answer names it: its description, and the ref.
fn described(element: &str, reference: &str) -> String {
    if element.is_empty() {
        reference.to_owned()
    } else {
        format!("{element} ({reference})")
    }
}

/// Said of an element argument, as upstream says it.
const ELEMENT: &str =
    "Human-readable element description used to obtain permission to interact with the element";
/// Said of a ref argument, as upstream says it.
const REF: &str = "Exact target element reference from the page snapshot";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_declared_once() {
        let names: std::collections::BTreeSet<&str> = declarations()
            .iter()
            .map(|declared| declared.name)
            .collect();
        assert_eq!(declarations().len(), names.len());
    }
}
