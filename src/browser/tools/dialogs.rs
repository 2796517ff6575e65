//! Answering the dialogs a page opens (alert, confirm, prompt, beforeunload).

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Answer, BrowserTool, Declared, PageCall, Policy};
use crate::tools::ToolError;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_handle_dialog",
            "Handle a dialog",
            Policy::MODAL,
            handle_dialog,
        )
        .declared(),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct HandleDialogArguments {
    /// Whether to accept the dialog.
    accept: bool,
    /// The text of the prompt in case of a prompt dialog.
    #[serde(rename = "promptText")]
    prompt_text: Option<String>,
}

fn handle_dialog(
    call: PageCall<'_>,
    arguments: HandleDialogArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let Some(dialog) = running.events(|events| events.dialog.clone())? else {
            let mut refusal = "No dialog visible: browser_handle_dialog answers a dialog the \
                                       page opened (alert, confirm, prompt, beforeunload)."
                .to_owned();
            let elsewhere = running.modal_lines()?;
            if !elsewhere.is_empty() {
                refusal.push_str("\n### Modal state\n");
                refusal.push_str(&elsewhere.join("\n"));
            }
            return Err(ToolError::Reported(refusal));
        };
        let accept = arguments.accept;
        let before = running.marks()?;
        running
            .answer_dialog(accept, arguments.prompt_text.as_deref())
            .await?;
        running.events(|events| events.dialog = None)?;
        running.settle(before).await?;
        Ok(Answer::page(format!(
            "{} the \"{}\" dialog",
            if accept { "Accepted" } else { "Dismissed" },
            dialog.kind
        )))
    })
}
