//! What the tools ask of the browser and its current tab, each named for what it does. Tools never
//! name a protocol method: the session and this file alone speak the protocol, so a change of how
//! Chromium is asked for something is made here, once.
//!
//! A few calls are made outside the page type, each for a reason:
//! - `cdp.rs` sets up an out-of-process frame's session as it attaches (`Target.setAutoAttach`,
//!   `Page.enable`, ...) and cancels a download past its bounds (`Browser.cancelDownload`) from the
//!   connection's reader, unanswered: neither may wait for a tool call (latency).
//! - `launch.rs` asks `Target.getTargets` (is the browser up?) and `Browser.setDownloadBehavior`
//!   while the browser starts, before any page type exists.
//! - the frame pump (`pacing.rs`) sends `HeadlessExperimental.beginFrame` on its own clock, per tab.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::cdp::CdpError;
use super::super::events::Events;
use super::super::pacing::FramePump;
use super::element::bounds;
use super::refs::Located;
use super::{CALL, Running, SLOW_CALL};
use crate::tools::ToolError;

/// A page region to capture, in CSS pixels of the whole page (not of the viewport).
#[derive(Debug, Clone, Copy)]
pub struct Clip {
    x: f64,
    y: f64,
    width: f64,
    height: f64,
    /// How much the image is scaled up from CSS pixels.
    scale: f64,
}

impl Clip {
    /// The page region shown at viewport pixels `left, top` to `right, bottom` (in order, within the
    /// viewport), captured scaled up by `scale`.
    pub fn of_viewport(
        layout: &Layout,
        (left, top, right, bottom): (f64, f64, f64, f64),
        scale: f64,
    ) -> Clip {
        Clip {
            x: left + layout.scroll_x,
            y: top + layout.scroll_y,
            width: right - left,
            height: bottom - top,
            scale,
        }
    }
}

/// A mouse button, as the protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MouseButton {
    Left,
    Middle,
    Right,
}

impl MouseButton {
    fn name(self) -> &'static str {
        match self {
            MouseButton::Left => "left",
            MouseButton::Middle => "middle",
            MouseButton::Right => "right",
        }
    }

    /// Its bit in the protocol's `buttons` mask.
    fn bit(self) -> i64 {
        match self {
            MouseButton::Left => 1,
            MouseButton::Right => 2,
            MouseButton::Middle => 4,
        }
    }
}

/// The viewport as the page lays it out: its size and how far the page is scrolled (CSS pixels).
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub width: f64,
    pub height: f64,
    pub scroll_x: f64,
    pub scroll_y: f64,
}

/// How a navigation the browser accepted went on.
pub struct Navigation {
    /// It turned into a download: no document comes.
    pub download: bool,
    /// Why the browser gave it up (`net::ERR_...`), if it did.
    pub error: Option<String>,
    /// A new document is being loaded (not a same-document move, which has no load event).
    pub new_document: bool,
}

/// A screenshot being captured while the rest of the answer is made.
pub struct Capture {
    task: AbortOnDrop<Result<Value, CdpError>>,
    /// A PNG (lossless) rather than a JPEG.
    raw: bool,
}

/// A captured image: as the browser sent it (base64) and decoded.
pub struct Image {
    pub base64: String,
    pub bytes: Vec<u8>,
}

/// A capture nobody waits for any more (the answer failed) is not left running.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Capture {
    pub fn raw(&self) -> bool {
        self.raw
    }

    /// Waits for the capture.
    pub async fn finish(mut self) -> Result<Image, ToolError> {
        let shot = (&mut self.task.0)
            .await
            .map_err(|err| ToolError::Reported(format!("the screenshot failed: {err}")))??;
        let base64 = shot["data"].as_str().unwrap_or_default().to_owned();
        let bytes = decode(&shot["data"])?;
        Ok(Image { base64, bytes })
    }
}

impl Running {
    pub fn tab_count(&self) -> usize {
        self.here.tabs.len()
    }

    /// The current tab's index (0-based).
    pub fn current_tab(&self) -> usize {
        self.here.current
    }

    /// Drops the location and snapshot an earlier call's settle asked for ahead: only the call that
    /// asked may use them.
    pub fn forget_ahead(&mut self) {
        self.ahead = None;
    }

    /// The browser went away (it exited, or its connection closed).
    pub fn is_closed(&self) -> bool {
        self.cdp().is_closed()
    }

    /// The events of every tab and of the browser itself (downloads).
    pub fn browser_events(&self) -> Arc<Events> {
        Arc::clone(&self.cdp().events)
    }

    /// Sets the current tab's viewport (CSS pixels, no device scaling).
    pub async fn set_viewport(&self, viewport: (u32, u32)) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(
                Some(&session),
                EMULATE_VIEWPORT,
                viewport_metrics(viewport),
                CALL,
            )
            .await?;
        Ok(())
    }

    /// The current page printed as a PDF, backgrounds included.
    pub async fn print_pdf(&self) -> Result<Vec<u8>, ToolError> {
        let session = self.tab()?.session.clone();
        let pdf = self
            .cdp()
            .call(
                Some(&session),
                "Page.printToPDF",
                json!({"printBackground": true}),
                SLOW_CALL,
            )
            .await?;
        decode(&pdf["data"])
    }

    /// Makes tab `index` (0-based, an open tab's) the current one, in front in the browser too.
    pub async fn select_tab(&mut self, index: usize) -> Result<(), ToolError> {
        self.here.current = index;
        let target = self.tab()?.target.clone();
        self.cdp()
            .call(
                None,
                "Target.activateTarget",
                json!({"targetId": target}),
                CALL,
            )
            .await?;
        Ok(())
    }

    /// Accepts or dismisses the dialog the current page shows (answering a prompt with `prompt`).
    pub async fn answer_dialog(&self, accept: bool, prompt: Option<&str>) -> Result<(), ToolError> {
        let mut params = json!({"accept": accept});
        if let Some(prompt) = prompt {
            params["promptText"] = json!(prompt);
        }
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(Some(&session), "Page.handleJavaScriptDialog", params, CALL)
            .await?;
        Ok(())
    }

    /// Gives the file input `input` of the renderer of `session` (the tab's, or that of the frame in
    /// another process it is in) the files at `files`.
    pub async fn choose_files(
        &self,
        session: &str,
        input: i64,
        files: &[String],
    ) -> Result<(), ToolError> {
        self.cdp()
            .call(
                Some(session),
                "DOM.setFileInputFiles",
                json!({"files": files, "backendNodeId": input}),
                CALL,
            )
            .await
            .map_err(|err| self.in_frame(session, err))?;
        Ok(())
    }

    /// Starts loading `url` in the current tab; answers once the browser committed to it (or gave it
    /// up), not when it loaded.
    pub async fn load(&self, url: &str) -> Result<Navigation, ToolError> {
        let session = self.tab()?.session.clone();
        let navigation = self
            .cdp()
            .call(
                Some(&session),
                "Page.navigate",
                json!({"url": url}),
                SLOW_CALL,
            )
            .await?;
        Ok(Navigation {
            download: navigation["isDownload"].as_bool() == Some(true),
            error: navigation["errorText"]
                .as_str()
                .filter(|error| !error.is_empty())
                .map(str::to_owned),
            new_document: navigation.get("loaderId").is_some(),
        })
    }

    /// The id of the history entry before (`back`) or after the current one, if there is one.
    pub async fn history_neighbour(&self, back: bool) -> Result<Option<i64>, ToolError> {
        let session = self.tab()?.session.clone();
        let history = self
            .cdp()
            .call(Some(&session), "Page.getNavigationHistory", json!({}), CALL)
            .await?;
        let current = history["currentIndex"].as_i64().unwrap_or(0);
        let wanted = if back {
            current.checked_sub(1)
        } else {
            current.checked_add(1)
        };
        Ok(wanted
            .and_then(|wanted| usize::try_from(wanted).ok())
            .and_then(|index| history["entries"].as_array()?.get(index))
            .and_then(|entry| entry["id"].as_i64()))
    }

    /// Loads the current page again.
    pub async fn reload(&self) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(Some(&session), "Page.reload", json!({}), CALL)
            .await?;
        Ok(())
    }

    /// Goes to history entry `entry` (an id [`Running::history_neighbour`] gave).
    pub async fn go_to_history_entry(&self, entry: i64) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(
                Some(&session),
                "Page.navigateToHistoryEntry",
                json!({"entryId": entry}),
                CALL,
            )
            .await?;
        Ok(())
    }

    /// Inserts `text` where the focus is, at once (as a paste or an input method would).
    pub async fn insert_text(&self, text: &str) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(
                Some(&session),
                "Input.insertText",
                json!({"text": text}),
                CALL,
            )
            .await?;
        Ok(())
    }

    async fn mouse(&self, kind: &str, (x, y): (f64, f64), buttons: i64) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        let mut event = json!({"type": kind, "x": x, "y": y, "buttons": buttons});
        if kind != "mouseMoved" || buttons != 0 {
            event["button"] = json!("left");
        }
        if kind != "mouseMoved" {
            event["clickCount"] = json!(1);
        }
        self.cdp()
            .call(Some(session), "Input.dispatchMouseEvent", event, CALL)
            .await?;
        Ok(())
    }

    pub async fn keys(&self, events: Vec<Value>) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        for event in events {
            self.cdp()
                .call(Some(session), "Input.dispatchKeyEvent", event, CALL)
                .await?;
        }
        Ok(())
    }

    pub async fn mouse_move(&self, point: (f64, f64), buttons: i64) -> Result<(), ToolError> {
        self.mouse("mouseMoved", point, buttons).await
    }

    pub async fn mouse_press(&self, point: (f64, f64)) -> Result<(), ToolError> {
        self.mouse("mousePressed", point, 1).await
    }

    pub async fn mouse_release(&self, point: (f64, f64)) -> Result<(), ToolError> {
        self.mouse("mouseReleased", point, 0).await
    }

    /// While on, a drag the page starts is not run by the browser but reported (its data), to be
    /// dropped with [`Running::drop_dragged`].
    pub async fn intercept_drags(&self, enabled: bool) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.cdp()
            .call(
                Some(&session),
                "Input.setInterceptDrags",
                json!({"enabled": enabled}),
                CALL,
            )
            .await?;
        Ok(())
    }

    /// Drops an intercepted drag's `data` at `point`: enter, over, drop.
    pub async fn drop_dragged(&self, (x, y): (f64, f64), data: &Value) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        for kind in ["dragEnter", "dragOver", "drop"] {
            self.cdp()
                .call(
                    Some(&session),
                    "Input.dispatchDragEvent",
                    json!({"type": kind, "x": x, "y": y, "data": data}),
                    CALL,
                )
                .await?;
        }
        Ok(())
    }

    /// Drags from `start` to `end` as a person would: a press, a few pixels of motion (which start
    /// an HTML drag and drop where the element is draggable), then the drop of what the page dragged
    /// or, where it dragged nothing, a steady move; the release at `end`. Raced against the tab's
    /// dialogs and crashes; the page's drags are intercepted only for its duration.
    pub async fn drag_between(&self, start: (f64, f64), end: (f64, f64)) -> Result<(), ToolError> {
        self.events(|events| events.drag = None)?;
        self.intercept_drags(true).await?;
        let dragged = self
            .racing(async {
                self.mouse_move(start, 0).await?;
                self.mouse_press(start).await?;
                for step in 1..=3 {
                    let offset = f64::from(step) * 5.0;
                    self.mouse_move((start.0 + offset, start.1 + offset), 1)
                        .await?;
                }
                // The page starts its drag on that motion; the interception is reported soon after.
                self.wait_until(Instant::now() + Duration::from_millis(300), |events| {
                    events.drag.is_some()
                })
                .await?;
                let data = self.events(|events| events.drag.take())?;
                if let Some(data) = data {
                    self.drop_dragged(end, &data).await?;
                } else {
                    for step in 1..=10 {
                        let fraction = f64::from(step) / 10.0;
                        let point = (
                            start.0 + (end.0 - start.0) * fraction,
                            start.1 + (end.1 - start.1) * fraction,
                        );
                        self.mouse_move(point, 1).await?;
                    }
                }
                self.mouse_release(end).await
            })
            .await;
        let _ = self.intercept_drags(false).await;
        // A dialog that cut the drag short is the caller's to report, as the page's state after it.
        dragged.map(drop)
    }

    /// Evaluates `expression`, a promise, in the current page and waits for its value (within
    /// `timeout`), unless a dialog opens first (`None`).
    pub async fn evaluate_in_page(
        &self,
        expression: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<Value>, ToolError> {
        let session = self.tab()?.session.clone();
        self.evaluate_promise(&session, expression, timeout).await
    }

    /// The page region of a node's border box (a node of a frame in another process placed where
    /// its frame sits), for a capture of that element alone.
    pub async fn element_clip(&self, node: &Located, reference: &str) -> Result<Clip, ToolError> {
        let session = self.tab()?.session.clone();
        let model = self
            .cdp()
            .call(
                Some(&node.session),
                "DOM.getBoxModel",
                json!({"backendNodeId": node.backend}),
                CALL,
            )
            .await
            .map_err(|err| self.in_frame(&node.session, err))?;
        // A node of a frame in another process has its box in that frame's viewport.
        let (frame_x, frame_y) = self.frame_offset(node).await?;
        let metrics = self
            .cdp()
            .call(Some(&session), "Page.getLayoutMetrics", json!({}), CALL)
            .await?;
        let (left, top, right, bottom) = model
            .pointer("/model/border")
            .and_then(bounds)
            .ok_or_else(|| {
                ToolError::Reported(format!(
                    "The element of ref {reference} has no box to capture."
                ))
            })?;
        let (width, height) = (right - left, bottom - top);
        let (left, top) = (left + frame_x, top + frame_y);
        let scroll_x = metrics
            .pointer("/cssVisualViewport/pageX")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let scroll_y = metrics
            .pointer("/cssVisualViewport/pageY")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        Ok(Clip {
            x: left + scroll_x,
            y: top + scroll_y,
            width,
            height,
            scale: 1.0,
        })
    }

    /// The viewport's size and scroll offset, as the page lays it out.
    pub async fn layout(&self) -> Result<Layout, ToolError> {
        let session = self.tab()?.session.clone();
        let metrics = self
            .cdp()
            .call(Some(&session), "Page.getLayoutMetrics", json!({}), CALL)
            .await?;
        let number = |pointer: &str| metrics.pointer(pointer).and_then(Value::as_f64);
        Ok(Layout {
            width: number("/cssLayoutViewport/clientWidth").unwrap_or(0.0),
            height: number("/cssLayoutViewport/clientHeight").unwrap_or(0.0),
            scroll_x: number("/cssVisualViewport/pageX").unwrap_or(0.0),
            scroll_y: number("/cssVisualViewport/pageY").unwrap_or(0.0),
        })
    }

    /// One mouse event at `point` (viewport CSS pixels): `kind` is the protocol's (`mousePressed`,
    /// `mouseReleased`, `mouseMoved`), `held` the buttons down after it, `modifiers` the protocol's
    /// mask.
    pub async fn mouse_event(
        &self,
        kind: &str,
        (x, y): (f64, f64),
        button: Option<MouseButton>,
        held: &[MouseButton],
        click_count: i64,
        modifiers: i64,
    ) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        let buttons: i64 = held.iter().map(|button| button.bit()).sum();
        let mut event =
            json!({"type": kind, "x": x, "y": y, "buttons": buttons, "modifiers": modifiers});
        if let Some(button) = button {
            event["button"] = json!(button.name());
            event["clickCount"] = json!(click_count);
        }
        self.cdp()
            .call(Some(session), "Input.dispatchMouseEvent", event, CALL)
            .await?;
        Ok(())
    }

    /// A turn of the mouse wheel at `point` by `delta` CSS pixels (right and down positive).
    pub async fn wheel(&self, (x, y): (f64, f64), (dx, dy): (f64, f64)) -> Result<(), ToolError> {
        let session = &self.tab()?.session;
        self.cdp()
            .call(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": "mouseWheel", "x": x, "y": y, "deltaX": dx, "deltaY": dy}),
                CALL,
            )
            .await?;
        Ok(())
    }

    /// Dismisses the dialog every tab shows (a `beforeunload` one keeps its page); what each said.
    pub async fn dismiss_dialogs(&self) -> Result<Vec<super::super::events::Dialog>, ToolError> {
        let mut dismissed = Vec::new();
        for tab in &self.here.tabs {
            let Some(dialog) = self
                .cdp()
                .events
                .with(&tab.session, |events| events.dialog.clone())
            else {
                continue;
            };
            let answered = self
                .cdp()
                .call(
                    Some(&tab.session),
                    "Page.handleJavaScriptDialog",
                    json!({"accept": false}),
                    CALL,
                )
                .await;
            // A dialog closed meanwhile (by the page, or with its tab) is gone all the same.
            if let Err(err) = answered {
                tracing::debug!("dismissing a dialog: {err}");
            }
            self.cdp()
                .events
                .with(&tab.session, |events| events.dialog = None);
            dismissed.push(dialog);
        }
        Ok(dismissed)
    }

    /// Starts capturing the viewport, or `clip` of the page: a PNG when `raw`, else a JPEG.
    pub fn start_screenshot(&self, raw: bool, clip: Option<Clip>) -> Result<Capture, ToolError> {
        // Encoded by the browser as it is sent (JPEG quality 50 or PNG), never decoded and encoded
        // again by boxd; `optimizeForSpeed` picks the faster encoder settings.
        let mut params = if raw {
            json!({"format": "png", "optimizeForSpeed": true})
        } else {
            json!({"format": "jpeg", "quality": 50, "optimizeForSpeed": true})
        };
        if let Some(clip) = clip {
            params["clip"] = json!({"x": clip.x, "y": clip.y, "width": clip.width.max(1.0),
                                    "height": clip.height.max(1.0), "scale": clip.scale});
            params["captureBeyondViewport"] = json!(true);
        }
        let session = self.tab()?.session.clone();
        let cdp = self.cdp().clone();
        // A frame drawn at once for the capture when boxd paces the tab's frames; the browser's own
        // capture (which waits for its next frames) for an element's clip and otherwise.
        let camera = match clip {
            None => self.tab()?.frames.as_ref().map(FramePump::camera),
            Some(_) => None,
        };
        let task = tokio::spawn(async move {
            if let Some(camera) = camera
                && let Some(shot) = camera.screenshot(params.clone()).await?
            {
                return Ok(shot);
            }
            cdp.call(Some(&session), "Page.captureScreenshot", params, SLOW_CALL)
                .await
        });
        Ok(Capture {
            task: AbortOnDrop(task),
            raw,
        })
    }
}

/// The protocol method setting a tab's viewport, with [`viewport_metrics`].
pub(super) const EMULATE_VIEWPORT: &str = "Emulation.setDeviceMetricsOverride";

/// The metrics a tab of viewport `(width, height)` is given: CSS pixels, not a mobile device.
pub(super) fn viewport_metrics((width, height): (u32, u32)) -> Value {
    json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false})
}

fn decode(data: &Value) -> Result<Vec<u8>, ToolError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.as_str().unwrap_or_default())
        .map_err(|err| ToolError::Reported(format!("the browser sent undecodable data: {err}")))
}
