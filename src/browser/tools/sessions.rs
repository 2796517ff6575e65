//! Sessions (boxd's own tools, beside upstream's): open, list and close isolated browser contexts of
//! the one browser (see `session::contexts`). Every other tool of the family acts in one when its
//! `session` argument names it.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::GROUP;
use super::super::session::{MAX_SESSIONS, Session};
use super::{Browser, NoArguments, text};
use crate::tools::{
    BadArguments, CallToolResult, SchemaDialect, Tool, ToolError, ToolResult, ToolSpec,
};

const NEW: &str = "Open a new browser session: an isolated browser context (like an incognito \
    window) with its own cookies, storage, tabs and downloads, in the same browser. Answers its id; \
    pass it as the \"session\" argument of any browser tool to act in it (without one, tools act in \
    the default session).";
const LIST: &str = "List the open browser sessions, with their tab counts and current URLs";
const CLOSE: &str = "Close a browser session opened by browser_session_new: its tabs, cookies, \
    storage and downloads are discarded";

#[derive(Deserialize, JsonSchema)]
struct CloseArguments {
    /// The session to close: an id browser_session_new answered (e.g. "s1")
    session: String,
}

/// What a session tool answers: its text and `structuredContent`.
type Said = (String, Value);

pub(super) fn tools(browser: &Arc<Browser>) -> Vec<Tool> {
    vec![
        declare::<NoArguments>(browser, "browser_session_new", NEW, |session, _| {
            Box::pin(open(session))
        }),
        declare::<NoArguments>(browser, "browser_session_list", LIST, |session, _| {
            Box::pin(list(session))
        }),
        declare::<CloseArguments>(
            browser,
            "browser_session_close",
            CLOSE,
            |session, arguments| Box::pin(close(session, arguments.session)),
        ),
    ]
}

type SessionsAct<A> =
    for<'a> fn(&'a mut Session, A) -> futures_util::future::BoxFuture<'a, Result<Said, ToolError>>;

/// A session tool, declared as the family's others are (upstream's schema dialect and refusals),
/// holding the browser for its call.
fn declare<A>(
    browser: &Arc<Browser>,
    name: &'static str,
    description: &'static str,
    act: SessionsAct<A>,
) -> Tool
where
    A: serde::de::DeserializeOwned + JsonSchema + Send + 'static,
{
    let browser = Arc::clone(browser);
    ToolSpec::declare::<A>(GROUP, name, description)
        .dialect(SchemaDialect::ZodToJsonSchema)
        .sdk_defaults_mean_absent()
        .bad_arguments(BadArguments::ZodError)
        .handler(move |arguments: A, _| {
            let browser = Arc::clone(&browser);
            async move {
                let mut session = browser.session.lock().await;
                let _active = session.call_started();
                let outcome = act(&mut session, arguments).await;
                let notice = session.take_notice();
                answer(notice, outcome)
            }
        })
}

/// The answer, after the notice of a browser that was started again (as every tool's).
fn answer(notice: Option<String>, outcome: Result<Said, ToolError>) -> ToolResult {
    let with_notice = |said: String| match &notice {
        Some(notice) => format!("{notice}\n\n{said}"),
        None => said,
    };
    Ok(match outcome {
        Ok((said, structured)) => {
            let mut result = CallToolResult::new(vec![text(with_notice(said))], false);
            result.structured_content = Some(structured);
            result
        }
        Err(err) => CallToolResult::new(vec![text(with_notice(err.into_report()?))], true),
    })
}

async fn open(session: &mut Session) -> Result<Said, ToolError> {
    let id = session.open_session().await?;
    Ok((
        format!(
            "Opened session {id}: an isolated browser context (its own cookies, storage, tabs and \
             downloads) with one blank tab. Pass \"session\": \"{id}\" to any browser tool \
             (e.g. browser_navigate) to act in it; its refs are written {id}_e7. \
             browser_session_close closes it (at most {MAX_SESSIONS} are open at once)."
        ),
        json!({"session": id}),
    ))
}

async fn list(session: &mut Session) -> Result<Said, ToolError> {
    let infos = session.session_infos().await?;
    let mut lines = vec!["### Sessions".to_owned()];
    for info in &infos {
        let tabs = match info.tabs {
            1 => "1 tab".to_owned(),
            count => format!("{count} tabs"),
        };
        let current = info
            .current_url
            .as_deref()
            .map(|url| format!(", current: {url}"))
            .unwrap_or_default();
        lines.push(format!("- {}: {tabs}{current}", info.session));
    }
    Ok((lines.join("\n"), json!({"sessions": infos})))
}

async fn close(session: &mut Session, name: String) -> Result<Said, ToolError> {
    session.close_session(&name).await?;
    let open = session.open_session_names();
    Ok((
        format!(
            "Closed session {name}: its tabs, cookies, storage and downloads are gone. Open \
             sessions: {}.",
            open.join(", ")
        ),
        json!({"session": name, "closed": true}),
    ))
}
