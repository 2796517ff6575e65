//! Frames paced by boxd in the headless shell. Left to itself, headless Chromium draws on a 60 Hz clock
//! of its own, and a screenshot waits for two or three of its ticks (33-50 ms) before the capture even
//! starts. Started with `--enable-begin-frame-control`, the shell draws a tab only when told to
//! (`HeadlessExperimental.beginFrame`): boxd then sends the ticks itself, at 60 Hz while the page is
//! lively, and a screenshot is taken from a frame drawn at once for it (~11 ms on this machine).
//!
//! A pump per tab sends the ticks. It runs at [`FRAME`] while a tool call is under way, for
//! [`LIVELY_AFTER_CALL`] after one, and for [`LIVELY_AFTER_DAMAGE`] after a frame that changed
//! something on screen (an animation keeps it at full rate); otherwise at [`IDLE_FRAME`], so an idle
//! page costs a few wake-ups a second instead of sixty. Only `requestAnimationFrame` work and painting
//! slow down while idle: timers, network and the DOM run as always, and a snapshot or screenshot never
//! waits for a tick.
//!
//! A dialog (`alert`, `confirm`, ...) blocks its tab's renderer, and a frame sent to it then waits for
//! the dialog to close: no frame is sent to a tab showing one, and a frame in flight when one opens is
//! given up, so the other tabs keep being drawn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::cdp::{Cdp, CdpError};

/// The tick while the page is lively: Chromium's own rate.
pub const FRAME: Duration = Duration::from_micros(16_667);
/// The tick of an idle page.
pub const IDLE_FRAME: Duration = Duration::from_millis(250);
/// Full rate this long after a tool call ended.
pub const LIVELY_AFTER_CALL: Duration = Duration::from_secs(2);
/// Full rate this long after a frame with damage.
pub const LIVELY_AFTER_DAMAGE: Duration = Duration::from_secs(1);
/// One frame's bound; a renderer stuck in a script holds its frame until then.
const FRAME_CALL: Duration = Duration::from_secs(10);
/// A screenshot frame's bound (a huge page takes long to encode).
const SHOT_CALL: Duration = Duration::from_secs(30);

/// The browser's tool activity, shared by every tab's pump: calls in progress and when the last
/// one ended.
#[derive(Clone)]
pub struct Pacer {
    calls: Arc<AtomicUsize>,
    /// Held while a frame is drawn: two frames in flight at once, even of two tabs, make the shell's
    /// GPU process fail ("overlapping IssueExternalBeginFrame") until the browser gives up.
    drawing: Arc<tokio::sync::Mutex<()>>,
    /// Bumped when a call starts or ends, waking idle pumps at once.
    activity: Arc<watch::Sender<Instant>>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            calls: Arc::default(),
            drawing: Arc::default(),
            activity: Arc::new(watch::channel(Instant::now()).0),
        }
    }
}

/// Held for the length of a tool call.
pub struct ActiveCall(Pacer);

impl Drop for ActiveCall {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::Relaxed);
        self.0.activity.send_replace(Instant::now());
    }
}

impl Pacer {
    pub fn call(&self) -> ActiveCall {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.activity.send_replace(Instant::now());
        ActiveCall(self.clone())
    }

    fn lively(&self, last_damage: Instant) -> bool {
        self.calls.load(Ordering::Relaxed) > 0
            || self.activity.borrow().elapsed() < LIVELY_AFTER_CALL
            || last_damage.elapsed() < LIVELY_AFTER_DAMAGE
    }
}

struct ShotRequest {
    params: Value,
    answer: oneshot::Sender<Result<Value, CdpError>>,
}

/// The pump of one tab; dropping it stops the pump.
pub struct FramePump {
    camera: Camera,
    task: tokio::task::JoinHandle<()>,
}

/// Asks a tab's pump for a screenshot; fails with `Closed` once the pump is gone.
#[derive(Clone)]
pub struct Camera {
    requests: mpsc::Sender<ShotRequest>,
}

impl Drop for FramePump {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FramePump {
    /// A pump for the tab of `session`. Its first frame finds out whether the browser lets boxd pace
    /// the tab; the tab is usable meanwhile (the probe is not waited for: it costs a frame, ~13 ms,
    /// at the start of a browser's first call). When the browser paces the tab itself, the pump only
    /// answers screenshot requests with no frame, and the caller captures the ordinary way.
    pub fn start(cdp: &Cdp, session: &str, pacer: &Pacer) -> Self {
        let (requests, queue) = mpsc::channel(4);
        let task = tokio::spawn(pump(cdp.clone(), session.to_owned(), pacer.clone(), queue));
        FramePump {
            camera: Camera { requests },
            task,
        }
    }

    pub fn camera(&self) -> Camera {
        self.camera.clone()
    }
}

impl Camera {
    /// A screenshot of a frame drawn now (`params`: `Page.captureScreenshot`'s format, quality and
    /// `optimizeForSpeed`), as `{"data": base64}`; `None` when the frame had none to give (a renderer
    /// still starting, or a tab the browser paces itself), and the caller captures the ordinary way.
    pub async fn screenshot(&self, params: Value) -> Result<Option<Value>, CdpError> {
        let (answer, answered) = oneshot::channel();
        self.requests
            .send(ShotRequest { params, answer })
            .await
            .map_err(|_| CdpError::Closed)?;
        let frame = answered.await.map_err(|_| CdpError::Closed)??;
        Ok(frame
            .get("screenshotData")
            .and_then(Value::as_str)
            .map(|data| json!({"data": data})))
    }
}

/// A frame of the tab, unless it shows a dialog or one opens before the frame is drawn (`None`).
async fn frame_unless_dialog(
    cdp: &Cdp,
    pacer: &Pacer,
    session: &str,
    params: Value,
    timeout: Duration,
) -> Option<Result<Value, CdpError>> {
    let mut changes = cdp.events.subscribe();
    if cdp.events.dialog_open(session) {
        return None;
    }
    let dialog = async {
        loop {
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if cdp.events.dialog_open(session) {
                return;
            }
        }
    };
    tokio::select! {
        frame = begin_frame(cdp, pacer, session, params, timeout) => Some(frame),
        () = dialog => None,
    }
}

async fn begin_frame(
    cdp: &Cdp,
    pacer: &Pacer,
    session: &str,
    params: Value,
    timeout: Duration,
) -> Result<Value, CdpError> {
    let _drawing = pacer.drawing.lock().await;
    cdp.call(
        Some(session),
        "HeadlessExperimental.beginFrame",
        params,
        timeout,
    )
    .await
}

async fn pump(cdp: Cdp, session: String, pacer: Pacer, mut queue: mpsc::Receiver<ShotRequest>) {
    match frame_unless_dialog(&cdp, &pacer, &session, json!({}), FRAME_CALL).await {
        // A page showing a dialog as it opens is the shell's, so boxd's to draw; a renderer stuck at
        // the probe is drawn at the pace below once it is free again.
        Some(Ok(_)) | Some(Err(CdpError::Timeout(..))) | None => {}
        Some(Err(CdpError::Protocol(message))) => {
            tracing::debug!("the browser paces the tab {session} itself: {message}");
            while let Some(request) = queue.recv().await {
                let _ = request.answer.send(Ok(Value::Null));
            }
            return;
        }
        Some(Err(_)) => return,
    }
    let mut activity = pacer.activity.subscribe();
    let mut last_damage = Instant::now();
    // When the last frame was due: ticks are counted from there, not from when the timer fired, so
    // the timer's millisecond rounding does not slow the rate (a frame late by more than a tick is
    // not caught up).
    let mut last_due = Instant::now();
    loop {
        let tick = if pacer.lively(last_damage) {
            FRAME
        } else {
            IDLE_FRAME
        };
        let request = tokio::select! {
            request = queue.recv() => match request {
                Some(request) => Some(request),
                None => return,
            },
            _ = tokio::time::sleep_until(last_due + tick) => None,
            // A call started or ended: the tick is worked out again.
            changed = activity.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        let now = Instant::now();
        let due = last_due + tick;
        last_due = if request.is_some() || now.saturating_duration_since(due) > tick {
            now
        } else {
            due
        };
        let (params, timeout) = match &request {
            Some(request) => (json!({"screenshot": request.params}), SHOT_CALL),
            None => (json!({}), FRAME_CALL),
        };
        let Some(frame) = frame_unless_dialog(&cdp, &pacer, &session, params, timeout).await else {
            if let Some(request) = request {
                let _ = request.answer.send(Err(CdpError::Protocol(
                    "the page shows a dialog; answer it first".into(),
                )));
            }
            continue;
        };
        if let Ok(frame) = &frame
            && frame.get("hasDamage").and_then(Value::as_bool) == Some(true)
        {
            last_damage = Instant::now();
        }
        let gone = match &frame {
            Err(CdpError::Closed) => true,
            // The tab was closed or its session detached: nothing is left to draw.
            Err(CdpError::Protocol(message)) => {
                tracing::debug!("frame pump of {session}: {message}");
                let message = message.to_ascii_lowercase();
                message.contains("session") || message.contains("target")
            }
            _ => false,
        };
        if let Some(request) = request {
            let _ = request.answer.send(frame);
        }
        if gone || cdp.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tokio::io::{AsyncWriteExt, BufReader};

    /// A browser at the other end of a pipe: each request is answered by `respond`, in a task of its
    /// own (so slow answers overlap, as a real browser's can), with the message it returns, if any.
    fn fake_browser<F, Answer>(respond: F) -> Cdp
    where
        F: Fn(Value) -> Answer + Send + Sync + 'static,
        Answer: std::future::Future<Output = Option<Value>> + Send + 'static,
    {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::start(our_read, our_write);
        tokio::spawn(async move {
            let (their_read, their_write) = tokio::io::split(theirs);
            let writer = Arc::new(tokio::sync::Mutex::new(their_write));
            let mut reader = BufReader::new(their_read);
            while let Ok(Some(super::super::cdp::Message::Whole(request))) =
                super::super::cdp::read_message(&mut reader, |_: &[u8]| 1 << 20).await
            {
                let request: Value = serde_json::from_slice(&request).unwrap();
                let answer = respond(request);
                let writer = Arc::clone(&writer);
                tokio::spawn(async move {
                    if let Some(message) = answer.await {
                        let line = format!("{message}\0");
                        let _ = writer.lock().await.write_all(line.as_bytes()).await;
                    }
                });
            }
        });
        cdp
    }

    /// A browser that answers every frame at once (with damage when `damage` says so, with image data
    /// when a screenshot was asked for), or refuses frames when `paces_itself`; the frames it drew.
    fn browser(damage: bool, paces_itself: bool) -> (Cdp, Arc<Mutex<Vec<Value>>>) {
        let frames = Arc::new(Mutex::new(Vec::new()));
        let drawn = Arc::clone(&frames);
        let cdp = fake_browser(move |request| {
            drawn.lock().unwrap().push(request["params"].clone());
            let answer = if paces_itself {
                json!({"id": request["id"], "error": {"message": "Command is only supported if BeginFrameControl is enabled."}})
            } else if request["params"].get("screenshot").is_some() {
                json!({"id": request["id"], "result": {"hasDamage": true, "screenshotData": "QUJD"}})
            } else {
                json!({"id": request["id"], "result": {"hasDamage": damage}})
            };
            std::future::ready(Some(answer))
        });
        (cdp, frames)
    }

    fn count(frames: &Arc<Mutex<Vec<Value>>>) -> usize {
        frames.lock().unwrap().len()
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_page_is_drawn_four_times_a_second_and_a_call_brings_back_full_rate() {
        let (cdp, frames) = browser(false, false);
        let pacer = Pacer::default();
        let _pump = FramePump::start(&cdp, "S", &pacer);
        // Lively for 2 s after the last activity (the pacer's creation), then idle.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = count(&frames);
        assert!((140..=165).contains(&idle), "{idle} frames in 10 s");
        let call = pacer.call();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let during = count(&frames) - idle;
        assert!(
            (57..=62).contains(&during),
            "{during} frames in 1 s of a call"
        );
        drop(call);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = count(&frames) - idle - during;
        // 2 s at full rate after the call ended, then 3 s idle.
        assert!(
            (125..=140).contains(&after),
            "{after} frames in 5 s after the call"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn frames_with_damage_keep_the_full_rate() {
        let (cdp, frames) = browser(true, false);
        let pacer = Pacer::default();
        let _pump = FramePump::start(&cdp, "S", &pacer);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let drawn = count(&frames);
        assert!((595..=605).contains(&drawn), "{drawn} frames in 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_screenshot_is_a_frame_drawn_for_it_and_a_self_paced_tab_gets_no_pump() {
        let (cdp, frames) = browser(false, false);
        let pacer = Pacer::default();
        let pump = FramePump::start(&cdp, "S", &pacer);
        let params = json!({"format": "jpeg", "quality": 50});
        let shot = pump.camera().screenshot(params.clone()).await.unwrap();
        assert_eq!(shot, Some(json!({"data": "QUJD"})));
        assert!(
            frames
                .lock()
                .unwrap()
                .iter()
                .any(|frame| frame["screenshot"] == params)
        );
        drop(pump);

        let (cdp, frames) = browser(false, true);
        let pump = FramePump::start(&cdp, "S", &pacer);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(count(&frames), 1, "only the probe");
        let shot = pump.camera().screenshot(params).await.unwrap();
        assert_eq!(shot, None, "the caller captures the ordinary way");
        assert_eq!(count(&frames), 1, "no frame for the screenshot either");
    }

    #[tokio::test(start_paused = true)]
    async fn two_tabs_never_have_frames_in_flight_at_once() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let drawn = Arc::new(AtomicUsize::new(0));
        let (flight, peak, count) = (in_flight.clone(), most.clone(), drawn.clone());
        // Each frame takes 5 ms to draw, so overlapping requests would overlap here too.
        let cdp = fake_browser(move |request| {
            let now = flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let (flight, count) = (flight.clone(), count.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                flight.fetch_sub(1, Ordering::SeqCst);
                count.fetch_add(1, Ordering::SeqCst);
                Some(json!({"id": request["id"], "result": {"hasDamage": true}}))
            }
        });
        let pacer = Pacer::default();
        let first = FramePump::start(&cdp, "A", &pacer);
        let second = FramePump::start(&cdp, "B", &pacer);
        let camera = first.camera();
        let shots = futures_util::future::join_all(
            (0..5).map(|_| camera.screenshot(json!({"format": "png"}))),
        );
        let (_, ()) = tokio::join!(shots, tokio::time::sleep(Duration::from_secs(2)));
        assert_eq!(most.load(Ordering::SeqCst), 1);
        // Both tabs were drawn at about 60 Hz each all along.
        assert!(drawn.load(Ordering::SeqCst) >= 200, "{drawn:?}");
        drop((first, second));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tab_showing_a_dialog_gets_no_frames_and_does_not_hold_up_the_others() {
        let drawn: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let seen = Arc::clone(&drawn);
        let cdp = fake_browser(move |request| {
            let session = request["sessionId"].as_str().unwrap_or_default().to_owned();
            let count = {
                let mut drawn = seen.lock().unwrap();
                let count = drawn.entry(session.clone()).or_default();
                *count += 1;
                *count
            };
            // Tab A's page opens an alert during its tenth frame, which then never completes (its
            // renderer waits for the dialog).
            std::future::ready(Some(if session == "A" && count == 10 {
                json!({"method": "Page.javascriptDialogOpening", "sessionId": "A",
                       "params": {"type": "alert", "message": "hi"}})
            } else {
                json!({"id": request["id"], "result": {"hasDamage": true}})
            }))
        });
        let pacer = Pacer::default();
        let a = FramePump::start(&cdp, "A", &pacer);
        let b = FramePump::start(&cdp, "B", &pacer);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let counts = drawn.lock().unwrap().clone();
        assert_eq!(counts.get("A"), Some(&10), "{counts:?}");
        assert!(counts.get("B").is_some_and(|b| *b >= 110), "{counts:?}");
        let refused = a.camera().screenshot(json!({"format": "png"})).await;
        assert!(matches!(refused, Err(CdpError::Protocol(_))), "{refused:?}");
        drop((a, b));
    }
}
