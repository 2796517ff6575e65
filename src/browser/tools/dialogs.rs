//! Answering the dialogs a page opens (alert, confirm, prompt, beforeunload).

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{Answer, BrowserTool, Declared, PageCall, Policy, given, schema};
use crate::tools::ToolError;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_handle_dialog",
            "Handle a dialog",
            schema(
                json!({"accept": {"type": "boolean", "description": "Whether to accept the dialog."},
                       "promptText": {"type": "string", "description": "The text of the prompt in case of a prompt dialog."}}),
                &["accept"],
            ),
            Policy::MODAL,
            handle_dialog,
        )
        .declared(),
    ]
}

#[derive(Deserialize)]
struct HandleDialogArguments {
    #[serde(default, deserialize_with = "given::flag")]
    accept: Option<bool>,
    #[serde(rename = "promptText", default, deserialize_with = "given::text")]
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
        let accept = arguments.accept.ok_or_else(|| {
            ToolError::Reported(
                "accept is required: true to accept the dialog, false to dismiss it".into(),
            )
        })?;
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
