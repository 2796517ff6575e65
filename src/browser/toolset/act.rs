//! The pure actions: the pointer (clicks by coordinate or ref, hover, drag, the left button held and
//! moved, the wheel), the keyboard (type, key, hold_key), forms (form_input, file_upload), and wait.

use std::time::Duration;

use serde_json::{Value, json};

use super::super::keys;
use super::super::session::MouseButton;
use super::input::{
    AtPoint, Click, Direction, Drag, FileUpload, FormInput, FormValue, HoldKey, Key, OnRef, Point,
    Scroll, Target,
};
use super::{Act, Outcome, TOOLSET_REFS};
use crate::tools::ToolError;

/// Seconds `wait` and `hold_key` take at most (the SDK's documented maximum).
pub const MAX_WAIT_SECONDS: f64 = 30.0;
/// Characters `type` takes at most.
const MAX_TYPED: usize = 100_000;
/// Times `key` repeats its sequence at most.
const MAX_REPEAT: i64 = 100;
/// Scroll-wheel notches `scroll` takes (the SDK's 1–10), and the pixels of one.
const NOTCHES: std::ops::RangeInclusive<i64> = 1..=10;
const NOTCH_PIXELS: f64 = 100.0;
/// Files `file_upload` sets at once.
const MAX_UPLOAD_FILES: usize = 100;

/// A promise resolved once the page drew twice (a scroll's effect is shown), or after 200 ms.
const FRAMES_DRAWN: &str = "new Promise(resolve => { requestAnimationFrame(() => \
    requestAnimationFrame(resolve)); setTimeout(resolve, 200); })";

impl Act<'_> {
    /// A viewport point of the input, refused outside the viewport.
    async fn viewport_point(&self, x: i64, y: i64) -> Result<(f64, f64), ToolError> {
        let layout = self.running.layout().await?;
        // Coordinates are pixel numbers far inside f64's exact range.
        let (fx, fy) = (x as f64, y as f64);
        if fx < 0.0 || fy < 0.0 || fx >= layout.width || fy >= layout.height {
            return Err(ToolError::Reported(format!(
                "({x}, {y}) is outside the viewport, which is {}x{} pixels (x from 0 to {}, y from 0 \
                 to {}).",
                layout.width,
                layout.height,
                layout.width - 1.0,
                layout.height - 1.0
            )));
        }
        Ok((fx, fy))
    }

    /// Where a target is: its point, or the centre of its ref's element (scrolled into view).
    async fn target_point(&mut self, target: &Target) -> Result<(f64, f64), ToolError> {
        match target {
            Target::Coordinate { x, y } => self.viewport_point(*x, *y).await,
            Target::Ref { reference } => self.ref_point(reference).await,
        }
    }

    async fn ref_point(&mut self, reference: &str) -> Result<(f64, f64), ToolError> {
        let element = self
            .running
            .element_in_style(reference, &TOOLSET_REFS)
            .await?;
        self.running.center(element.node(), reference).await
    }

    async fn point(&self, point: &Point) -> Result<(f64, f64), ToolError> {
        self.viewport_point(point.x, point.y).await
    }

    /// The buttons held when the pointer moves.
    fn held(&self) -> &'static [MouseButton] {
        if self.reports.mouse_held {
            &[MouseButton::Left]
        } else {
            &[]
        }
    }

    /// `count` clicks of `button` (2: a double click), with `modifiers` held.
    pub async fn click(
        &mut self,
        input: Click,
        button: MouseButton,
        count: i64,
    ) -> Result<Outcome, ToolError> {
        let modifiers = modifier_mask(input.modifiers.as_deref())?;
        let point = self.target_point(&input.target).await?;
        let running = &*self.running;
        let pressed = [button];
        let before = running.marks()?;
        running
            // Sent together, in order: a move alone is answered only at the next frame, while the
            // presses behind it make the renderer dispatch it at once.
            .racing(async {
                let mut events =
                    vec![running.mouse_event("mouseMoved", point, None, &[], 0, modifiers)];
                for click in 1..=count {
                    events.push(running.mouse_event(
                        "mousePressed",
                        point,
                        Some(button),
                        &pressed,
                        click,
                        modifiers,
                    ));
                    events.push(running.mouse_event(
                        "mouseReleased",
                        point,
                        Some(button),
                        &[],
                        click,
                        modifiers,
                    ));
                }
                futures_util::future::try_join_all(events).await.map(drop)
            })
            .await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn hover(&mut self, input: super::input::Hover) -> Result<Outcome, ToolError> {
        let point = self.target_point(&input.target).await?;
        self.move_to(point).await
    }

    pub async fn mouse_move(&mut self, input: AtPoint) -> Result<Outcome, ToolError> {
        let point = self.point(&input.target).await?;
        self.move_to(point).await
    }

    /// Moves the mouse to `point`, with whatever button is held, and lets the page settle.
    async fn move_to(&mut self, point: (f64, f64)) -> Result<Outcome, ToolError> {
        let held = self.held();
        let running = &*self.running;
        let before = running.marks()?;
        running
            .racing(running.mouse_event("mouseMoved", point, None, held, 0, 0))
            .await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    /// Presses (`down`) or releases the left button at a point.
    pub async fn mouse_button(&mut self, input: AtPoint, down: bool) -> Result<Outcome, ToolError> {
        let point = self.point(&input.target).await?;
        let held = self.held();
        let running = &*self.running;
        let before = running.marks()?;
        running
            .racing(async {
                futures_util::future::try_join(
                    running.mouse_event("mouseMoved", point, None, held, 0, 0),
                    if down {
                        running.mouse_event(
                            "mousePressed",
                            point,
                            Some(MouseButton::Left),
                            &[MouseButton::Left],
                            1,
                            0,
                        )
                    } else {
                        running.mouse_event(
                            "mouseReleased",
                            point,
                            Some(MouseButton::Left),
                            &[],
                            1,
                            0,
                        )
                    },
                )
                .await
                .map(drop)
            })
            .await?;
        self.reports.mouse_held = down;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    /// Press at `from`, move to `target`, release: an HTML drag the page starts is dropped at the
    /// target as the browser would (intercepted: synthetic moves do not run one), else the moves
    /// are the page's to follow.
    pub async fn drag(&mut self, input: Drag) -> Result<Outcome, ToolError> {
        let start = self.point(&input.start).await?;
        let end = self.point(&input.target).await?;
        let running = &*self.running;
        let before = running.marks()?;
        running.drag_between(start, end).await?;
        self.reports.mouse_held = false;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn scroll(&mut self, input: Scroll) -> Result<Outcome, ToolError> {
        let notches = input.scroll_amount.unwrap_or(3);
        if !NOTCHES.contains(&notches) {
            return Err(ToolError::Reported(format!(
                "scroll_amount must be from {} to {} notches, not {notches}.",
                NOTCHES.start(),
                NOTCHES.end()
            )));
        }
        let point = self.point(&input.target).await?;
        // Within 1..=10, checked above.
        let pixels = notches as f64 * NOTCH_PIXELS;
        let delta = match input.scroll_direction {
            Direction::Up => (0.0, -pixels),
            Direction::Down => (0.0, pixels),
            Direction::Left => (-pixels, 0.0),
            Direction::Right => (pixels, 0.0),
        };
        let running = &*self.running;
        let before = running.marks()?;
        running.racing(running.wheel(point, delta)).await?;
        // The page scrolls in its next frames: the answer (a screenshot after it) shows where it went.
        running
            .evaluate_in_page(FRAMES_DRAWN, Duration::from_secs(2))
            .await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn scroll_to(&mut self, input: OnRef) -> Result<Outcome, ToolError> {
        // Finding its centre scrolls it into view.
        self.ref_point(&input.target.reference).await?;
        self.running
            .evaluate_in_page(FRAMES_DRAWN, Duration::from_secs(2))
            .await?;
        Ok(Outcome::Done(None))
    }

    pub async fn type_text(&mut self, text: &str) -> Result<Outcome, ToolError> {
        if text.chars().count() > MAX_TYPED {
            return Err(ToolError::Reported(format!(
                "text is longer than {MAX_TYPED} characters."
            )));
        }
        let running = &*self.running;
        let before = running.marks()?;
        running.racing(running.insert_text(text)).await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn key(&mut self, input: Key) -> Result<Outcome, ToolError> {
        let repeat = input.repeat.unwrap_or(1);
        if !(1..=MAX_REPEAT).contains(&repeat) {
            return Err(ToolError::Reported(format!(
                "repeat must be from 1 to {MAX_REPEAT}, not {repeat}."
            )));
        }
        let presses = input
            .text
            .split_whitespace()
            .map(|chord| keys::press(&chord_name(chord)?).map_err(ToolError::Reported))
            .collect::<Result<Vec<Vec<Value>>, ToolError>>()?;
        if presses.is_empty() {
            return Err(ToolError::Reported(
                "text names no key: give a key (Return), a chord (ctrl+a) or keys separated by \
                 spaces."
                    .into(),
            ));
        }
        let running = &*self.running;
        let before = running.marks()?;
        running
            .racing(async {
                for _ in 0..repeat {
                    for events in &presses {
                        running.keys(events.clone()).await?;
                    }
                }
                Ok(())
            })
            .await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn hold_key(&mut self, input: HoldKey) -> Result<Outcome, ToolError> {
        let held = held_for(input.duration)?;
        let chord = input.text.trim();
        if chord.is_empty() || chord.contains(char::is_whitespace) {
            return Err(ToolError::Reported(
                "text must be one key or chord (shift, ctrl+a) to hold.".into(),
            ));
        }
        let events = keys::press(&chord_name(chord)?).map_err(ToolError::Reported)?;
        let (ups, downs): (Vec<Value>, Vec<Value>) = events
            .into_iter()
            .partition(|event| event["type"] == json!("keyUp"));
        let running = &*self.running;
        let before = running.marks()?;
        running
            .racing(async {
                running.keys(downs).await?;
                tokio::time::sleep(held).await;
                running.keys(ups).await
            })
            .await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn form_input(&mut self, input: FormInput) -> Result<Outcome, ToolError> {
        let reference = input.target.reference.as_str();
        let element = self
            .running
            .element_in_style(reference, &TOOLSET_REFS)
            .await?;
        let value = match &input.value {
            FormValue::Flag(flag) => json!(flag),
            FormValue::Number(number) => json!(number),
            FormValue::Text(text) => json!(text),
        };
        let running = &*self.running;
        let before = running.marks()?;
        let refused = running
            .racing(running.call_on(&element, SET_FORM_VALUE, json!([value])))
            .await?
            .unwrap_or(Value::Null);
        if let Some(reason) = refused.as_str().filter(|reason| !reason.is_empty()) {
            return Err(ToolError::Reported(format!(
                "Cannot set the value of {reference}: {reason}"
            )));
        }
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }

    pub async fn file_upload(&mut self, input: FileUpload) -> Result<Outcome, ToolError> {
        if input
            .document_ids
            .as_ref()
            .is_some_and(|ids| !ids.is_empty())
        {
            return Err(ToolError::Reported(
                "document_ids are not supported here: give paths of files in the workspace (or \
                 in a directory boxd was given with --allow-dir)."
                    .into(),
            ));
        }
        let paths = input.paths.unwrap_or_default();
        if paths.is_empty() {
            return Err(ToolError::Reported(
                "file_upload needs at least one path.".into(),
            ));
        }
        if paths.len() > MAX_UPLOAD_FILES {
            return Err(ToolError::Reported(format!(
                "at most {MAX_UPLOAD_FILES} files at once."
            )));
        }
        let reference = input.target.reference.as_str();
        let element = self
            .running
            .element_in_style(reference, &TOOLSET_REFS)
            .await?;
        let refused = self
            .running
            .call_on(&element, FILE_INPUT, json!([paths.len()]))
            .await?;
        if let Some(reason) = refused.as_str().filter(|reason| !reason.is_empty()) {
            return Err(ToolError::Reported(format!(
                "Cannot upload into {reference}: {reason}"
            )));
        }
        let files = self.browser.upload_paths(&*self.running, paths).await?;
        let running = &*self.running;
        let before = running.marks()?;
        running.set_input_files(&element, &files).await?;
        running.settle(before).await?;
        Ok(Outcome::Done(None))
    }
}

pub async fn wait(duration: f64) -> Result<Outcome, ToolError> {
    tokio::time::sleep(held_for(duration)?).await;
    Ok(Outcome::Done(None))
}

/// A duration of `wait` or `hold_key`, refused outside 0 to [`MAX_WAIT_SECONDS`].
fn held_for(seconds: f64) -> Result<Duration, ToolError> {
    if !(0.0..=MAX_WAIT_SECONDS).contains(&seconds) {
        return Err(ToolError::Reported(format!(
            "duration must be from 0 to {MAX_WAIT_SECONDS} seconds, not {seconds}."
        )));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|err| ToolError::Reported(format!("duration: {err}")))
}

/// The protocol's modifier mask of a chord (`shift`, `ctrl+shift`, `cmd+alt`).
fn modifier_mask(modifiers: Option<&str>) -> Result<i64, ToolError> {
    let Some(modifiers) = modifiers.map(str::trim).filter(|given| !given.is_empty()) else {
        return Ok(0);
    };
    let mut mask = 0;
    for name in modifiers.split('+') {
        mask |= match name.trim().to_ascii_lowercase().as_str() {
            "alt" | "option" | "opt" => 1,
            "ctrl" | "control" => 2,
            "cmd" | "command" | "meta" | "super" | "win" | "windows" => 4,
            "shift" => 8,
            other => {
                return Err(ToolError::Reported(format!(
                    "Unknown modifier {other:?} in {modifiers:?}: use shift, ctrl, alt or cmd, \
                     joined with + (ctrl+shift)."
                )));
            }
        };
    }
    Ok(mask)
}

/// A chord as the SDK's key names write it (`ctrl+a`, `Return`, `BackSpace`, `cmd+shift+p`) in the
/// names the browser's keyboard takes (`Control+a`, `Enter`, `Backspace`, `Meta+Shift+p`).
fn chord_name(chord: &str) -> Result<String, ToolError> {
    if chord == "+" {
        return Ok("+".into());
    }
    let parts: Vec<&str> = chord.split('+').collect();
    let Some((key, modifiers)) = parts.split_last() else {
        return Err(ToolError::Reported("an empty key".into()));
    };
    let mut names = Vec::with_capacity(parts.len());
    for modifier in modifiers {
        names.push(match modifier.to_ascii_lowercase().as_str() {
            "ctrl" | "control" => "Control",
            "alt" | "option" | "opt" => "Alt",
            "shift" => "Shift",
            "cmd" | "command" | "meta" | "super" | "win" | "windows" => "Meta",
            other => {
                return Err(ToolError::Reported(format!(
                    "Unknown modifier {other:?} in {chord:?}: use ctrl, alt, shift or cmd."
                )));
            }
        });
    }
    let key = match key.to_ascii_lowercase().as_str() {
        "return" | "enter" | "kp_enter" => "Enter",
        "backspace" => "Backspace",
        "esc" | "escape" => "Escape",
        "space" => "Space",
        "del" | "delete" => "Delete",
        "up" | "arrowup" => "ArrowUp",
        "down" | "arrowdown" => "ArrowDown",
        "left" | "arrowleft" => "ArrowLeft",
        "right" | "arrowright" => "ArrowRight",
        "page_up" | "pageup" | "prior" => "PageUp",
        "page_down" | "pagedown" | "next" => "PageDown",
        "ctrl" | "control" => "Control",
        "alt" | "option" => "Alt",
        "cmd" | "command" | "meta" | "super" | "win" => "Meta",
        _ => key,
    };
    let mut name = names.join("+");
    if !name.is_empty() {
        name.push('+');
    }
    name.push_str(key);
    Ok(name)
}

/// Sets a form field's value as a user would leave it, with the page's `input` and `change` events:
/// a checkbox or radio takes a boolean, a select an option's value or text, a text field anything
/// (a boolean or number written out).
const SET_FORM_VALUE: &str = "function(value) {
  const tag = this.nodeName;
  const fire = () => { this.dispatchEvent(new Event('input', {bubbles: true})); this.dispatchEvent(new Event('change', {bubbles: true})); };
  if (this.disabled) return 'the field is disabled.';
  if (tag === 'INPUT' && (this.type === 'checkbox' || this.type === 'radio')) {
    if (typeof value !== 'boolean') return 'a ' + this.type + ' takes true or false.';
    if (this.checked !== value) this.checked = value;
    fire(); return '';
  }
  if (tag === 'SELECT') {
    const wanted = String(value);
    const options = [...this.options];
    const option = options.find(o => o.value === wanted) || options.find(o => o.text.trim() === wanted || o.label === wanted);
    if (!option) return 'no option ' + JSON.stringify(wanted) + '; the options are ' + options.map(o => JSON.stringify(o.value)).join(', ') + '.';
    for (const other of options) other.selected = other === option;
    fire(); return '';
  }
  if (tag === 'INPUT' || tag === 'TEXTAREA') {
    if (tag === 'INPUT' && this.type === 'file') return 'a file input takes files: use file_upload.';
    if (this.readOnly) return 'the field is read-only.';
    const proto = tag === 'INPUT' ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
    const setter = Object.getOwnPropertyDescriptor(proto, 'value').set;
    this.focus();
    setter.call(this, String(value));
    fire(); return '';
  }
  if (this.isContentEditable) { this.focus(); this.textContent = String(value); fire(); return ''; }
  return 'it is not a form field (an input, a textarea, a select, a checkbox or a radio button).';
}";

/// Refuses an element that is not a file input taking `count` files.
const FILE_INPUT: &str = "function(count) {
  if (this.nodeName !== 'INPUT' || this.type !== 'file') return 'it is not a file input (<input type=file>).';
  if (this.disabled) return 'the file input is disabled.';
  if (count > 1 && !this.multiple) return 'the file input takes one file, not ' + count + '.';
  return '';
}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_key_names_become_the_keyboard_s() {
        assert_eq!(chord_name("ctrl+a").unwrap(), "Control+a");
        assert_eq!(chord_name("Return").unwrap(), "Enter");
        assert_eq!(chord_name("BackSpace").unwrap(), "Backspace");
        assert_eq!(chord_name("cmd+shift+p").unwrap(), "Meta+Shift+p");
        assert_eq!(chord_name("Page_Down").unwrap(), "PageDown");
        assert!(keys::press(&chord_name("shift").unwrap()).is_ok());
        assert!(chord_name("hyper+a").is_err());
        assert_eq!(modifier_mask(Some("ctrl+shift")).unwrap(), 10);
        assert_eq!(modifier_mask(None).unwrap(), 0);
        assert!(modifier_mask(Some("fn")).is_err());
        assert!(held_for(31.0).is_err());
        assert!(held_for(-1.0).is_err());
    }
}
