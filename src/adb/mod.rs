//! The `adb` family: an Android device (group `adb-control`), native. The tool `adb` answers upstream's
//! six actions with their exact texts and device commands, and answers only once the command finished on
//! the device with its exit status checked. Bad arguments are `isError` results that say what is wrong,
//! and nothing reaches the device; a device that cannot be reached is the family's health (503 with the
//! reason). No input reaches the device while it asks whether to trust an ADB host (guard.rs).

mod actions;
mod device;
mod family;
mod guard;
mod key;
mod keycodes;
mod screen;
mod typing;
mod ui;
mod view;
mod wire;

pub use family::{AdbArgs, family, limits};

use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::json;

use crate::core::error::ApiError;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError, ToolResult, ToolSpec};
use actions::{Action, AdbArguments, Direction};
use device::{Device, DeviceError};
use screen::Geometry;
use wire::Output;

pub const GROUP: &str = "adb-control";

/// An `input` command, `wm size`, a property read.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// `screencap -p` of a large screen takes a second or two on a slow emulator.
const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// Each typed character is a key event on the device.
const PER_CHARACTER: Duration = Duration::from_millis(20);
/// The IME that types any Unicode text from a broadcast (github.com/senzhk/ADBKeyBoard).
const ADB_KEYBOARD: &str = "com.android.adbkeyboard/.AdbIME";
/// Its package: the text's broadcast is addressed to it alone (`-p`), as an implicit broadcast could be
/// received by any app that registers for the action. (A component, `-n`, would miss it: the IME
/// registers its receiver at run time, not in its manifest.)
const ADB_KEYBOARD_PACKAGE: &str = "com.android.adbkeyboard";
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
/// `uiautomator dump` fails now and then ("null root node") while the screen changes, and takes seconds
/// on a busy device (6-15 s reported): a few tries, each bounded, all within one budget.
const UI_DUMP_ATTEMPTS: u32 = 4;
const UI_DUMP_TIMEOUT: Duration = Duration::from_secs(20);
const UI_DUMP_BUDGET: Duration = Duration::from_secs(45);
const UI_DUMP_PAUSE: Duration = Duration::from_millis(300);
const UI_DUMP_MIN_TRY: Duration = Duration::from_secs(2);
/// Packages `list_apps` names; a device with more gets a notice.
const MAX_APPS_LISTED: usize = 500;
/// What each focus check before an injection may add to a command's time (`dumpsys window` of a section
/// and a `grep`: a fraction of a second on a phone, more on a busy emulator).
const FOCUS_CHECK_TIME: Duration = Duration::from_secs(2);

pub struct Adb {
    device: Device,
    /// Set by a screenshot scaled down: the caller's coordinates are then in its pixels.
    geometry: Mutex<Option<Geometry>>,
    /// The live views of the screen open now.
    views: view::Views,
}

/// A command the device refused is the action's failure, which the model reads (an `isError` result);
/// the rest is the device's state (an HTTP error with a retry hint).
impl From<DeviceError> for ToolError {
    fn from(err: DeviceError) -> Self {
        match err {
            DeviceError::Refused(reason) => ToolError::Reported(reason),
            other => ToolError::Http(other.into()),
        }
    }
}

impl From<DeviceError> for ApiError {
    fn from(err: DeviceError) -> Self {
        match err {
            DeviceError::Busy => ApiError::TooManyRequests(err.to_string()),
            DeviceError::TurnTimeout => ApiError::GatewayTimeout(format!("adb: {err}")),
            other => ApiError::Unavailable {
                message: format!("adb tools unavailable: {other}"),
                retry_after_seconds: 2,
            },
        }
    }
}

/// Why input was not injected: the guard refused it (the device asks whether to trust a host), the
/// command failed on the device (the text says how), or the device could not run it. The tool answers
/// each as it answers any device failure (`From<InjectError> for ToolError`), the live view with an
/// HTTP status (view.rs).
#[derive(Debug)]
enum InjectError {
    Guard(guard::Refusal),
    Failed(String),
    Device(DeviceError),
}

impl From<InjectError> for ToolError {
    fn from(err: InjectError) -> Self {
        match err {
            InjectError::Guard(refusal) => ToolError::Reported(refusal.to_string()),
            InjectError::Failed(reason) => ToolError::Reported(reason),
            InjectError::Device(err) => err.into(),
        }
    }
}

impl From<DeviceError> for InjectError {
    fn from(err: DeviceError) -> Self {
        InjectError::Device(err)
    }
}

impl Adb {
    async fn call(&self, arguments: AdbArguments) -> ToolResult {
        let action = actions::parse(&arguments).map_err(ToolError::Reported)?;
        let items = self.execute(action).await?;
        Ok(CallToolResult::new(items, false))
    }

    /// Runs `command` and insists it succeeded; the failure names the command and what it printed.
    async fn run(&self, command: String, timeout: Duration) -> Result<Output, ToolError> {
        let output = self.device.shell(command.clone(), timeout).await?;
        match output.exit {
            Some(0) => Ok(output),
            _ => Err(ToolError::Reported(failed(&command, &output))),
        }
    }

    /// Runs input `steps` (`input ...`, the IME's broadcast) in one device command, each only if the one
    /// before succeeded and each right after the guard found no authorization dialog in focus; insists
    /// it succeeded. A failure names the steps as they read, without the check.
    async fn inject(&self, steps: &[String], timeout: Duration) -> Result<Output, InjectError> {
        let checks = u32::try_from(steps.len()).unwrap_or(u32::MAX);
        let timeout = timeout.saturating_add(FOCUS_CHECK_TIME.saturating_mul(checks));
        let output = self.device.shell(guard::command(steps), timeout).await?;
        if let Some(refusal) = guard::refusal(&output) {
            tracing::warn!(refusal = %refusal, "adb: input refused: an authorization dialog has focus, or the focus could not be read");
            return Err(InjectError::Guard(refusal));
        }
        match output.exit {
            Some(0) => Ok(output),
            _ => Err(InjectError::Failed(failed(&steps.join(" && "), &output))),
        }
    }

    async fn execute(&self, action: Action) -> Result<Vec<ContentItem>, ToolError> {
        let done = match action {
            Action::Tap { x, y } => {
                let ([(dx, dy)], note) = self.placed([(x, y)]);
                self.inject(&[format!("input tap {dx} {dy}")], COMMAND_TIMEOUT)
                    .await?;
                format!("Tapped at ({x}, {y}){note}")
            }
            Action::Swipe {
                from,
                to,
                duration_ms,
            } => {
                let ([a, b], note) = self.placed([from, to]);
                self.swipe(a, b, duration_ms).await?;
                format!(
                    "Swiped from ({}, {}) to ({}, {}){note}",
                    from.0, from.1, to.0, to.1
                )
            }
            Action::LongPress { x, y, duration_ms } => {
                let ([point], note) = self.placed([(x, y)]);
                // A swipe that does not move is a touch held for its duration.
                self.swipe(point, point, duration_ms).await?;
                format!("Long-pressed at ({x}, {y}) for {duration_ms} ms{note}")
            }
            Action::DoubleTap { x, y } => {
                let ([(dx, dy)], note) = self.placed([(x, y)]);
                // Each `input` starts a Java VM (a few hundred ms on a device): one after the other, the
                // taps would land too far apart for a double tap (300 ms). Started 100 ms apart instead,
                // both checked; one focus check before both (between them it would part them too far).
                self.inject(
                    &[format!(
                        "input tap {dx} {dy} & sleep 0.1; input tap {dx} {dy} && wait $!"
                    )],
                    COMMAND_TIMEOUT,
                )
                .await?;
                format!("Double-tapped at ({x}, {y}){note}")
            }
            Action::SwipeDirection {
                direction,
                from,
                distance,
                duration_ms,
            } => {
                return self
                    .swipe_direction(direction, from, distance, duration_ms)
                    .await;
            }
            Action::Elements => return self.elements().await,
            Action::ListApps => {
                let output = self
                    .run("pm list packages -3".into(), COMMAND_TIMEOUT)
                    .await?;
                let mut packages: Vec<String> = String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .filter_map(|line| line.trim().strip_prefix("package:"))
                    .map(str::to_owned)
                    .collect();
                packages.sort();
                packages.dedup();
                if packages.is_empty() {
                    "No third-party apps are installed (system apps are not listed).".to_owned()
                } else {
                    let mut listing = format!(
                        "{} third-party apps installed (system apps are not listed):",
                        packages.len()
                    );
                    for package in packages.iter().take(MAX_APPS_LISTED) {
                        listing.push('\n');
                        listing.push_str(package);
                    }
                    if packages.len() > MAX_APPS_LISTED {
                        listing.push_str(&format!(
                            "\n… {} more not listed",
                            packages.len() - MAX_APPS_LISTED
                        ));
                    }
                    listing
                }
            }
            Action::LaunchApp(package) => {
                let command = format!("monkey -p {package} -c android.intent.category.LAUNCHER 1");
                let output = self.device.shell(command.clone(), COMMAND_TIMEOUT).await?;
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                if said.contains("No activities found") || said.contains("monkey aborted") {
                    return Err(ToolError::Reported(format!(
                        "{package} is not installed or has no launcher activity; `list_apps` lists the installed apps"
                    )));
                }
                if output.exit != Some(0) {
                    return Err(ToolError::Reported(failed(&command, &output)));
                }
                format!("Launched {package}")
            }
            Action::TerminateApp(package) => {
                self.run(format!("am force-stop {package}"), COMMAND_TIMEOUT)
                    .await?;
                format!("Stopped {package}")
            }
            Action::OpenUrl(url) => {
                let output = self
                    .run(
                        format!(
                            "am start -a android.intent.action.VIEW -d {}",
                            typing::quote(&url)
                        ),
                        COMMAND_TIMEOUT,
                    )
                    .await?;
                // `am start` reports an intent nothing handles on stdout or stderr, exiting 0.
                let said = format!(
                    "{}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                if let Some(error) = said
                    .lines()
                    .find(|line| line.trim_start().starts_with("Error"))
                {
                    return Err(ToolError::Reported(format!(
                        "No app on the device opened {url}: {}",
                        error.trim().chars().take(500).collect::<String>()
                    )));
                }
                format!("Opened {url}")
            }
            Action::Key { code, shown } => {
                self.inject(&[format!("input keyevent {code}")], COMMAND_TIMEOUT)
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
                let (width, height) = screen::parse_wm_size(&said).ok_or_else(|| {
                    ToolError::Reported(format!(
                        "`wm size` printed no screen size: {}",
                        said.trim()
                    ))
                })?;
                let mut items = vec![ContentItem::plain_text(
                    json!({"width": width, "height": height}).to_string(),
                )];
                if let Some(geometry) = self.geometry() {
                    items.push(ContentItem::plain_text(format!(
                        "These are device pixels. Coordinates you send are read in the last screenshot's pixels ({}x{}) and scaled to the device (x{}).",
                        geometry.image.0,
                        geometry.image.1,
                        round3(geometry.factor())
                    )));
                }
                return Ok(items);
            }
            Action::Screenshot { max_size } => {
                let output = self.run("screencap -p".into(), SCREENSHOT_TIMEOUT).await?;
                if !output.stdout.starts_with(PNG_SIGNATURE) {
                    return Err(ToolError::Reported(format!(
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
                let Some(max_side) = max_size else {
                    self.set_geometry(None);
                    return Ok(vec![png_item(output.stdout).await?]);
                };
                return self.scaled_screenshot(output.stdout, max_side).await;
            }
        };
        Ok(vec![ContentItem::plain_text(done)])
    }

    fn geometry(&self) -> Option<Geometry> {
        *self
            .geometry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_geometry(&self, geometry: Option<Geometry>) {
        *self
            .geometry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = geometry;
    }

    /// The caller's points on the device, and what to add to the answer when they were scaled.
    fn placed<const N: usize>(&self, points: [(i64, i64); N]) -> ([(i64, i64); N], String) {
        let Some(geometry) = self.geometry() else {
            return (points, String::new());
        };
        let device = points.map(|point| geometry.to_device(point));
        let shown: Vec<String> = device.iter().map(|(x, y)| format!("({x}, {y})")).collect();
        (
            device,
            format!(" (screenshot pixels; on the device {})", shown.join(" to ")),
        )
    }

    async fn swipe(
        &self,
        from: (i64, i64),
        to: (i64, i64),
        duration_ms: u64,
    ) -> Result<Output, InjectError> {
        let timeout = COMMAND_TIMEOUT.saturating_add(Duration::from_millis(duration_ms));
        self.inject(
            &[format!(
                "input swipe {} {} {} {} {duration_ms}",
                from.0, from.1, to.0, to.1
            )],
            timeout,
        )
        .await
    }

    /// The screen's size as taps see it: the scaled screenshot's screen when there is one (it follows
    /// rotation), else `wm size`.
    async fn screen_size(&self) -> Result<(u32, u32), ToolError> {
        if let Some(geometry) = self.geometry() {
            return Ok(geometry.screen);
        }
        let output = self.run("wm size".into(), COMMAND_TIMEOUT).await?;
        let said = String::from_utf8_lossy(&output.stdout);
        screen::parse_wm_size(&said).ok_or_else(|| {
            ToolError::Reported(format!("`wm size` printed no screen size: {}", said.trim()))
        })
    }

    async fn swipe_direction(
        &self,
        direction: Direction,
        from: Option<(i64, i64)>,
        distance: f64,
        duration_ms: u64,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let (width, height) = self.screen_size().await?;
        let (width, height) = (i64::from(width), i64::from(height));
        let geometry = self.geometry();
        let start = match from {
            Some(point) => geometry.map_or(point, |g| g.to_device(point)),
            None => (width / 2, height / 2),
        };
        let along = |side: i64| (side as f64 * distance).round() as i64;
        let (dx, dy) = match direction {
            Direction::Up => (0, -along(height)),
            Direction::Down => (0, along(height)),
            Direction::Left => (-along(width), 0),
            Direction::Right => (along(width), 0),
        };
        let end = (
            start.0.saturating_add(dx).clamp(0, (width - 1).max(0)),
            start.1.saturating_add(dy).clamp(0, (height - 1).max(0)),
        );
        self.swipe(start, end, duration_ms).await?;
        let shown = |point: (i64, i64)| {
            let (x, y) = geometry.map_or(point, |g| g.to_image(point));
            format!("({x}, {y})")
        };
        let note = match geometry {
            Some(_) => format!(
                " (screenshot pixels; on the device ({}, {}) to ({}, {}))",
                start.0, start.1, end.0, end.1
            ),
            None => String::new(),
        };
        Ok(vec![ContentItem::plain_text(format!(
            "Swiped {} from {} to {}{note}",
            direction.name(),
            shown(start),
            shown(end)
        ))])
    }

    /// `uiautomator dump`, tried again while it fails (within the attempts and the budget), as elements.
    async fn elements(&self) -> Result<Vec<ContentItem>, ToolError> {
        let started = Instant::now();
        let mut last_failure = String::new();
        for attempt in 1..=UI_DUMP_ATTEMPTS {
            let left = UI_DUMP_BUDGET.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            if attempt > 1 {
                tokio::time::sleep(UI_DUMP_PAUSE.min(left)).await;
            }
            let timeout = UI_DUMP_TIMEOUT.min(UI_DUMP_BUDGET.saturating_sub(started.elapsed()));
            // A dump cut short by its bound costs the connection: not worth it for a sliver of time.
            if timeout < UI_DUMP_MIN_TRY {
                break;
            }
            let output = self.device.shell(ui::DUMP_COMMAND.into(), timeout).await?;
            if output.exit == Some(0) {
                let xml = String::from_utf8_lossy(&output.stdout).into_owned();
                let geometry = self.geometry();
                match tokio::task::spawn_blocking(move || {
                    ui::parse(&xml).map(|elements| ui::render(&elements, geometry))
                })
                .await
                {
                    Ok(Ok(listing)) => return Ok(vec![ContentItem::plain_text(listing)]),
                    Ok(Err(reason)) => last_failure = reason,
                    Err(err) => last_failure = format!("reading the dump failed: {err}"),
                }
            } else {
                last_failure = failed("uiautomator dump", &output);
            }
            tracing::debug!(attempt, reason = %last_failure, "uiautomator dump failed");
        }
        Err(ToolError::Reported(format!(
            "The UI could not be read ({UI_DUMP_ATTEMPTS} tries within {} s): {last_failure}. A screen that keeps changing (an animation, a video) cannot be dumped; get_screenshot still works.",
            UI_DUMP_BUDGET.as_secs()
        )))
    }

    async fn scaled_screenshot(
        &self,
        png: Vec<u8>,
        max_side: u32,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let screen = screen::png_size(&png).ok_or_else(|| {
            ToolError::Reported("`screencap -p` printed a PNG without a size".into())
        })?;
        let image = screen::fitted(screen, max_side);
        let geometry = Geometry { screen, image };
        let numbers = |scale: f64| {
            ContentItem::plain_text(
                json!({
                    "width": image.0, "height": image.1,
                    "screen_width": screen.0, "screen_height": screen.1,
                    "scale": round3(scale),
                })
                .to_string(),
            )
        };
        if image == screen {
            self.set_geometry(None);
            return Ok(vec![
                png_item(png).await?,
                numbers(1.0),
                ContentItem::plain_text(format!(
                    "The screen ({}x{}) fits within {max_side} pixels: this image is the screen at full size, and coordinates are device pixels.",
                    screen.0, screen.1
                )),
            ]);
        }
        let scaled = tokio::task::spawn_blocking(move || screen::scale_png(&png, image))
            .await
            .map_err(|err| ToolError::Reported(format!("scaling the screenshot failed: {err}")))?
            .map_err(ToolError::Reported)?;
        self.set_geometry(Some(geometry));
        Ok(vec![
            png_item(scaled).await?,
            numbers(f64::from(image.0) / f64::from(screen.0.max(1))),
            ContentItem::plain_text(format!(
                "The screen is {}x{}; this image is {}x{}. Give coordinates in this image's pixels: from now on they are multiplied by {} to reach the device, until a screenshot without max_size.",
                screen.0,
                screen.1,
                image.0,
                image.1,
                round3(geometry.factor())
            )),
        ])
    }

    /// ASCII goes through `input text` (upstream's command). Other text needs an IME that takes text
    /// whole: with ADBKeyboard selected it is sent base64-encoded in a broadcast to that IME's package
    /// only (no shell quoting at all); without it nothing is typed and the error says what to install.
    /// Each `input` step, and the broadcast, runs behind the focus check.
    async fn type_text(&self, typed: &str) -> Result<(), InjectError> {
        let timeout = COMMAND_TIMEOUT.saturating_add(
            PER_CHARACTER.saturating_mul(u32::try_from(typed.len()).unwrap_or(u32::MAX)),
        );
        let Some((position, character)) = typing::first_non_ascii(typed) else {
            self.inject(&typing::text_steps(typed), timeout).await?;
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
            return Err(InjectError::Failed(format!(
                "Cannot type {character:?} (character {position} of the text): Android's `input text` types ASCII only. Non-ASCII text needs the ADBKeyboard IME ({ADB_KEYBOARD}, github.com/senzhk/ADBKeyBoard) installed and selected on the device: `ime enable {ADB_KEYBOARD} && ime set {ADB_KEYBOARD}`. Nothing was typed."
            )));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(typed.as_bytes());
        self.inject(
            &[format!(
                "am broadcast -a ADB_INPUT_B64 -p {ADB_KEYBOARD_PACKAGE} --es msg {encoded}"
            )],
            timeout,
        )
        .await?;
        Ok(())
    }
}

/// What a command that failed said: its exit status and its stderr (else its stdout).
fn failed(command: &str, output: &Output) -> String {
    let said = String::from_utf8_lossy(if output.stderr.is_empty() {
        &output.stdout
    } else {
        &output.stderr
    })
    .trim()
    .chars()
    .take(2000)
    .collect::<String>();
    let status = output
        .exit
        .map_or("no exit status".to_owned(), |code| format!("exit {code}"));
    format!(
        "`{command}` failed on the device ({status}){}{said}",
        if said.is_empty() { "" } else { ": " }
    )
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

async fn png_item(png: Vec<u8>) -> Result<ContentItem, ToolError> {
    let data =
        tokio::task::spawn_blocking(move || base64::engine::general_purpose::STANDARD.encode(&png))
            .await
            .map_err(|err| ToolError::Reported(format!("encoding the screenshot failed: {err}")))?;
    Ok(ContentItem::Image {
        data,
        mime_type: "image/png".into(),
    })
}

pub fn tools(adb: &std::sync::Arc<Adb>) -> Vec<Tool> {
    let adb = std::sync::Arc::clone(adb);
    vec![
        ToolSpec::declare::<AdbArguments>(
            GROUP,
            "adb",
            "Control an Android device: tap, double tap, long press, swipe, type text, send key events, take screenshots (optionally scaled), read the screen size, list the UI elements on screen, list, launch and stop apps, open URLs.",
        )
        .handler(move |arguments, _| {
            let adb = std::sync::Arc::clone(&adb);
            async move { adb.call(arguments).await }
        }),
    ]
}
