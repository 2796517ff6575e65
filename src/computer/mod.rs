//! The `computer` family: desktop control on an X display (group `computer-use`), native. The tool
//! `computer` answers upstream's ten actions (computer-use-mcp 1.2.0) with their exact texts and the
//! model contracts' other actions under their names; `computer_batch` runs a list of them in one call.
//! Bad arguments are `isError` results that say what is wrong, never an HTTP error (the Python client
//! would drop the reason).

mod actions;
mod capture;
mod desktop;
mod family;
mod keys;
mod keysymdef;
mod x11;

pub use family::{ComputerArgs, family, limits};

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::core::error::ApiError;
use crate::core::owner::OwnerError;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError, ToolResult, ToolSpec};
use actions::{Action, BatchAction, Button, ComputerArguments, Geometry, ShotOptions};
use capture::Encoding;
use desktop::{Desktop, DesktopError};

pub const GROUP: &str = "computer-use";

/// What batch actions after a failed one answer (the toolset contract's exact words).
const NOT_EXECUTED: &str = "Not executed: an earlier computer action in this turn failed.";
/// Most actions one `computer_batch` runs: a turn's worth (each can itself wait up to
/// [`actions::MAX_ACTION_DURATION`]); a longer list is refused whole before anything runs.
pub const MAX_BATCH_ACTIONS: usize = 100;
/// Intermediate pointer positions of a drag, so applications that track motion see a path.
const DRAG_STEPS: i32 = 10;

pub struct Computer {
    desktop: Desktop,
    /// Screenshots larger than this are scaled down to fit, and coordinates follow (None: never).
    max_image: Option<(u32, u32)>,
}

/// `computer_batch`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
struct BatchArguments {
    /// Computer actions, as the computer tool takes them.
    // Optional here so that its absence is answered in the batch's own words.
    #[schemars(required)]
    actions: Option<Vec<BatchAction>>,
    /// Take a screenshot after the last action.
    screenshot: Option<bool>,
}

/// A request the X server refused is the action's failure, which the model reads (an `isError`
/// result); the rest is the desktop's state (an HTTP error with a retry hint).
impl From<DesktopError> for ToolError {
    fn from(err: DesktopError) -> Self {
        match err {
            DesktopError::X(x11::XError::Request(reason)) => ToolError::Reported(reason),
            other => ToolError::Http(other.into()),
        }
    }
}

impl From<DesktopError> for ApiError {
    fn from(err: DesktopError) -> Self {
        match err {
            DesktopError::Owner(OwnerError::Busy(_)) => ApiError::TooManyRequests(err.to_string()),
            DesktopError::TurnTimeout => ApiError::GatewayTimeout(err.to_string()),
            other => ApiError::Unavailable {
                message: other.to_string(),
                retry_after_seconds: 1,
            },
        }
    }
}

impl Computer {
    /// The screen's size is the desktop's state, not the caller's action: whatever fails in reading
    /// it is an HTTP error, even a refused request.
    async fn geometry(&self) -> Result<Geometry, ApiError> {
        let (width, height) = self
            .desktop
            .run(|session| Ok((u32::from(session.width), u32::from(session.height))))
            .await?;
        Ok(Geometry {
            screen: (width, height),
            image: capture::fitted((width, height), self.max_image),
        })
    }

    async fn call(&self, arguments: ComputerArguments) -> ToolResult {
        let geometry = self.geometry().await?;
        let action = actions::parse(&arguments, &geometry).map_err(ToolError::Reported)?;
        let items = self.execute(action, &geometry).await?;
        Ok(CallToolResult::new(items, false))
    }

    async fn batch(&self, arguments: BatchArguments) -> ToolResult {
        let Some(list) = arguments.actions else {
            return Err(ToolError::Reported(
                "actions must be a list of computer actions".into(),
            ));
        };
        if list.len() > MAX_BATCH_ACTIONS {
            return Err(ToolError::Reported(format!(
                "computer_batch runs at most {MAX_BATCH_ACTIONS} actions; this one has {}. Nothing was done: split it into several calls.",
                list.len()
            )));
        }
        let geometry = self.geometry().await?;
        let mut items = Vec::new();
        let mut failed = false;
        for action in list {
            if failed {
                items.push(ContentItem::plain_text(NOT_EXECUTED));
                continue;
            }
            let outcome = match action {
                BatchAction::Read(arguments) => match actions::parse(&arguments, &geometry) {
                    Ok(action) => self.execute(action, &geometry).await,
                    Err(reason) => Err(ToolError::Reported(reason)),
                },
                BatchAction::Unreadable(reason) => Err(ToolError::Reported(reason)),
            };
            match outcome {
                Ok(done) => items.extend(done),
                Err(err) => {
                    failed = true;
                    items.push(ContentItem::plain_text(err.into_report()?));
                }
            }
        }
        if arguments.screenshot == Some(true) {
            let shot = ShotOptions {
                jpeg_quality: None,
                cursor: false,
            };
            match self.execute(Action::Screenshot(shot), &geometry).await {
                Ok(done) => items.extend(done),
                Err(err) => {
                    failed = true;
                    items.push(ContentItem::plain_text(err.into_report()?));
                }
            }
        }
        Ok(CallToolResult::new(items, failed))
    }

    async fn execute(
        &self,
        action: Action,
        geometry: &Geometry,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let done = match action {
            Action::Key {
                text: shown,
                chord,
                repeat,
            } => {
                self.desktop
                    .run(move |session| {
                        for _ in 0..repeat {
                            press_chord(session, &chord)?;
                            release_chord(session, &chord)?;
                        }
                        session.sync()
                    })
                    .await?;
                format!("Pressed key: {shown}")
            }
            Action::KeyDown { text: shown, chord } => {
                hold_chord(&self.desktop, chord, true).await?;
                format!("Key down: {shown}")
            }
            Action::KeyUp { text: shown, chord } => {
                hold_chord(&self.desktop, chord, false).await?;
                format!("Key up: {shown}")
            }
            Action::Type { text: typed } => {
                let characters = typed.clone();
                self.desktop
                    .run(move |session| {
                        session.type_text(&characters)?;
                        session.sync()
                    })
                    .await?;
                format!("Typed text: {typed}")
            }
            Action::MouseMove { to } => {
                let (x, y) = (to.x, to.y);
                self.desktop
                    .run(move |session| {
                        session.move_to(x, y)?;
                        session.sync()
                    })
                    .await?;
                format!("Moved cursor to: {}", to.text())
            }
            Action::Click {
                button,
                count,
                at,
                modifiers,
                done,
            } => {
                let at = at.map(|point| (point.x, point.y));
                self.desktop
                    .run(move |session| {
                        if let Some((x, y)) = at {
                            session.move_to(x, y)?;
                        }
                        press_chord(session, &modifiers)?;
                        for _ in 0..count {
                            session.button(button as u8, true)?;
                            session.button(button as u8, false)?;
                        }
                        release_chord(session, &modifiers)?;
                        session.sync()
                    })
                    .await?;
                done.to_owned()
            }
            Action::Drag { from, to } => {
                let start = from.map(|point| (point.x, point.y));
                let end = (to.x, to.y);
                self.desktop
                    .run(move |session| {
                        if let Some((x, y)) = start {
                            session.move_to(x, y)?;
                        }
                        let (from_x, from_y) = session.pointer()?;
                        session.button(Button::Left as u8, true)?;
                        for step in 1..=DRAG_STEPS {
                            let x = from_x + (end.0 - from_x) * step / DRAG_STEPS;
                            let y = from_y + (end.1 - from_y) * step / DRAG_STEPS;
                            session.move_to(x, y)?;
                        }
                        session.button(Button::Left as u8, false)?;
                        session.sync()
                    })
                    .await?;
                format!("Dragged to: {}", to.text())
            }
            Action::MouseDown { at } => {
                self.mouse_button(at.map(|point| (point.x, point.y)), true)
                    .await?;
                "Left mouse down".to_owned()
            }
            Action::MouseUp { at } => {
                self.mouse_button(at.map(|point| (point.x, point.y)), false)
                    .await?;
                "Left mouse up".to_owned()
            }
            Action::Scroll {
                direction,
                button,
                amount,
                at,
                modifiers,
            } => {
                let at = at.map(|point| (point.x, point.y));
                self.desktop
                    .run(move |session| {
                        if let Some((x, y)) = at {
                            session.move_to(x, y)?;
                        }
                        press_chord(session, &modifiers)?;
                        for _ in 0..amount {
                            session.button(button, true)?;
                            session.button(button, false)?;
                        }
                        release_chord(session, &modifiers)?;
                        session.sync()
                    })
                    .await?;
                format!("Scrolled {direction} by {amount}")
            }
            Action::HoldKey {
                text: shown,
                chord,
                duration,
                shown: seconds,
            } => {
                self.hold(chord, duration).await?;
                format!("Held key: {shown} for {seconds}s")
            }
            Action::Wait {
                duration,
                shown: seconds,
            } => {
                tokio::time::sleep(duration).await;
                format!("Waited {seconds}s")
            }
            Action::CursorPosition => {
                let (x, y) = self.desktop.run(|session| session.pointer()).await?;
                let (x, y) = geometry.caller_point(x, y);
                json!({"x": x, "y": y}).to_string()
            }
            Action::Screenshot(options) => return self.screenshot(options, geometry).await,
            Action::Zoom { region, options } => {
                return self.zoom(region, options, geometry).await;
            }
        };
        Ok(vec![ContentItem::plain_text(done)])
    }

    async fn mouse_button(&self, at: Option<(i32, i32)>, pressed: bool) -> Result<(), ToolError> {
        self.desktop
            .run(move |session| {
                if let Some((x, y)) = at {
                    session.move_to(x, y)?;
                }
                session.button(Button::Left as u8, pressed)?;
                session.sync()
            })
            .await?;
        Ok(())
    }

    /// Presses the chord, waits, releases it; released even when the call is dropped while it waits.
    async fn hold(&self, chord: Vec<u32>, duration: Duration) -> Result<(), ToolError> {
        hold_chord(&self.desktop, chord.clone(), true).await?;
        let release = ReleaseOnDrop {
            desktop: self.desktop.clone(),
            chord: Some(chord),
        };
        tokio::time::sleep(duration).await;
        release.now().await
    }

    async fn screenshot(
        &self,
        options: ShotOptions,
        geometry: &Geometry,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let (width, height) = geometry.screen;
        let region = (0, 0, clamp_u16(width), clamp_u16(height));
        let (image, pointer) = self
            .desktop
            .run(move |session| {
                let pointer = if options.cursor {
                    Some(session.pointer()?)
                } else {
                    None
                };
                Ok((session.capture(region)?, pointer))
            })
            .await?;
        let target = geometry.image;
        let caller_pointer = pointer.map(|(x, y)| geometry.caller_point(x, y));
        let image = encode(image, target, caller_pointer, options).await?;
        let mut size = json!({"display_width_px": target.0, "display_height_px": target.1});
        let mut items = Vec::new();
        if geometry.scaled() {
            size["screen_width_px"] = json!(width);
            size["screen_height_px"] = json!(height);
            size["scale"] = json!(f64::from(target.0) / f64::from(width.max(1)));
        }
        items.push(ContentItem::plain_text(size.to_string()));
        items.push(image);
        if geometry.scaled() {
            items.push(ContentItem::plain_text(format!(
                "The screen is {width}x{height}; this image is {}x{}. Give coordinates in this image's pixels: they are scaled to the screen.",
                target.0, target.1
            )));
        }
        Ok(items)
    }

    async fn zoom(
        &self,
        (first, second): (actions::Point, actions::Point),
        options: ShotOptions,
        geometry: &Geometry,
    ) -> Result<Vec<ContentItem>, ToolError> {
        let region = (
            clamp_i16(first.x),
            clamp_i16(first.y),
            clamp_u16(u32::try_from(second.x.saturating_sub(first.x)).unwrap_or(1)),
            clamp_u16(u32::try_from(second.y.saturating_sub(first.y)).unwrap_or(1)),
        );
        let image = self
            .desktop
            .run(move |session| session.capture(region))
            .await?;
        // The region at full resolution, enlarged or reduced to fit the usual screenshot size.
        let (width, height) = image.dimensions();
        let scale = f64::min(
            f64::from(geometry.image.0) / f64::from(width.max(1)),
            f64::from(geometry.image.1) / f64::from(height.max(1)),
        );
        let target = (
            ((f64::from(width) * scale).round() as u32).max(1),
            ((f64::from(height) * scale).round() as u32).max(1),
        );
        let options = ShotOptions {
            cursor: false,
            ..options
        };
        let encoded = encode(image, target, None, options).await?;
        let described = json!({
            "region": [first.shown.0.parse::<f64>().unwrap_or_default(), first.shown.1.parse::<f64>().unwrap_or_default(),
                       second.shown.0.parse::<f64>().unwrap_or_default(), second.shown.1.parse::<f64>().unwrap_or_default()],
            "width_px": target.0,
            "height_px": target.1,
        });
        Ok(vec![
            ContentItem::plain_text(described.to_string()),
            encoded,
        ])
    }
}

/// Scales, marks the cursor and encodes off the async workers (a PNG of a full screen is milliseconds
/// of CPU).
async fn encode(
    image: image::RgbImage,
    target: (u32, u32),
    pointer: Option<(i64, i64)>,
    options: ShotOptions,
) -> Result<ContentItem, ToolError> {
    let encoding = match options.jpeg_quality {
        Some(quality) => Encoding::Jpeg { quality },
        None => Encoding::Png,
    };
    let data = tokio::task::spawn_blocking(move || {
        let mut image = capture::resize(image, target);
        if let Some((x, y)) = pointer {
            capture::draw_cursor(&mut image, x, y);
        }
        capture::encode_base64(&image, encoding)
    })
    .await
    .map_err(|err| ToolError::Reported(format!("encoding the screenshot failed: {err}")))?
    .map_err(ToolError::Reported)?;
    Ok(ContentItem::Image {
        data,
        mime_type: encoding.mime_type().to_owned(),
    })
}

fn press_chord(session: &mut x11::Session, chord: &[u32]) -> Result<(), x11::XError> {
    // Every key of the chord has its keycode (and clients the mapping) before the first is pressed.
    if session.bind_ahead(chord)? < chord.len() {
        return Err(x11::XError::Request(
            "no free keycodes for every key of the chord".into(),
        ));
    }
    for keysym in chord {
        session.key(*keysym, true)?;
    }
    Ok(())
}

fn release_chord(session: &mut x11::Session, chord: &[u32]) -> Result<(), x11::XError> {
    for keysym in chord.iter().rev() {
        session.key(*keysym, false)?;
    }
    Ok(())
}

/// Presses (`down`) or releases the chord and waits until the X server has it.
async fn hold_chord(desktop: &Desktop, chord: Vec<u32>, down: bool) -> Result<(), DesktopError> {
    desktop
        .run(move |session| {
            if down {
                press_chord(session, &chord)?;
            } else {
                release_chord(session, &chord)?;
            }
            session.sync()
        })
        .await
}

fn clamp_u16(value: u32) -> u16 {
    u16::try_from(value).unwrap_or(u16::MAX)
}

fn clamp_i16(value: i32) -> i16 {
    i16::try_from(value).unwrap_or(if value < 0 { i16::MIN } else { i16::MAX })
}

/// Releases held keys if `hold_key` is dropped (its caller went away) before it released them itself.
struct ReleaseOnDrop {
    desktop: Desktop,
    chord: Option<Vec<u32>>,
}

impl ReleaseOnDrop {
    async fn now(mut self) -> Result<(), ToolError> {
        let Some(chord) = self.chord.take() else {
            return Ok(());
        };
        hold_chord(&self.desktop, chord, false).await?;
        Ok(())
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(chord) = self.chord.take() {
            let desktop = self.desktop.clone();
            tokio::spawn(async move {
                let _ = hold_chord(&desktop, chord, false).await;
            });
        }
    }
}

pub fn tools(computer: &Arc<Computer>) -> Vec<Tool> {
    let single = Arc::clone(computer);
    let batch = Arc::clone(computer);
    vec![
        ToolSpec::declare::<ComputerArguments>(
            GROUP,
            "computer",
            "Use a mouse and keyboard to interact with a computer, and take screenshots.",
        )
        .handler(move |arguments, _| {
            let computer = Arc::clone(&single);
            async move { computer.call(arguments).await }
        }),
        ToolSpec::declare::<BatchArguments>(
            GROUP,
            "computer_batch",
            "Run several computer actions in order in one call; it stops at the first that fails. Optionally ends with a screenshot.",
        )
        .handler(move |arguments, _| {
            let computer = Arc::clone(&batch);
            async move { computer.batch(arguments).await }
        }),
    ]
}
