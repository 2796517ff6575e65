//! Pages and tabs: navigate (an address, or `back` / `forward` / `reload`), screenshot and zoom, and
//! the tab members.

use serde_json::Value;
use tokio::time::Instant;

use super::super::session::{CALL, Clip, SETTLE_CAP};
use super::super::tools::navigate::{Navigated, history, navigate as load};
use super::{Act, Outcome, TAB_MISSING};
use crate::tools::ToolError;

/// How much `zoom` scales a region up at most.
const MAX_ZOOM: f64 = 8.0;

/// Schemes an address keeps as written; anything else without `scheme://` is given `https://` (the
/// SDK's "the protocol may be omitted").
const OWN_SCHEMES: &[&str] = &[
    "about:",
    "data:",
    "file:",
    "javascript:",
    "blob:",
    "chrome:",
];

pub async fn navigate(act: Act<'_>, url: &str) -> Result<Outcome, ToolError> {
    let running = act.running;
    match url.trim().to_ascii_lowercase().as_str() {
        word @ ("back" | "forward") => {
            let said = history(running, word == "back").await?;
            if said.starts_with("There is no page") {
                return Err(ToolError::Reported(format!("{said}.")));
            }
        }
        "reload" => {
            let before = running.marks()?;
            running.racing(running.reload()).await?;
            let deadline = Instant::now() + SETTLE_CAP;
            running
                .wait_until(deadline, |events| events.loads != before.loads)
                .await?;
            running.settle_loaded(running.marks()?, deadline).await?;
        }
        _ => {
            let address = with_scheme(url.trim());
            // A dialog the new page opens as it loads (an `alert`) is dismissed and reported; one
            // the old page opened to ask whether to leave (`beforeunload`) keeps the tab where it was.
            if let Navigated::HeldByDialog = load(running, &address).await?
                && act
                    .reports
                    .dismiss_dialogs(running)
                    .await?
                    .iter()
                    .any(|kind| kind == "beforeunload")
            {
                return Err(ToolError::Reported(format!(
                    "The page asked to confirm leaving it (a beforeunload dialog), which was \
                     dismissed: the tab stayed on its page instead of going to {address}."
                )));
            }
        }
    }
    let (url, title) = running.location().await?;
    // The main document's HTTP status, as the page's own navigation timing has it (none for a
    // page not loaded over HTTP).
    let status = running
        .evaluate_in_page(
            "(performance.getEntriesByType('navigation')[0] || {}).responseStatus || null",
            CALL,
        )
        .await
        .ok()
        .flatten()
        .and_then(|answer| answer.pointer("/result/value").and_then(Value::as_i64))
        .filter(|status| *status > 0);
    Ok(Outcome::Navigated { url, status, title })
}

fn with_scheme(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    if url.contains("://") || OWN_SCHEMES.iter().any(|scheme| lower.starts_with(scheme)) {
        url.to_owned()
    } else {
        format!("https://{url}")
    }
}

pub async fn screenshot(act: Act<'_>) -> Result<Outcome, ToolError> {
    let image = act.running.start_screenshot(true, None)?.finish().await?;
    Ok(Outcome::Image {
        data: image.base64,
        media_type: "image/png",
    })
}

/// The region `[x0, y0, x1, y1]` of the viewport, scaled up to fit the viewport's size (at most
/// [`MAX_ZOOM`] times).
pub async fn zoom(act: Act<'_>, region: &[i64]) -> Result<Outcome, ToolError> {
    let &[x0, y0, x1, y1] = region else {
        return Err(ToolError::Reported(format!(
            "region must be [x0, y0, x1, y1], four numbers, not {}.",
            region.len()
        )));
    };
    let layout = act.running.layout().await?;
    // Pixel numbers, far inside f64's exact range.
    let (left, top, right, bottom) = (x0 as f64, y0 as f64, x1 as f64, y1 as f64);
    if left < 0.0 || top < 0.0 || right > layout.width || bottom > layout.height {
        return Err(ToolError::Reported(format!(
            "region [{x0}, {y0}, {x1}, {y1}] is not within the viewport, which is {}x{} pixels.",
            layout.width, layout.height
        )));
    }
    if right <= left || bottom <= top {
        return Err(ToolError::Reported(format!(
            "region [{x0}, {y0}, {x1}, {y1}] is empty: x1 must be greater than x0, and y1 than y0."
        )));
    }
    let scale = (layout.width / (right - left))
        .min(layout.height / (bottom - top))
        .clamp(1.0, MAX_ZOOM);
    let clip = Clip::of_viewport(&layout, (left, top, right, bottom), scale);
    let image = act
        .running
        .start_screenshot(true, Some(clip))?
        .finish()
        .await?;
    Ok(Outcome::Image {
        data: image.base64,
        media_type: "image/png",
    })
}

/// A new blank tab, made the active one.
pub async fn new_tab(act: Act<'_>) -> Result<Outcome, ToolError> {
    let running = act.running;
    running.new_tab(act.viewport).await?;
    running.select_tab(running.current_tab()).await?;
    let target = running
        .current_target()
        .ok_or_else(|| ToolError::Reported("the new tab closed at once".into()))?;
    Ok(Outcome::Tab(act.reports.tab_id(&target)))
}

pub async fn switch_tab(act: Act<'_>, tab_id: &str) -> Result<Outcome, ToolError> {
    let index = act
        .reports
        .target_of(tab_id)
        .and_then(|target| act.running.tab_index(target))
        .ok_or_else(|| ToolError::Reported(TAB_MISSING.into()))?;
    act.running.select_tab(index).await?;
    Ok(Outcome::Tab(tab_id.to_owned()))
}

pub async fn close_tab(act: Act<'_>, tab_id: &str) -> Result<Outcome, ToolError> {
    let index = act
        .reports
        .target_of(tab_id)
        .and_then(|target| act.running.tab_index(target))
        .ok_or_else(|| ToolError::Reported(TAB_MISSING.into()))?;
    act.running.close_tab(index).await?;
    if act.running.tab_count() > 0 {
        act.running.select_tab(act.running.current_tab()).await?;
    }
    Ok(Outcome::Done(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_without_a_protocol_is_https() {
        assert_eq!(with_scheme("example.com/a"), "https://example.com/a");
        assert_eq!(
            with_scheme("http://127.0.0.1:8000/"),
            "http://127.0.0.1:8000/"
        );
        assert_eq!(with_scheme("about:blank"), "about:blank");
        assert_eq!(with_scheme("data:text/html,hi"), "data:text/html,hi");
    }
}
