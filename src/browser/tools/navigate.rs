//! Loading pages: an address, and the tab's history back and forward.

use std::time::Duration;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

use super::super::session::{Running, SETTLE_CAP};
use super::{Answer, BrowserTool, Declared, NoArguments, PageCall, Policy};
use crate::tools::ToolError;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_navigate",
            "Navigate to a URL",
            Policy::NAVIGATION,
            navigate_to,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_navigate_back",
            "Go back to the previous page",
            Policy::NAVIGATION,
            back,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_navigate_forward",
            "Go forward to the next page",
            Policy::NAVIGATION,
            forward,
        )
        .declared(),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct NavigateArguments {
    /// The URL to navigate to
    url: String,
}

fn navigate_to(
    call: PageCall<'_>,
    arguments: NavigateArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let url = arguments.url.as_str();
        Ok(Answer::page(match navigate(call.page, url).await? {
            Navigated::Yes => format!("Navigated to {url}"),
            Navigated::HeldByDialog => held_by_dialog(url),
        }))
    })
}

fn back(call: PageCall<'_>, _: NoArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(history(call.page, true).await?)) })
}

fn forward(call: PageCall<'_>, _: NoArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(history(call.page, false).await?)) })
}

pub(in crate::browser) enum Navigated {
    /// Done, turned into a download, or settled as far as the cap allows.
    Yes,
    /// A dialog the page opened (`beforeunload`) holds it until answered.
    HeldByDialog,
}

pub(super) fn held_by_dialog(url: &str) -> String {
    format!(
        "Navigation to {url} waits for the page's dialog: accept it with browser_handle_dialog \
         to leave the page, or dismiss it to stay"
    )
}

pub(in crate::browser) async fn navigate(
    running: &mut Running,
    url: &str,
) -> Result<Navigated, ToolError> {
    running.events(|events| {
        events.console.clear();
        events.requests.clear();
    })?;
    let before = running.marks()?;
    let navigation = running.racing(running.load(url)).await?;
    let Some(navigation) = navigation else {
        // A dialog (beforeunload) holds the navigation: the answer shows it.
        return Ok(Navigated::HeldByDialog);
    };
    if navigation.download {
        // No document comes: the answer says where the file went, once the browser said it began.
        download_began(running).await;
        return Ok(Navigated::Yes);
    }
    if let Some(error) = navigation.error {
        // Chromium aborts a navigation that turned into a download, and says so a moment later.
        if error.contains("ERR_ABORTED") && download_began(running).await {
            return Ok(Navigated::Yes);
        }
        // The renderer died under it: the answer says the page crashed.
        if running.events(|events| events.crashed)? {
            return Ok(Navigated::Yes);
        }
        return Err(ToolError::Reported(format!(
            "Navigation to {url} failed: {error}"
        )));
    }
    // One cap for the load and the settling after it: a page whose load never fires is usable once
    // it committed, and its hanging requests are not waited for a second time.
    let deadline = Instant::now() + SETTLE_CAP;
    if navigation.new_document {
        running
            .wait_until(deadline, |events| events.loads != before.loads)
            .await?;
    }
    running.settle_loaded(running.marks()?, deadline).await?;
    Ok(Navigated::Yes)
}

/// Whether a download not yet said in an answer begins within a second (the navigation to `url`
/// turned into one; its URL may differ after redirects); false at once when the page crashed.
async fn download_began(running: &Running) -> bool {
    let events = running.browser_events();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut changes = events.subscribe();
    for _ in 0..10_000 {
        if events.downloads(|downloads| downloads.iter().any(|d| !d.announced)) {
            return true;
        }
        if running.is_closed()
            || running.events(|events| events.crashed).unwrap_or(true)
            || tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
        {
            return false;
        }
    }
    false
}

pub(in crate::browser) async fn history(
    running: &mut Running,
    back: bool,
) -> Result<String, ToolError> {
    let Some(entry) = running.history_neighbour(back).await? else {
        return Ok(format!(
            "There is no page to go {} to",
            if back { "back" } else { "forward" }
        ));
    };
    let before = running.marks()?;
    let moved = running.racing(running.go_to_history_entry(entry)).await?;
    if moved.is_some() {
        let deadline = Instant::now() + SETTLE_CAP;
        running
            .wait_until(deadline, |events| {
                events.loads != before.loads || events.documents != before.documents
            })
            .await?;
        running.settle_loaded(running.marks()?, deadline).await?;
    }
    Ok(format!("Went {}", if back { "back" } else { "forward" }))
}
