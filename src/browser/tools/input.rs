//! Acting on elements and the keyboard as a user would: click, hover, type, select, press, drag.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::keys;
use super::super::session::Running;
use super::{
    Answer, BrowserTool, Declared, PageCall, Policy, described, element_schema, given, required,
    schema,
};
use crate::tools::ToolError;

/// Characters `browser_type` takes at most (one protocol event each when typing slowly).
const MAX_TYPED: usize = 100_000;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_click",
            "Perform click on a web page",
            element_schema(json!({}), &[]),
            Policy::ACTION,
            click,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_hover",
            "Hover over element on page",
            element_schema(json!({}), &[]),
            Policy::ACTION,
            hover,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_type",
            "Type text into editable element",
            element_schema(
                json!({
                    "text": {"type": "string", "description": "Text to type into the element"},
                    "submit": {"type": "boolean", "description": "Whether to submit entered text (press Enter after)"},
                    "slowly": {"type": "boolean", "description": "Whether to type one character at a time. Useful for triggering key handlers in the page. By default entire text is filled in at once."}
                }),
                &["text"],
            ),
            Policy::ACTION,
            typing,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_select_option",
            "Select an option in a dropdown",
            element_schema(
                json!({"values": {"type": "array", "items": {"type": "string"}, "description": "Array of values to select in the dropdown. This can be a single value or multiple values."}}),
                &["values"],
            ),
            Policy::ACTION,
            selecting,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_press_key",
            "Press a key on the keyboard",
            schema(
                json!({"key": {"type": "string", "description": "Name of the key to press or a character to generate, such as `ArrowLeft` or `a`"}}),
                &["key"],
            ),
            Policy::ACTION,
            press_key,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_drag",
            "Perform drag and drop between two elements",
            schema(
                json!({
                    "startElement": {"type": "string", "description": "Human-readable source element description used to obtain the permission to interact with the element"},
                    "startRef": {"type": "string", "description": "Exact source element reference from the page snapshot"},
                    "endElement": {"type": "string", "description": "Human-readable target element description used to obtain the permission to interact with the element"},
                    "endRef": {"type": "string", "description": "Exact target element reference from the page snapshot"}
                }),
                &["startElement", "startRef", "endElement", "endRef"],
            ),
            Policy::ACTION,
            dragging,
        )
        .declared(),
    ]
}

/// An element of the page: its description and its ref from a snapshot.
#[derive(Deserialize)]
struct ElementArguments {
    #[serde(default, deserialize_with = "given::text")]
    element: Option<String>,
    #[serde(rename = "ref", default, deserialize_with = "given::text")]
    reference: Option<String>,
}

fn click(call: PageCall<'_>, args: ElementArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let reference = required(&args.reference, "ref")?;
        let element = running.element(reference).await?;
        let point = running.center(element.node(), reference).await?;
        let before = running.marks()?;
        running
            .racing(async {
                running.mouse_move(point, 0).await?;
                running.mouse_press(point).await?;
                running.mouse_release(point).await
            })
            .await?;
        running.settle(before).await?;
        Ok(Answer::page(format!(
            "Clicked {}",
            described(args.element.as_deref(), reference)
        )))
    })
}

fn hover(call: PageCall<'_>, args: ElementArguments) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let reference = required(&args.reference, "ref")?;
        let element = running.element(reference).await?;
        let point = running.center(element.node(), reference).await?;
        let before = running.marks()?;
        running.racing(running.mouse_move(point, 0)).await?;
        running.settle(before).await?;
        Ok(Answer::page(format!(
            "Hovered over {}",
            described(args.element.as_deref(), reference)
        )))
    })
}

#[derive(Deserialize)]
struct PressKeyArguments {
    #[serde(default, deserialize_with = "given::text")]
    key: Option<String>,
}

fn press_key(
    call: PageCall<'_>,
    args: PressKeyArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let running = call.page;
        let key = required(&args.key, "key")?;
        let events = keys::press(key).map_err(ToolError::Reported)?;
        let before = running.marks()?;
        running.racing(running.keys(events)).await?;
        running.settle(before).await?;
        Ok(Answer::page(format!("Pressed {key}")))
    })
}

#[derive(Deserialize)]
struct TypeArguments {
    #[serde(default, deserialize_with = "given::text")]
    element: Option<String>,
    #[serde(rename = "ref", default, deserialize_with = "given::text")]
    reference: Option<String>,
    /// May be empty: typing nothing clears the field.
    #[serde(default, deserialize_with = "given::string")]
    text: Option<String>,
    #[serde(default, deserialize_with = "given::flag")]
    submit: Option<bool>,
    #[serde(default, deserialize_with = "given::flag")]
    slowly: Option<bool>,
}

fn typing(
    call: PageCall<'_>,
    arguments: TypeArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(type_text(call.page, arguments).await?)) })
}

#[derive(Deserialize)]
struct SelectArguments {
    #[serde(default, deserialize_with = "given::text")]
    element: Option<String>,
    #[serde(rename = "ref", default, deserialize_with = "given::text")]
    reference: Option<String>,
    #[serde(default, deserialize_with = "given::strings")]
    values: Option<Vec<String>>,
}

fn selecting(
    call: PageCall<'_>,
    arguments: SelectArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move { Ok(Answer::page(select_option(call.page, arguments).await?)) })
}

#[derive(Deserialize)]
struct DragArguments {
    #[serde(rename = "startElement", default, deserialize_with = "given::text")]
    start_element: Option<String>,
    #[serde(rename = "startRef", default, deserialize_with = "given::text")]
    start_ref: Option<String>,
    #[serde(rename = "endElement", default, deserialize_with = "given::text")]
    end_element: Option<String>,
    #[serde(rename = "endRef", default, deserialize_with = "given::text")]
    end_ref: Option<String>,
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
    let reference = required(&args.reference, "ref")?;
    let typed = args
        .text
        .as_deref()
        .ok_or_else(|| ToolError::Reported("text is required: the text to type".into()))?;
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
        described(args.element.as_deref(), reference),
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
    let reference = required(&args.reference, "ref")?;
    let values: Vec<&str> = args
        .values
        .as_ref()
        .map(|list| list.iter().map(String::as_str).collect())
        .ok_or_else(|| ToolError::Reported("values must be a list of option values".into()))?;
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
        described(args.element.as_deref(), reference)
    ))
}

async fn drag(running: &mut Running, args: DragArguments) -> Result<String, ToolError> {
    let start_ref = required(&args.start_ref, "startRef")?;
    let end_ref = required(&args.end_ref, "endRef")?;
    let start_element = running.element(start_ref).await?;
    let end_element = running.element(end_ref).await?;
    let start = running.center(start_element.node(), start_ref).await?;
    let end = running.center(end_element.node(), end_ref).await?;
    let before = running.marks()?;
    running.events(|events| events.drag = None)?;
    running.intercept_drags(true).await?;
    let dragged = running
        .racing(async {
            running.mouse_move(start, 0).await?;
            running.mouse_press(start).await?;
            // A few pixels of motion start a drag (HTML drag and drop) if the element is draggable.
            for step in 1..=3 {
                let offset = f64::from(step) * 5.0;
                running
                    .mouse_move((start.0 + offset, start.1 + offset), 1)
                    .await?;
            }
            // The page starts its drag on that motion; the interception is reported soon after.
            running
                .wait_until(Instant::now() + Duration::from_millis(300), |events| {
                    events.drag.is_some()
                })
                .await?;
            let data = running.events(|events| events.drag.take())?;
            if let Some(data) = data {
                running.drop_dragged(end, &data).await?;
            } else {
                for step in 1..=10 {
                    let fraction = f64::from(step) / 10.0;
                    let point = (
                        start.0 + (end.0 - start.0) * fraction,
                        start.1 + (end.1 - start.1) * fraction,
                    );
                    running.mouse_move(point, 1).await?;
                }
            }
            running.mouse_release(end).await
        })
        .await;
    let _ = running.intercept_drags(false).await;
    dragged?;
    running.settle(before).await?;
    Ok(format!(
        "Dragged {} to {}",
        described(args.start_element.as_deref(), start_ref),
        described(args.end_element.as_deref(), end_ref)
    ))
}
