//! Acting on elements and the keyboard as a user would: click, hover, type, select, press, drag.

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::keys;
use super::super::session::Running;
use super::{Answer, BrowserTool, Declared, ELEMENT, PageCall, Policy, REF, described};
use crate::tools::ToolError;

/// Characters `browser_type` takes at most (one protocol event each when typing slowly).
const MAX_TYPED: usize = 100_000;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_click",
            "Perform click on a web page",
            Policy::ACTION,
            click,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_hover",
            "Hover over element on page",
            Policy::ACTION,
            hover,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_type",
            "Type text into editable element",
            Policy::ACTION,
            typing,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_select_option",
            "Select an option in a dropdown",
            Policy::ACTION,
            selecting,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_press_key",
            "Press a key on the keyboard",
            Policy::ACTION,
            press_key,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_drag",
            "Perform drag and drop between two elements",
            Policy::ACTION,
            dragging,
        )
        .declared(),
    ]
}

/// An element of the page: its description and its ref from a snapshot.
#[derive(Deserialize, JsonSchema)]
struct ElementArguments {
    #[schemars(description = ELEMENT)]
    element: String,
    #[serde(rename = "ref")]
    #[schemars(description = REF)]
    reference: String,
}

fn click(call: PageCall<'_>, args: ElementArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let reference = args.reference.as_str();
        let element = running.element(reference).await?;
        let point = running.center(element.node(), reference).await?;
        let before = running.marks()?;
        running
            // Sent together, in order: a move alone is answered only at the next frame, while the
            // press behind it makes the renderer dispatch it at once.
            .racing(async {
                futures_util::future::try_join3(
                    running.mouse_move(point, 0),
                    running.mouse_press(point),
                    running.mouse_release(point),
                )
                .await
                .map(drop)
            })
            .await?;
        running.settle(before).await?;
        Ok(Answer::page(format!(
            "Clicked {}",
            described(&args.element, reference)
        )))
    })
}

fn hover(call: PageCall<'_>, args: ElementArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let reference = args.reference.as_str();
        let element = running.element(reference).await?;
        let point = running.center(element.node(), reference).await?;
        let before = running.marks()?;
        running.racing(running.mouse_move(point, 0)).await?;
        running.settle(before).await?;
        Ok(Answer::page(format!(
            "Hovered over {}",
            described(&args.element, reference)
        )))
    })
}

#[derive(Deserialize, JsonSchema)]
struct PressKeyArguments {
    #[schemars(
        description = "Name of the key to press or a character to generate, such as `ArrowLeft` or `a`"
    )]
    key: String,
}

fn press_key(
    call: PageCall<'_>,
    args: PressKeyArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let key = args.key.as_str();
        let events = keys::press(key).map_err(ToolError::Reported)?;
        let before = running.marks()?;
        running.racing(running.keys(events)).await?;
        running.settle(before).await?;
        Ok(Answer::page(format!("Pressed {key}")))
    })
}

#[derive(Deserialize, JsonSchema)]
struct TypeArguments {
    #[schemars(description = ELEMENT)]
    element: String,
    #[serde(rename = "ref")]
    #[schemars(description = REF)]
    reference: String,
    /// Text to type into the element
    // May be empty: typing nothing clears the field.
    text: String,
    /// Whether to submit entered text (press Enter after)
    submit: Option<bool>,
    #[schemars(
        description = "Whether to type one character at a time. Useful for triggering key handlers in the page. By default entire text is filled in at once."
    )]
    slowly: Option<bool>,
}

fn typing(
    call: PageCall<'_>,
    arguments: TypeArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(type_text(call.page, arguments).await?)) })
}

#[derive(Deserialize, JsonSchema)]
struct SelectArguments {
    #[schemars(description = ELEMENT)]
    element: String,
    #[serde(rename = "ref")]
    #[schemars(description = REF)]
    reference: String,
    #[schemars(
        description = "Array of values to select in the dropdown. This can be a single value or multiple values."
    )]
    values: Vec<String>,
}

fn selecting(
    call: PageCall<'_>,
    arguments: SelectArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(select_option(call.page, arguments).await?)) })
}

#[derive(Deserialize, JsonSchema)]
struct DragArguments {
    #[serde(rename = "startElement")]
    #[schemars(
        description = "Human-readable source element description used to obtain the permission to interact with the element"
    )]
    start_element: String,
    /// Exact source element reference from the page snapshot
    #[serde(rename = "startRef")]
    start_ref: String,
    #[serde(rename = "endElement")]
    #[schemars(
        description = "Human-readable target element description used to obtain the permission to interact with the element"
    )]
    end_element: String,
    /// Exact target element reference from the page snapshot
    #[serde(rename = "endRef")]
    end_ref: String,
}

fn dragging(
    call: PageCall<'_>,
    arguments: DragArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(drag(call.page, arguments).await?)) })
}

const FOCUS_FOR_TYPING: &str = "function(replace) {
  const editable = this.isContentEditable || this.nodeName === 'TEXTAREA' ||
    (this.nodeName === 'INPUT' && !['checkbox', 'radio', 'button', 'submit', 'reset', 'file', 'image', 'range', 'color'].includes(this.type));
  if (!editable) return 'The element is not an editable field (an input, a textarea or a contenteditable element).';
  if (this.disabled || this.readOnly) return 'The field is disabled or read-only.';
  this.focus();
  if (replace) {
    if (typeof this.select === 'function') this.select();
    else { const range = document.createRange(); range.selectNodeContents(this); const selection = getSelection(); selection.removeAllRanges(); selection.addRange(range); }
  }
  return '';
}";

async fn type_text(running: &mut Running, args: TypeArguments) -> Result<String, ToolError> {
    let reference = args.reference.as_str();
    let typed = args.text.as_str();
    if typed.chars().count() > MAX_TYPED {
        return Err(ToolError::Reported(format!(
            "text is longer than {MAX_TYPED} characters"
        )));
    }
    let submit = args.submit.unwrap_or(false);
    let slowly = args.slowly.unwrap_or(false);
    let element = running.element(reference).await?;
    let refused = running
        .call_on(&element, FOCUS_FOR_TYPING, json!([!slowly]))
        .await?;
    if let Some(reason) = refused.as_str().filter(|reason| !reason.is_empty()) {
        return Err(ToolError::Reported(format!(
            "Cannot type into ref {reference}: {reason}"
        )));
    }
    let before = running.marks()?;
    running
        .racing(async {
            if slowly {
                for character in typed.chars() {
                    running.keys(keys::type_char(character)).await?;
                }
            } else if typed.is_empty() {
                running
                    .keys(keys::press("Delete").map_err(ToolError::Reported)?)
                    .await?;
            } else {
                running.insert_text(typed).await?;
            }
            if submit {
                running
                    .keys(keys::press("Enter").map_err(ToolError::Reported)?)
                    .await?;
            }
            Ok(())
        })
        .await?;
    running.settle(before).await?;
    Ok(format!(
        "Typed {} into {}{}",
        serde_json::to_string(typed).unwrap_or_default(),
        described(&args.element, reference),
        if submit { " and pressed Enter" } else { "" }
    ))
}

const SELECT_OPTIONS: &str = "function(values) {
  if (this.nodeName !== 'SELECT') return {error: 'The element is not a select (a dropdown).'};
  if (this.disabled) return {error: 'The select is disabled.'};
  const options = [...this.options];
  const chosen = [];
  for (const value of values) {
    const option = options.find(o => o.value === value) || options.find(o => o.label === value || o.text.trim() === value);
    if (!option) return {error: 'No option ' + JSON.stringify(value) + '; the options are ' + options.map(o => JSON.stringify(o.value)).join(', ') + '.'};
    chosen.push(option);
  }
  if (chosen.length > 1 && !this.multiple) return {error: 'The select takes one value, not ' + chosen.length + '.'};
  for (const option of options) option.selected = chosen.includes(option);
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  return {selected: chosen.map(o => o.value)};
}";

async fn select_option(running: &mut Running, args: SelectArguments) -> Result<String, ToolError> {
    let reference = args.reference.as_str();
    let values: Vec<&str> = args.values.iter().map(String::as_str).collect();
    let element = running.element(reference).await?;
    let before = running.marks()?;
    let outcome = running
        .racing(running.call_on(&element, SELECT_OPTIONS, json!([values])))
        .await?
        .unwrap_or(Value::Null);
    if let Some(error) = outcome.get("error").and_then(Value::as_str) {
        return Err(ToolError::Reported(format!(
            "Cannot select in ref {reference}: {error}"
        )));
    }
    running.settle(before).await?;
    Ok(format!(
        "Selected {} in {}",
        outcome.get("selected").unwrap_or(&json!(values)),
        described(&args.element, reference)
    ))
}

async fn drag(running: &mut Running, args: DragArguments) -> Result<String, ToolError> {
    let start_ref = args.start_ref.as_str();
    let end_ref = args.end_ref.as_str();
    let start_element = running.element(start_ref).await?;
    let end_element = running.element(end_ref).await?;
    let start = running.center(start_element.node(), start_ref).await?;
    let end = running.center(end_element.node(), end_ref).await?;
    let before = running.marks()?;
    running.drag_between(start, end).await?;
    running.settle(before).await?;
    Ok(format!(
        "Dragged {} to {}",
        described(&args.start_element, start_ref),
        described(&args.end_element, end_ref)
    ))
}
