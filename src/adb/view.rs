//! A person's live view of the device (what `MobileSandbox.mobile_url`, `/websockify/?password=TOKEN`,
//! opens, and `GET /adb/view`): a page, the frames it shows and
//! the taps and keys it sends. The page holds no data and is served like a static file; every frame and
//! every input goes through the routes behind the bearer check, with the token the page read from its
//! own address.
//!
//! A stream captures a frame only once the previous one was written to its client (at most one capture
//! in flight per stream, nothing queued: a slow client gets fewer frames, never older ones), no faster
//! than its frame rate, and ends when the client goes away (the body is dropped with the connection).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::actions::{self, Action, AdbArguments};
use super::device::DeviceError;
use super::{Adb, InjectError, PNG_SIGNATURE, SCREENSHOT_TIMEOUT, screen};
use crate::api::extract::{ApiJson, ApiQuery};
use crate::core::error::{ApiError, ApiResult};

/// Frames per second of a stream that asks for no rate.
pub const DEFAULT_VIEW_FPS: u32 = 5;
/// The fastest a stream captures, whatever it asks: each frame is a `screencap` on the device's one link,
/// which the tools share.
pub const MAX_VIEW_FPS: u32 = 15;
/// Streams served at once; one more is refused as busy (429) rather than slowing every viewer.
pub const MAX_VIEW_STREAMS: usize = 4;
const BOUNDARY: &str = "boxd-frame";

/// The page: self-contained (no external script, style or font).
const PAGE: &str = include_str!("view.html");

/// Streams open now (a permit each).
pub struct Views {
    streams: Arc<Semaphore>,
}

impl Views {
    pub fn new() -> Views {
        Views {
            streams: Arc::new(Semaphore::new(MAX_VIEW_STREAMS)),
        }
    }
}

/// The page, served without the token; also at `/websockify/`, where upstream's mobile image serves its
/// viewer (`MobileSandbox.mobile_url`).
pub fn page_routes() -> Router {
    Router::new()
        .route("/adb/view", get(page))
        .route("/websockify/", get(page))
}

/// The frames and the input, behind the bearer check (and the family's health) like every family route.
pub fn routes(adb: Arc<Adb>) -> Router {
    Router::new()
        .route("/adb/screen", get(one_frame))
        .route("/adb/stream", get(stream))
        .route("/adb/input", post(input))
        .with_state(adb)
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            // Its address carries the token: no other site is told it, and nothing outside runs in it.
            (header::REFERRER_POLICY, "no-referrer"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src blob:; connect-src 'self'; frame-ancestors 'self'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrameQuery {
    /// Scale the frame so its longest side is at most this many pixels.
    max_side: Option<u32>,
    /// Streams: frames per second (1 to [`MAX_VIEW_FPS`]).
    fps: Option<u32>,
}

impl FrameQuery {
    fn max_side(&self) -> ApiResult<Option<u32>> {
        match self.max_side {
            Some(side)
                if !(actions::MIN_SCREENSHOT_SIDE..=actions::MAX_SCREENSHOT_SIDE)
                    .contains(&side) =>
            {
                Err(ApiError::BadRequest(format!(
                    "max_side must be between {} and {}, got {side}",
                    actions::MIN_SCREENSHOT_SIDE,
                    actions::MAX_SCREENSHOT_SIDE
                )))
            }
            side => Ok(side),
        }
    }
}

/// One frame: the PNG and the device's screen size (the frame's own size when not scaled).
struct Frame {
    png: Vec<u8>,
    screen: (u32, u32),
}

impl Adb {
    async fn frame(&self, max_side: Option<u32>) -> ApiResult<Frame> {
        let output = self
            .device
            .shell("screencap -p".into(), SCREENSHOT_TIMEOUT)
            .await?;
        if output.exit != Some(0) || !output.stdout.starts_with(PNG_SIGNATURE) {
            return Err(ApiError::BadGateway(format!(
                "`screencap -p` printed no PNG ({} bytes, {})",
                output.stdout.len(),
                output
                    .exit
                    .map_or("no exit status".to_owned(), |code| format!("exit {code}"))
            )));
        }
        let screen = screen::png_size(&output.stdout).ok_or_else(|| {
            ApiError::BadGateway("`screencap -p` printed a PNG without a size".into())
        })?;
        let Some(max_side) = max_side else {
            return Ok(Frame {
                png: output.stdout,
                screen,
            });
        };
        let size = screen::fitted(screen, max_side);
        if size == screen {
            return Ok(Frame {
                png: output.stdout,
                screen,
            });
        }
        let png = tokio::task::spawn_blocking(move || screen::scale_png(&output.stdout, size))
            .await
            .map_err(|err| ApiError::Internal(format!("scaling the frame failed: {err}")))?
            .map_err(ApiError::BadGateway)?;
        Ok(Frame { png, screen })
    }
}

fn screen_size(screen: (u32, u32)) -> String {
    format!("{}x{}", screen.0, screen.1)
}

/// `GET /adb/screen`: one frame as `image/png`; `X-Screen-Size` is the device's size in pixels (taps
/// sent to `/adb/input` are in those).
async fn one_frame(
    State(adb): State<Arc<Adb>>,
    ApiQuery(query): ApiQuery<FrameQuery>,
) -> ApiResult<Response> {
    if query.fps.is_some() {
        return Err(ApiError::BadRequest(
            "fps is for /adb/stream; /adb/screen answers one frame".into(),
        ));
    }
    let frame = adb.frame(query.max_side()?).await?;
    let mut response = (
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        frame.png,
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&screen_size(frame.screen)) {
        response.headers_mut().insert("x-screen-size", value);
    }
    Ok(response)
}

struct Streaming {
    adb: Arc<Adb>,
    max_side: Option<u32>,
    period: Duration,
    next: Instant,
    /// Held for the stream's life: dropped with the body when the client goes away.
    _slot: OwnedSemaphorePermit,
}

/// `GET /adb/stream`: frames as `multipart/x-mixed-replace`, each part a PNG with its `Content-Length`
/// and `X-Screen-Size`. It ends after a frame that could not be taken (the client asks again, and hears
/// why from the answer).
async fn stream(
    State(adb): State<Arc<Adb>>,
    ApiQuery(query): ApiQuery<FrameQuery>,
) -> ApiResult<Response> {
    let max_side = query.max_side()?;
    let fps = query.fps.unwrap_or(DEFAULT_VIEW_FPS);
    if !(1..=MAX_VIEW_FPS).contains(&fps) {
        return Err(ApiError::BadRequest(format!(
            "fps must be between 1 and {MAX_VIEW_FPS}, got {fps}"
        )));
    }
    let slot = Arc::clone(&adb.views.streams)
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::TooManyRequests(format!(
                "{MAX_VIEW_STREAMS} views of the device are open; close one or try again shortly"
            ))
        })?;
    // The first frame is taken before answering, so a device that cannot be captured is an error status
    // and not an empty stream.
    let first = adb.frame(max_side).await?;
    let state = Streaming {
        adb,
        max_side,
        period: Duration::from_secs(1) / fps,
        next: Instant::now(),
        _slot: slot,
    };
    let frames =
        futures_util::stream::unfold((Some(first), state), |(pending, mut state)| async move {
            let frame = match pending {
                Some(frame) => frame,
                None => {
                    // A client that read slowly is not owed the frames it missed: the next is due now.
                    let now = Instant::now();
                    if state.next < now {
                        state.next = now;
                    }
                    tokio::time::sleep_until(state.next).await;
                    match state.adb.frame(state.max_side).await {
                        Ok(frame) => frame,
                        Err(err) => {
                            tracing::debug!(error = %err, "the view's stream ends");
                            return None;
                        }
                    }
                }
            };
            state.next += state.period;
            Some((
                Ok::<_, std::convert::Infallible>(part(&frame)),
                (None, state),
            ))
        });
    let mut response = Body::from_stream(frames).into_response();
    let headers = response.headers_mut();
    if let Ok(value) =
        HeaderValue::from_str(&format!("multipart/x-mixed-replace; boundary={BOUNDARY}"))
    {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx would otherwise hold frames back to fill its buffers.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

fn part(frame: &Frame) -> Bytes {
    let mut bytes = format!(
        "--{BOUNDARY}\r\nContent-Type: image/png\r\nContent-Length: {}\r\nX-Screen-Size: {}\r\n\r\n",
        frame.png.len(),
        screen_size(frame.screen)
    )
    .into_bytes();
    bytes.extend_from_slice(&frame.png);
    bytes.extend_from_slice(b"\r\n");
    Bytes::from(bytes)
}

/// `POST /adb/input`'s body: the `adb` tool's arguments, read into an action, or why they cannot be
/// (a 400 with that reason). Read within the JSON extractor, so that a body that is no JSON stays its
/// 422, while JSON that is no object, or not the tool's arguments, is a 400 in the tool's words.
struct ViewInput(Result<Action, String>);

impl<'de> Deserialize<'de> for ViewInput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if !value.is_object() {
            return Ok(ViewInput(Err(
                "arguments must be an object with an action".into()
            )));
        }
        Ok(ViewInput(match AdbArguments::deserialize(value) {
            Ok(arguments) => actions::parse(&arguments),
            Err(err) => Err(crate::tools::invalid_arguments("adb", &err)),
        }))
    }
}

/// `POST /adb/input`: what the page sends, in the `adb` tool's argument form: `tap`, `swipe`,
/// `long_press`, `key_event` or `input_text`. Coordinates are always device pixels (the frames'
/// `X-Screen-Size`), whatever scale a model's last screenshot set for the tool. While the device shows
/// its debugging-authorization dialog nothing is sent: 409 with the reason (guard.rs).
async fn input(
    State(adb): State<Arc<Adb>>,
    ApiJson(ViewInput(action)): ApiJson<ViewInput>,
) -> ApiResult<axum::Json<Value>> {
    let action = action.map_err(ApiError::BadRequest)?;
    if !matches!(
        action,
        Action::Tap { .. }
            | Action::Swipe { .. }
            | Action::LongPress { .. }
            | Action::Key { .. }
            | Action::Text(_)
    ) {
        return Err(ApiError::BadRequest(
            "the view sends tap, swipe, long_press, key_event or input_text; the other actions are the adb tool's".into(),
        ));
    }
    let done = adb
        .view_input(action)
        .await
        .map_err(|failure| match failure {
            // The device asks whether to trust a host: its state forbids the input, as for the tool.
            InjectError::Guard(refusal) => ApiError::Conflict(refusal.to_string()),
            // The device ran the input and it failed, or refused it: the device's answer was bad.
            InjectError::Failed(reason) | InjectError::Device(DeviceError::Refused(reason)) => {
                ApiError::BadGateway(reason)
            }
            InjectError::Device(err) => err.into(),
        })?;
    Ok(axum::Json(json!({ "done": done })))
}

impl Adb {
    async fn view_input(&self, action: Action) -> Result<String, InjectError> {
        Ok(match action {
            Action::Tap { x, y } => {
                self.inject(&[format!("input tap {x} {y}")], super::COMMAND_TIMEOUT)
                    .await?;
                format!("Tapped at ({x}, {y})")
            }
            Action::Swipe {
                from,
                to,
                duration_ms,
            } => {
                self.swipe(from, to, duration_ms).await?;
                format!(
                    "Swiped from ({}, {}) to ({}, {})",
                    from.0, from.1, to.0, to.1
                )
            }
            Action::LongPress { x, y, duration_ms } => {
                self.swipe((x, y), (x, y), duration_ms).await?;
                format!("Long-pressed at ({x}, {y}) for {duration_ms} ms")
            }
            Action::Key { code, shown } => {
                self.inject(&[format!("input keyevent {code}")], super::COMMAND_TIMEOUT)
                    .await?;
                format!("Sent key event: {shown}")
            }
            Action::Text(typed) => {
                self.type_text(&typed).await?;
                format!("Input text: {typed}")
            }
            // Refused before the call, in `input`.
            _ => {
                return Err(InjectError::Failed("not an action the view sends".into()));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_carries_its_length_and_the_screen_size() {
        let part = part(&Frame {
            png: b"not-really-a-png".to_vec(),
            screen: (1080, 1920),
        });
        assert_eq!(
            &part[..],
            b"--boxd-frame\r\nContent-Type: image/png\r\nContent-Length: 16\r\nX-Screen-Size: 1080x1920\r\n\r\nnot-really-a-png\r\n"
        );
    }
}
