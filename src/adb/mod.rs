//! The `adb` family: an Android device (group `adb-control`), native. The tool `adb` answers upstream's
//! six actions with their exact texts and device commands, and answers only once the command finished on
//! the device with its exit status checked. Bad arguments are `isError` results that say what is wrong,
//! and nothing reaches the device; a device that cannot be reached is the family's health (503 with the
//! reason).

mod actions;
mod device;
mod family;
mod wire;

pub use actions::{MAX_SWIPE_MS, MAX_TEXT_CHARS};
pub use device::MAX_QUEUED_COMMANDS;
pub use family::family;

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::tools::{CallToolResult, ContentItem, Tool};
use actions::Action;
use device::{Device, DeviceError};
use wire::Output;

pub const GROUP: &str = "adb-control";

/// An `input` command, `wm size`, a property read.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// `screencap -p` of a large screen takes a second or two on a slow emulator.
pub const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// Each typed character is a key event on the device.
const PER_CHARACTER: Duration = Duration::from_millis(20);
/// The IME that types any Unicode text from a broadcast (github.com/senzhk/ADBKeyBoard).
const ADB_KEYBOARD: &str = "com.android.adbkeyboard/.AdbIME";
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

pub struct Adb {
    device: Device,
}

/// Why an action did not happen: something the model can act on (an `isError` result), or the device's
/// state (an HTTP error with a retry hint).
enum Failure {
    Action(String),
    Device(DeviceError),
}

impl From<DeviceError> for Failure {
    fn from(err: DeviceError) -> Self {
        match err {
            DeviceError::Refused(reason) => Failure::Action(reason),
            other => Failure::Device(other),
        }
    }
}

impl From<DeviceError> for ApiError {
    fn from(err: DeviceError) -> Self {
        match err {
            DeviceError::Busy => ApiError::TooManyRequests(err.to_string()),
            other => ApiError::Unavailable {
                message: format!("adb tools unavailable: {other}"),
                retry_after_seconds: 2,
            },
        }
    }
}

fn text(text: impl Into<String>) -> ContentItem {
    ContentItem::Text {
        text: text.into(),
        description: None,
    }
}

impl Adb {
    async fn call(&self, arguments: Value) -> Result<CallToolResult, ApiError> {
        let outcome = match actions::parse(&arguments) {
            Ok(action) => self.execute(action).await,
            Err(reason) => Err(Failure::Action(reason)),
        };
        match outcome {
            Ok(items) => Ok(CallToolResult::new(items, false)),
            Err(Failure::Action(reason)) => Ok(CallToolResult::new(vec![text(reason)], true)),
            Err(Failure::Device(err)) => Err(err.into()),
        }
    }

    /// Runs `command` and insists it succeeded; the failure names the command and what it printed.
    async fn run(&self, command: String, timeout: Duration) -> Result<Output, Failure> {
        let output = self.device.shell(command.clone(), timeout).await?;
        match output.exit {
            Some(0) => Ok(output),
            exit => {
                let said = String::from_utf8_lossy(if output.stderr.is_empty() {
                    &output.stdout
                } else {
                    &output.stderr
                })
                .trim()
                .chars()
                .take(2000)
                .collect::<String>();
                let status =
                    exit.map_or("no exit status".to_owned(), |code| format!("exit {code}"));
                Err(Failure::Action(format!(
                    "`{command}` failed on the device ({status}){}{said}",
                    if said.is_empty() { "" } else { ": " }
                )))
            }
        }
    }

    async fn execute(&self, action: Action) -> Result<Vec<ContentItem>, Failure> {
        let done = match action {
            Action::Tap { x, y } => {
                self.run(format!("input tap {x} {y}"), COMMAND_TIMEOUT)
                    .await?;
                format!("Tapped at ({x}, {y})")
            }
            Action::Swipe {
                from,
                to,
                duration_ms,
            } => {
                let timeout = COMMAND_TIMEOUT.saturating_add(Duration::from_millis(duration_ms));
                self.run(
                    format!(
                        "input swipe {} {} {} {} {duration_ms}",
                        from.0, from.1, to.0, to.1
                    ),
                    timeout,
                )
                .await?;
                format!(
                    "Swiped from ({}, {}) to ({}, {})",
                    from.0, from.1, to.0, to.1
                )
            }
            Action::Key { code, shown } => {
                self.run(format!("input keyevent {code}"), COMMAND_TIMEOUT)
                    .await?;
                format!("Sent key event: {shown}")
            }
            Action::Text(typed) => {
                self.type_text(&typed).await?;
                format!("Input text: {typed}")
            }
            Action::Resolution => {
                let output = self.run("wm size".into(), COMMAND_TIMEOUT).await?;
                let said = String::from_utf8_lossy(&output.stdout);
                let (width, height) = actions::parse_wm_size(&said).ok_or_else(|| {
                    Failure::Action(format!("`wm size` printed no screen size: {}", said.trim()))
                })?;
                json!({"width": width, "height": height}).to_string()
            }
            Action::Screenshot => {
                let output = self.run("screencap -p".into(), SCREENSHOT_TIMEOUT).await?;
                if !output.stdout.starts_with(PNG_SIGNATURE) {
                    return Err(Failure::Action(format!(
                        "`screencap -p` printed no PNG ({} bytes{})",
                        output.stdout.len(),
                        if output.stderr.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; stderr: {}",
                                String::from_utf8_lossy(&output.stderr).trim()
                            )
                        }
                    )));
                }
                let data = tokio::task::spawn_blocking(move || {
                    base64::engine::general_purpose::STANDARD.encode(&output.stdout)
                })
                .await
                .map_err(|err| Failure::Action(format!("encoding the screenshot failed: {err}")))?;
                return Ok(vec![ContentItem::Image {
                    data,
                    mime_type: "image/png".into(),
                }]);
            }
        };
        Ok(vec![text(done)])
    }

    /// ASCII goes through `input text` (upstream's command). Other text needs an IME that takes text
    /// whole: with ADBKeyboard selected it is sent base64-encoded in a broadcast (no shell quoting at
    /// all); without it nothing is typed and the error says what to install.
    async fn type_text(&self, typed: &str) -> Result<(), Failure> {
        let timeout = COMMAND_TIMEOUT.saturating_add(
            PER_CHARACTER.saturating_mul(u32::try_from(typed.len()).unwrap_or(u32::MAX)),
        );
        let Some((position, character)) = actions::first_non_ascii(typed) else {
            self.run(actions::text_command(typed), timeout).await?;
            return Ok(());
        };
        let current = self
            .run(
                "settings get secure default_input_method".into(),
                COMMAND_TIMEOUT,
            )
            .await
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .unwrap_or_default();
        if current != ADB_KEYBOARD {
            return Err(Failure::Action(format!(
                "Cannot type {character:?} (character {position} of the text): Android's `input text` types ASCII only. Non-ASCII text needs the ADBKeyboard IME ({ADB_KEYBOARD}, github.com/senzhk/ADBKeyBoard) installed and selected on the device: `ime enable {ADB_KEYBOARD} && ime set {ADB_KEYBOARD}`. Nothing was typed."
            )));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(typed.as_bytes());
        self.run(
            format!("am broadcast -a ADB_INPUT_B64 --es msg {encoded}"),
            timeout,
        )
        .await?;
        Ok(())
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": actions::ACTIONS,
                "description": "The action to perform."
            },
            "coordinate": {
                "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2,
                "description": "tap: [x, y] in device pixels, (0, 0) at the top left."
            },
            "start": {
                "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2,
                "description": "swipe: where it starts, [x, y] in device pixels."
            },
            "end": {
                "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2,
                "description": "swipe: where it ends, [x, y] in device pixels."
            },
            "duration": {
                "type": "integer", "minimum": 0, "maximum": actions::MAX_SWIPE_MS,
                "description": "swipe: how long it takes, in milliseconds (default 300)."
            },
            "text": {
                "type": "string", "maxLength": actions::MAX_TEXT_CHARS,
                "description": "input_text: the text to type into the focused field, literally (a newline presses Enter)."
            },
            "code": {
                "type": ["integer", "string"],
                "description": "key_event: an Android key code (3) or name (HOME, BACK, ENTER, DEL, APP_SWITCH, KEYCODE_VOLUME_UP, ...)."
            }
        },
        "required": ["action"]
    })
}

pub fn tools(adb: &std::sync::Arc<Adb>) -> Vec<Tool> {
    let adb = std::sync::Arc::clone(adb);
    vec![Tool::new(
        GROUP,
        "adb",
        "Control an Android device: tap, swipe, type text, send key events, take screenshots and read the screen size.",
        schema(),
        move |arguments| {
            let adb = std::sync::Arc::clone(&adb);
            async move { adb.call(arguments).await }
        },
    )]
}
