//! Anthropic's browser toolset, `browser_toolset_20260801`, served natively as one tool (its members
//! share names with the computer toolset's, so they cannot all be tools of their own):
//! `browser_toolset {"member": NAME, "input": {...}}`, the input exactly as the SDK's
//! `BetaBrowser*Input` type of that member defines it (`anthropic` 2.14.0,
//! `anthropic/types/beta/beta_browser_*_input.py`; their docstrings are the members' documentation).
//!
//! Every answer has `structuredContent` `{"member", "result" | "error", "browser_state"}`: the result
//! shaped as the SDK's result types (`BetaBrowserNavigateResult`, `BetaScreenshotResult`, a tab entry,
//! the tab list, text, or `null` for a pure action), the `browser_state` as `BetaBrowserState` (see
//! [`report`]), and `content` an MCP client reads directly: the member's answer as the SDK renders it
//! for the model (`Navigated to ... (HTTP 200)`, the image, the text, `Clicked.`), then the state. A
//! refusal is an `isError` answer worded as the SDK's `_errors.py` words it. So a driver of the SDK's
//! `BetaAbstractBrowserToolset20260801` is a few lines: `execute` forwards `(name, input)` here and
//! hands back `result`, `_browser_state` returns the last `browser_state`.
//!
//! Refs are `ref_N` (the SDK's form): the tab's ref number N, which the playwright tools write `eN`, so
//! both name the same element. Dialogs a page opens are dismissed (the toolset has no member to answer
//! them) and reported as `dialog_dismissed`.

mod act;
mod input;
mod pages;
mod read;
mod report;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::session::{RefStyle, Running, Session};
use super::tools::Browser;
use crate::tools::{CallToolResult, ContentItem, ToolError, ToolResult};
pub use act::MAX_WAIT_SECONDS;
use input::Input;
pub use read::{MAX_MATCHES, MAX_READ_CHARS};
pub use report::{MAX_DIALOGS, Reports};

/// The group of the toolset's tool.
pub const GROUP: &str = "anthropic-browser";
pub const NAME: &str = "browser_toolset";
pub const DESCRIPTION: &str = "Anthropic's browser toolset (browser_toolset_20260801): runs one member \
    (navigate, screenshot, zoom, left_click, right_click, middle_click, double_click, triple_click, \
    hover, left_click_drag, left_mouse_down, left_mouse_up, mouse_move, scroll, scroll_to, type, key, \
    hold_key, form_input, read_page, find, get_page_text, wait, file_upload, read_console, \
    read_network, javascript_exec, new_tab, list_tabs, switch_tab, close_tab) with its input as the \
    SDK's BetaBrowser<Member>Input defines it. Answers the member's result and the browser_state.";

/// The tool's arguments.
#[derive(Deserialize, JsonSchema)]
pub struct MemberCall {
    /// The member to run, e.g. `navigate`, `left_click`, `read_page`.
    member: String,
    /// The member's input, as the SDK's `BetaBrowser<Member>Input` type defines it (e.g.
    /// `{"url": "example.com"}` for navigate, `{"target": {"type": "ref", "ref": "ref_7"}}` for
    /// left_click); `tab_id` names the tab to act on (the active one when omitted).
    #[serde(default)]
    input: Map<String, Value>,
}

/// What a member returns, as the SDK's `ResultKind` sorts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Navigate,
    Screenshot,
    Text,
    Tab,
    Tabs,
    /// A pure action: the SDK's fixed acknowledgment, with `{field}`s of the input.
    Action(Option<&'static str>),
}

/// One member: its name, what it returns, whether its input names the tab to act on, and its policy.
struct Member {
    name: &'static str,
    kind: Kind,
    addresses_tab: bool,
    /// Refused while the tab's page has crashed (its renderer gone): a navigation brings it back.
    needs_live_page: bool,
}

const fn member(name: &'static str, kind: Kind) -> Member {
    Member {
        name,
        kind,
        addresses_tab: true,
        needs_live_page: true,
    }
}

/// Members that run on any page (a crashed one too).
const fn on_any_page(name: &'static str, kind: Kind) -> Member {
    Member {
        needs_live_page: false,
        ..member(name, kind)
    }
}

/// Members of the browser's tabs: whatever their pages' state, and no tab addressed.
const fn on_tabs(name: &'static str, kind: Kind) -> Member {
    Member {
        addresses_tab: false,
        needs_live_page: false,
        ..member(name, kind)
    }
}

/// The members in the SDK's order, with its result kinds and acknowledgments
/// (`lib/tools/_toolsets/_registry.py`'s `ROWS`).
const MEMBERS: &[Member] = &[
    on_any_page("navigate", Kind::Navigate),
    member("screenshot", Kind::Screenshot),
    member("zoom", Kind::Screenshot),
    member("left_click", Kind::Action(Some("Clicked."))),
    member("right_click", Kind::Action(Some("Right-clicked."))),
    member("middle_click", Kind::Action(Some("Middle-clicked."))),
    member("double_click", Kind::Action(Some("Double-clicked."))),
    member("triple_click", Kind::Action(Some("Triple-clicked."))),
    member("hover", Kind::Action(Some("Hovered."))),
    member("left_click_drag", Kind::Action(Some("Dragged."))),
    member(
        "left_mouse_down",
        Kind::Action(Some("Mouse button pressed.")),
    ),
    member(
        "left_mouse_up",
        Kind::Action(Some("Mouse button released.")),
    ),
    member("mouse_move", Kind::Action(Some("Moved the mouse."))),
    member("scroll", Kind::Action(Some("Scrolled {scroll_direction}."))),
    member("scroll_to", Kind::Action(Some("Scrolled to {ref}."))),
    member("type", Kind::Action(Some("Typed."))),
    member("key", Kind::Action(Some("Pressed {text}."))),
    member(
        "hold_key",
        Kind::Action(Some("Held {text} for {duration}s.")),
    ),
    member("form_input", Kind::Action(Some("Set the value of {ref}."))),
    member("read_page", Kind::Text),
    member("find", Kind::Text),
    member("get_page_text", Kind::Text),
    on_any_page("wait", Kind::Action(Some("Waited {duration}s."))),
    member("file_upload", Kind::Action(Some("Uploaded."))),
    on_any_page("read_console", Kind::Text),
    on_any_page("read_network", Kind::Text),
    member("javascript_exec", Kind::Text),
    on_tabs("new_tab", Kind::Tab),
    on_tabs("list_tabs", Kind::Tabs),
    on_tabs("switch_tab", Kind::Tab),
    on_tabs("close_tab", Kind::Action(None)),
];

/// How the toolset writes refs: `ref_7`, the tab's ref number 7.
const TOOLSET_REFS: RefStyle = RefStyle {
    number: toolset_ref_number,
    from: "read_page or find",
    example: "ref_7",
    take: "Call read_page or find and use a ref from its answer.",
    renew: "call read_page or find again and use a ref from its answer.",
};

fn toolset_ref_number(reference: &str) -> Option<u64> {
    let reference = reference.trim();
    let reference = reference
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(reference);
    reference.strip_prefix("ref_")?.parse().ok()
}

/// The SDK's `TabMissingError`.
const TAB_MISSING: &str = "The tab this call was addressed to is not open; nothing was returned. Use \
    list_tabs to see what is open.";

/// What a member answered.
enum Outcome {
    Navigated {
        url: String,
        status: Option<i64>,
        title: String,
    },
    Image {
        data: String,
        media_type: &'static str,
    },
    Text(String),
    /// A tab's entry (by its `tab_id`), read from the report made after the call.
    Tab(String),
    Tabs,
    /// A pure action, with the line it may add to its acknowledgment.
    Done(Option<String>),
}

/// What a member acts with.
struct Act<'a> {
    browser: &'a Browser,
    running: &'a mut Running,
    reports: &'a mut Reports,
    viewport: (u32, u32),
}

/// One call of the toolset's tool.
pub async fn call(
    browser: &Browser,
    session: &mut Session,
    reports: &mut Reports,
    call: MemberCall,
) -> ToolResult {
    let MemberCall { member, input } = call;
    let outcome = match MEMBERS.iter().find(|known| known.name == member) {
        None => Err(ToolError::Reported(format!(
            "Error: unknown browser toolset member '{}'",
            quoted_name(&member)
        ))),
        Some(known) => match input::parse(known.name, input.clone(), known.addresses_tab) {
            Err(problem) => Err(ToolError::Reported(format!(
                "invalid input for browser member '{}': {problem}",
                known.name
            ))),
            Ok((parsed, tab)) => run(browser, session, reports, known, parsed, tab).await,
        },
    };
    let notice = session.take_notice();
    let state = reports.report(browser, session).await;
    let known = MEMBERS.iter().find(|known| known.name == member);
    let mut structured = json!({"member": member});
    let mut content = Vec::new();
    if let Some(notice) = &notice {
        content.push(ContentItem::plain_text(notice.clone()));
        structured["notice"] = json!(notice);
    }
    let failed = match outcome {
        Ok(outcome) => {
            let (result, shown) = rendered(outcome, known, &input, &state);
            structured["result"] = result;
            content.extend(shown);
            false
        }
        Err(err) => {
            let text = err.into_report()?;
            structured["error"] = json!(text);
            content.push(ContentItem::plain_text(text));
            true
        }
    };
    content.push(ContentItem::plain_text(format!(
        "browser_state: {}",
        state.value
    )));
    structured["browser_state"] = state.value;
    let mut result = CallToolResult::new(content, failed);
    result.structured_content = Some(structured);
    Ok(result)
}

/// A member name as the SDK's `quoted_name` echoes a model-written one: on one line (control
/// characters a space), cut to 200 characters, runs of quotes and spaces made one space, trimmed.
fn quoted_name(name: &str) -> String {
    let folded: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let cut: String = folded.trim().chars().take(200).collect();
    let mut quoted = String::with_capacity(cut.len());
    for c in cut.chars() {
        let c = if c == '\'' { ' ' } else { c };
        if c == ' ' && quoted.ends_with(' ') {
            continue;
        }
        quoted.push(c);
    }
    quoted.trim().to_owned()
}

/// Runs a parsed member on the tab it addresses (the active one unless its input names another),
/// after dismissing the dialogs the pages show and checking the member's policy.
async fn run(
    browser: &Browser,
    session: &mut Session,
    reports: &mut Reports,
    member: &Member,
    input: Input,
    tab: Option<String>,
) -> Result<Outcome, ToolError> {
    let viewport = session.viewport();
    let running = session.page().await?;
    running.forget_ahead();
    reports.dismiss_dialogs(running).await?;
    let active = running.current_target();
    if let Some(tab) = &tab {
        let index = reports
            .target_of(tab)
            .and_then(|target| running.tab_index(target))
            .ok_or_else(|| ToolError::Reported(TAB_MISSING.into()))?;
        running.address_tab(index);
    }
    let outcome = admitted(running, member).await;
    let outcome = match outcome {
        Ok(()) => {
            let act = Act {
                browser,
                running: &mut *running,
                reports: &mut *reports,
                viewport,
            };
            dispatch(act, input).await
        }
        Err(err) => Err(err),
    };
    // A call addressed to a background tab leaves the active tab active.
    if tab.is_some()
        && let Some(active) = active
        && let Some(index) = running.tab_index(&active)
    {
        running.address_tab(index);
    }
    outcome
}

/// Refuses the call when the addressed tab's state is one the member's policy does not run in.
async fn admitted(running: &mut Running, member: &Member) -> Result<(), ToolError> {
    let crashed = running.events(|events| events.crashed)?;
    if crashed && member.needs_live_page {
        let (url, _) = running.location().await?;
        return Err(ToolError::Reported(format!(
            "The page in this tab crashed (its renderer process exited: out of memory, or a \
             browser bug). {} needs a live page: load it again with navigate (it was at {url}), \
             or open another tab (new_tab).",
            member.name
        )));
    }
    Ok(())
}

async fn dispatch(mut act: Act<'_>, input: Input) -> Result<Outcome, ToolError> {
    use super::session::MouseButton::{Left, Middle, Right};
    match input {
        Input::Navigate(input) => pages::navigate(act, &input.url).await,
        Input::Screenshot(_) => pages::screenshot(act).await,
        Input::Zoom(input) => pages::zoom(act, &input.region).await,
        Input::LeftClick(input) => act.click(input, Left, 1).await,
        Input::RightClick(input) => act.click(input, Right, 1).await,
        Input::MiddleClick(input) => act.click(input, Middle, 1).await,
        Input::DoubleClick(input) => act.click(input, Left, 2).await,
        Input::TripleClick(input) => act.click(input, Left, 3).await,
        Input::Hover(input) => act.hover(input).await,
        Input::LeftClickDrag(input) => act.drag(input).await,
        Input::LeftMouseDown(input) => act.mouse_button(input, true).await,
        Input::LeftMouseUp(input) => act.mouse_button(input, false).await,
        Input::MouseMove(input) => act.mouse_move(input).await,
        Input::Scroll(input) => act.scroll(input).await,
        Input::ScrollTo(input) => act.scroll_to(input).await,
        Input::Type(input) => act.type_text(&input.text).await,
        Input::Key(input) => act.key(input).await,
        Input::HoldKey(input) => act.hold_key(input).await,
        Input::FormInput(input) => act.form_input(input).await,
        Input::ReadPage(input) => read::read_page(act, input).await,
        Input::Find(input) => read::find(act, &input.query).await,
        Input::GetPageText(_) => read::page_text(act).await,
        Input::Wait(input) => act::wait(input.duration).await,
        Input::FileUpload(input) => act.file_upload(input).await,
        Input::ReadConsole(_) => read::console(act),
        Input::ReadNetwork(_) => read::network(act),
        Input::JavascriptExec(input) => read::javascript(act, &input.text).await,
        Input::NewTab(_) => pages::new_tab(act).await,
        Input::ListTabs(_) => Ok(Outcome::Tabs),
        Input::SwitchTab(input) => pages::switch_tab(act, &input.tab_id).await,
        Input::CloseTab(input) => pages::close_tab(act, &input.tab_id).await,
    }
}

/// The result as `structuredContent` holds it (shaped as the SDK's result types) and the content
/// an MCP client reads (as the SDK renders it for the model).
fn rendered(
    outcome: Outcome,
    member: Option<&Member>,
    input: &Map<String, Value>,
    state: &report::State,
) -> (Value, Vec<ContentItem>) {
    let text = ContentItem::plain_text;
    match outcome {
        Outcome::Navigated { url, status, title } => {
            let mut line = format!("Navigated to {url}");
            if !title.is_empty() {
                line.push_str(&format!(" — {title}"));
            }
            if let Some(status) = status {
                line.push_str(&format!(" (HTTP {status})"));
            }
            (
                json!({"url": url, "status": status, "title": title}),
                vec![text(line)],
            )
        }
        Outcome::Image { data, media_type } => (
            json!({"data": data, "media_type": media_type}),
            vec![ContentItem::Image {
                data,
                mime_type: media_type.to_owned(),
            }],
        ),
        Outcome::Text(said) => {
            let shown = if said.is_empty() {
                "(empty)".to_owned()
            } else {
                said.clone()
            };
            (json!(said), vec![text(shown)])
        }
        Outcome::Tab(id) => (tab_entry(state, &id), Vec::new()),
        Outcome::Tabs => (json!(state.tabs), Vec::new()),
        Outcome::Done(line) => {
            let mut shown = Vec::new();
            if let Some(Member {
                kind: Kind::Action(Some(template)),
                ..
            }) = member
            {
                shown.push(text(acknowledgment(template, input)));
            }
            if let Some(line) = &line {
                shown.push(text(line.clone()));
            }
            (json!(line), shown)
        }
    }
}

/// The report's entry of the tab `id`, or `null` (it closed meanwhile).
fn tab_entry(state: &report::State, id: &str) -> Value {
    state
        .tabs
        .iter()
        .find(|tab| tab["tab_id"] == json!(id))
        .cloned()
        .unwrap_or(Value::Null)
}

/// An acknowledgment filled from the input in one pass, as the SDK's `confirmation_text` fills it.
fn acknowledgment(template: &str, input: &Map<String, Value>) -> String {
    let field = |path: &[&str]| -> String {
        let mut value = path.first().and_then(|first| input.get(*first));
        for part in path.iter().skip(1) {
            value = value.and_then(|value| value.get(*part));
        }
        shown_value(value)
    };
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let Some(end) = after.find('}') else { break };
        let value = match &after[1..end] {
            "scroll_direction" => field(&["scroll_direction"]),
            "text" => field(&["text"]),
            "duration" => field(&["duration"]),
            "ref" => field(&["target", "ref"]),
            other => format!("{{{other}}}"),
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A value as one line of text: a whole number without its `.0`, as JSON spells it.
fn shown_value(value: Option<&Value>) -> String {
    let text = match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => match number.as_f64() {
            Some(float) if float.fract() == 0.0 && float.abs() < 1e15 => {
                format!("{}", float as i64)
            }
            _ => number.to_string(),
        },
        Some(other) => other.to_string(),
    };
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_of_the_sdk_is_listed_once() {
        let names: std::collections::BTreeSet<&str> =
            MEMBERS.iter().map(|member| member.name).collect();
        assert_eq!(names.len(), 31);
        assert_eq!(MEMBERS.len(), 31);
    }

    #[test]
    fn acknowledgments_are_filled_from_the_input() {
        let input = |value: Value| match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        assert_eq!(
            acknowledgment(
                "Scrolled {scroll_direction}.",
                &input(json!({"scroll_direction": "down"}))
            ),
            "Scrolled down."
        );
        assert_eq!(
            acknowledgment(
                "Held {text} for {duration}s.",
                &input(json!({"text": "shift", "duration": 2.0}))
            ),
            "Held shift for 2s."
        );
        assert_eq!(
            acknowledgment(
                "Scrolled to {ref}.",
                &input(json!({"target": {"type": "ref", "ref": "{ref}"}}))
            ),
            "Scrolled to {ref}."
        );
    }

    #[test]
    fn a_model_written_name_is_quoted_as_the_sdk_quotes_it() {
        assert_eq!(quoted_name(" it's\n  odd "), "it s odd");
    }

    #[test]
    fn toolset_refs_are_ref_numbers() {
        assert_eq!(toolset_ref_number("ref_7"), Some(7));
        assert_eq!(toolset_ref_number("[ref_12]"), Some(12));
        assert_eq!(toolset_ref_number("e7"), None);
    }
}
