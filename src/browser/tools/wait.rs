//! Waiting: for a time to pass, or for text to appear in or go from the page.

use std::time::Duration;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::super::session::Running;
use super::{Answer, BrowserTool, Declared, PageCall, Policy};
use crate::tools::ToolError;

/// `browser_wait_for`'s `time` is capped here, as upstream caps it.
const MAX_WAIT: Duration = Duration::from_secs(10);
/// How long `browser_wait_for` waits for text to appear or go.
const TEXT_WAIT: Duration = Duration::from_secs(10);

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_wait_for",
            "Wait for text to appear or disappear or a specified time to pass",
            Policy::ACTION,
            waiting,
        )
        .declared(),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct WaitArguments {
    /// The time to wait in seconds
    time: Option<f64>,
    /// The text to wait for
    text: Option<String>,
    /// The text to wait for to disappear
    #[serde(rename = "textGone")]
    text_gone: Option<String>,
}

fn waiting(
    call: PageCall<'_>,
    arguments: WaitArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(wait_for(call.page, arguments).await?)) })
}

async fn wait_for(running: &mut Running, args: WaitArguments) -> Result<String, ToolError> {
    let time = args.time.filter(|t| *t > 0.0);
    let shown = args.text.as_deref();
    let gone = args.text_gone.as_deref();
    if time.is_none() && shown.is_none() && gone.is_none() {
        return Err(ToolError::Reported(
            "Either time, text or textGone must be provided".into(),
        ));
    }
    let mut done = Vec::new();
    if let Some(seconds) = time {
        let wait = Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        tokio::time::sleep(wait).await;
        done.push(format!("Waited {}s", wait.as_secs_f64()));
    }
    for (needle, present) in [(gone, false), (shown, true)] {
        let Some(needle) = needle else { continue };
        let expression = format!(
            "new Promise(resolve => {{ const needle = {needle}; const check = () => \
             (document.body ? document.body.innerText : '').includes(needle) === {present}; \
             if (check()) return resolve(true); const observer = new MutationObserver(() => {{ if \
             (check()) {{ observer.disconnect(); resolve(true); }} }}); observer.observe(document, \
             {{subtree: true, childList: true, characterData: true, attributes: true}}); \
             setTimeout(() => {{ observer.disconnect(); resolve(check()); }}, {limit}); }})",
            needle = serde_json::to_string(needle).unwrap_or_default(),
            limit = TEXT_WAIT.as_millis()
        );
        let answer = running
            .evaluate_in_page(&expression, TEXT_WAIT + Duration::from_secs(2))
            .await?;
        let Some(answer) = answer else { break };
        if answer.pointer("/result/value") != Some(&json!(true)) {
            return Err(ToolError::Reported(format!(
                "Timed out after {}s waiting for the text {} to {}",
                TEXT_WAIT.as_secs(),
                serde_json::to_string(needle).unwrap_or_default(),
                if present { "appear" } else { "disappear" }
            )));
        }
        done.push(format!(
            "The text {} {}",
            serde_json::to_string(needle).unwrap_or_default(),
            if present { "appeared" } else { "is gone" }
        ));
    }
    Ok(done.join("; "))
}
