//! The browser's tabs and window: list, open, select and close tabs, resize the viewport, close the
//! browser.

use std::time::Duration;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::super::session::{DEFAULT, NO_PAGE, Running, Session, sessions_lost};
use super::navigate::{Navigated, held_by_dialog, navigate};
use super::{Answer, BrowserTool, Declared, NoArguments, PageCall, Policy};
use crate::tools::ToolError;

/// Largest viewport `browser_resize` accepts, per side.
const MAX_SIDE: f64 = 10_000.0;
/// How long `browser_resize` waits for the page to see its new size and run its `resize` handlers.
const RESIZE_WAIT: Duration = Duration::from_secs(2);
/// The protocol's own time on top of a wait the page runs.
const CALL_MARGIN: Duration = Duration::from_millis(500);

/// A promise resolved once the page's window is `width`x`height` and a frame has run since (the
/// `resize` event is dispatched in a frame's rendering steps, before its animation callbacks), or
/// after [`RESIZE_WAIT`]: `true` when the page saw the size.
fn sees_size(width: u32, height: u32) -> String {
    format!(
        "new Promise(resolve => {{ const started = performance.now(); \
         const cap = setTimeout(() => resolve(false), {cap}); \
         const look = () => {{ if (innerWidth === {width} && innerHeight === {height}) \
         return requestAnimationFrame(() => setTimeout(() => {{ clearTimeout(cap); resolve(true); }}, 0)); \
         if (performance.now() - started < {cap}) setTimeout(look, 10); }}; look(); }})",
        cap = RESIZE_WAIT.as_millis()
    )
}

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_session("browser_close", "Close the page", close).declared(),
        BrowserTool::on_page(
            "browser_resize",
            "Resize the browser window",
            Policy::ACTION,
            resize,
        )
        .sets_viewport(requested_viewport)
        .declared(),
        BrowserTool::on_page(
            "browser_tab_list",
            "List browser tabs",
            Policy::ANY_PAGE,
            tab_list,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_tab_new",
            "Open a new tab",
            Policy::ANY_PAGE,
            tab_new,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_tab_select",
            "Select a tab by index",
            Policy::ANY_PAGE,
            tab_select,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_tab_close",
            "Close a tab",
            Policy::ANY_PAGE,
            tab_close,
        )
        .declared(),
    ]
}

/// Closes the browser (and every session with it); in a session other than the default one, closes
/// that session's tabs only.
fn close(session: &mut Session, _: NoArguments) -> BoxFuture<'_, Result<String, ToolError>> {
    Box::pin(async move {
        if session.addressed() != DEFAULT {
            let name = session.addressed().to_owned();
            let closed = session.browser().await?.close_all_tabs().await?;
            return Ok(format!(
                "Closed the {closed} tab(s) of session {name}. The session stays open with its \
                 cookies and storage (browser_session_close closes it); its next call opens a \
                 blank tab."
            ));
        }
        Ok(match session.close().await {
            Some(lost) => format!(
                "Closed the browser. The next browser tool call opens a new one.{}",
                sessions_lost(&lost)
            ),
            None => "No browser was open.".to_owned(),
        })
    })
}

#[derive(Deserialize, JsonSchema)]
struct ResizeArguments {
    /// Width of the browser window
    width: f64,
    /// Height of the browser window
    height: f64,
}

fn requested_viewport(arguments: &ResizeArguments) -> Result<(u32, u32), ToolError> {
    let (width, height) = (arguments.width, arguments.height);
    if !(1.0..=MAX_SIDE).contains(&width) || !(1.0..=MAX_SIDE).contains(&height) {
        return Err(ToolError::Reported(format!(
            "width and height must be between 1 and {MAX_SIDE} pixels"
        )));
    }
    // Both are whole numbers of pixels within the bounds just checked.
    Ok((width.round() as u32, height.round() as u32))
}

/// The viewport the call asked for is the session's already (see [`requested_viewport`]): the
/// current tab is given it.
fn resize(call: PageCall<'_>, _: ResizeArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let (width, height) = call.viewport;
        call.page.set_viewport(call.viewport).await?;
        // The renderer applies the new size and fires `resize` with a later frame: the answer's
        // snapshot waits for the page to see it, as Playwright's resize does (bounded; a page whose
        // size another emulation pins, or a dialog opened by a handler, is answered as it is).
        let seen = call
            .page
            .evaluate_in_page(&sees_size(width, height), RESIZE_WAIT + CALL_MARGIN)
            .await;
        if let Err(err) = seen {
            tracing::debug!("waiting for the page to see its new size: {err:?}");
        }
        Ok(Answer::page(format!(
            "Resized the viewport to {width}x{height}"
        )))
    })
}

fn tab_list(call: PageCall<'_>, _: NoArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::Text(call.page.tab_list().await?)) })
}

#[derive(Deserialize, JsonSchema)]
struct TabNewArguments {
    #[schemars(
        description = "The URL to navigate to in the new tab. If not provided, the new tab will be blank."
    )]
    url: Option<String>,
}

fn tab_new(
    call: PageCall<'_>,
    arguments: TabNewArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        running.new_tab(call.viewport).await?;
        Ok(Answer::page(match arguments.url.as_deref() {
            Some(url) => match navigate(running, url).await? {
                Navigated::Yes => format!("Opened a new tab at {url}"),
                Navigated::HeldByDialog => held_by_dialog(url),
            },
            None => "Opened a new tab".to_owned(),
        }))
    })
}

#[derive(Deserialize, JsonSchema)]
struct TabSelectArguments {
    /// The index of the tab to select
    index: f64,
}

fn tab_select(
    call: PageCall<'_>,
    arguments: TabSelectArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let index = tab_index(call.page, arguments.index)?;
        call.page.select_tab(index).await?;
        Ok(Answer::page(format!("Selected tab {}", index + 1)))
    })
}

#[derive(Deserialize, JsonSchema)]
struct TabCloseArguments {
    #[schemars(description = "The index of the tab to close. Closes current tab if not provided.")]
    index: Option<f64>,
}

fn tab_close(
    call: PageCall<'_>,
    arguments: TabCloseArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let index = match arguments.index {
            None => running.current_tab(),
            Some(given) => tab_index(running, given)?,
        };
        running.close_tab(index).await?;
        if running.tab_count() == 0 {
            return Ok(Answer::LastTabClosed(format!(
                "Closed tab {}.\n{NO_PAGE}",
                index + 1
            )));
        }
        Ok(Answer::page(format!("Closed tab {}", index + 1)))
    })
}

/// The 0-based index of the open tab numbered `index` (from 1, as the tab list numbers them).
fn tab_index(running: &Running, index: f64) -> Result<usize, ToolError> {
    let count = running.tab_count();
    let bad = || {
        ToolError::Reported(format!(
            "index must be the number of an open tab, from 1 to {count} (see browser_tab_list)"
        ))
    };
    if index.fract() != 0.0 || index < 1.0 || index > count as f64 {
        return Err(bad());
    }
    // A whole number between 1 and the tab count, checked above.
    Ok(index as usize - 1)
}
