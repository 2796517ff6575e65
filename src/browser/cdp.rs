//! A small typed client of the Chrome DevTools Protocol over `--remote-debugging-pipe`: requests go out
//! on the browser's fd 3 and answers and events come back on its fd 4, each message a JSON object ended
//! by a NUL byte. A pipe instead of `--remote-debugging-port` means no port any process in the sandbox
//! could connect to and drive the browser, no URL to scrape from stderr, and no WebSocket library.
//!
//! One connection carries every tab: tabs are attached in flattened mode, so each message names its
//! session. Every call is bounded by a timeout; when the browser goes away every pending call fails at
//! once with [`CdpError::Closed`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

use super::events::{self, Events};

/// The largest message accepted from the browser (a full-page PNG of a long page is tens of MB in
/// base64). A longer one is read past without being kept (the connection and the tabs live on): an
/// answer fails its call with [`CdpError::TooLarge`], an event is dropped.
pub const MAX_MESSAGE: usize = 96 * 1024 * 1024;
/// The start of a message read before its bound is decided: enough to hold its id (an answer starts
/// `{"id":N,`); a message no longer than this is never too large.
const PEEK: usize = 4096;
/// The reader's buffer: an accessibility tree or a DOM snapshot (tens of KB) in a few reads.
const READ_BUFFER: usize = 64 * 1024;
/// Requests queued for the writer at most; a caller waits for room (bounded by its own timeout).
const OUTGOING_QUEUE: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("the browser did not answer {0} within {1:?}")]
    Timeout(String, Duration),
    #[error("the browser connection is closed")]
    Closed,
    #[error("{0}")]
    Protocol(String),
    #[error("the browser's answer to {method} is {bytes} bytes, over the {max}-byte bound")]
    TooLarge {
        method: String,
        bytes: usize,
        max: usize,
    },
}

/// Why the reader failed a call.
#[derive(Debug)]
enum Failure {
    /// The browser answered with an error.
    Protocol(String),
    /// The answer was longer than the call's bound (its length); it was read past, not kept.
    TooLarge(usize),
}

/// A call waiting for its answer: where the answer goes, and the longest one it takes.
struct Waiter {
    answer: oneshot::Sender<Result<Box<RawValue>, Failure>>,
    max: usize,
}

/// Answers travel to their caller unparsed: the caller's task parses them, and the reader moves on.
type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

#[derive(Clone)]
pub struct Cdp {
    outgoing: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    closed: watch::Receiver<bool>,
    pub events: Arc<Events>,
}

impl Cdp {
    /// Starts the reader and writer tasks on the browser's two pipe ends.
    pub fn start(
        reader: impl tokio::io::AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Cdp {
        let (outgoing, queue) = mpsc::channel(OUTGOING_QUEUE);
        let pending: Pending = Arc::default();
        let (closed_tx, closed) = watch::channel(false);
        let closed_tx = Arc::new(closed_tx);
        let events = Arc::new(Events::default());
        let next_id = Arc::new(AtomicU64::new(1));
        tokio::spawn(write_all(writer, queue, Arc::clone(&closed_tx)));
        let cdp = Cdp {
            outgoing,
            pending,
            next_id,
            closed,
            events,
        };
        tokio::spawn(read_all(
            BufReader::with_capacity(READ_BUFFER, reader),
            cdp.clone(),
            closed_tx,
        ));
        cdp
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the connection is closed (the browser exited or broke the protocol).
    #[cfg(test)]
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// Sends `method` (to the tab of `session`, or to the browser) and waits up to `timeout` for its
    /// answer.
    pub async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CdpError> {
        self.call_bounded(session, method, params, timeout, MAX_MESSAGE)
            .await
            .map(|(answer, _)| answer)
    }

    /// [`Cdp::call`] for an answer of at most `max` bytes (at least [`PEEK`], at most
    /// [`MAX_MESSAGE`]); a longer one fails with [`CdpError::TooLarge`] without being kept. The
    /// answer and its length in bytes.
    pub async fn call_bounded(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
        max: usize,
    ) -> Result<(Value, usize), CdpError> {
        let (raw, length) = self
            .call_raw_bounded(session, method, params, timeout, max)
            .await?;
        serde_json::from_str(raw.get())
            .map(|answer| (answer, length))
            .map_err(|err| CdpError::Protocol(format!("{method}: a malformed answer: {err}")))
    }

    /// [`Cdp::call_bounded`] with the answer left as the browser wrote it, for a caller that reads
    /// it into its own types (a DOM snapshot is megabytes of numbers: a [`Value`] of it costs more
    /// than the browser's work).
    pub async fn call_raw_bounded(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
        max: usize,
    ) -> Result<(Box<RawValue>, usize), CdpError> {
        let max = max.clamp(PEEK, MAX_MESSAGE);
        if self.is_closed() {
            return Err(CdpError::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        let (answer_tx, answer_rx) = oneshot::channel();
        lock(&self.pending).insert(
            id,
            Waiter {
                answer: answer_tx,
                max,
            },
        );
        // Removed on every way out, so an abandoned call (timeout, caller gone) leaves nothing behind.
        let _forget = Forget {
            pending: &self.pending,
            id,
        };
        let exchange = async {
            self.outgoing
                .send(bytes)
                .await
                .map_err(|_| CdpError::Closed)?;
            match answer_rx.await {
                Ok(Ok(result)) => {
                    let length = result.get().len();
                    Ok((result, length))
                }
                Ok(Err(Failure::Protocol(message))) => Err(CdpError::Protocol(message)),
                Ok(Err(Failure::TooLarge(bytes))) => Err(CdpError::TooLarge {
                    method: method.to_owned(),
                    bytes,
                    max,
                }),
                Err(_) => Err(CdpError::Closed),
            }
        };
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| CdpError::Timeout(method.to_owned(), timeout))?;
        tracing::trace!(
            method,
            elapsed_us = started.elapsed().as_micros() as u64,
            "cdp call"
        );
        answer
    }

    /// Sets up an out-of-process frame's session as it is attached: frames in it are attached too,
    /// and a file chooser it opens is reported. Sent without waiting for the answers (the reader
    /// must not wait on the browser); a failure only leaves that frame's part of the page unseen.
    fn set_up_frame(&self, session: String) {
        let requests = [
            ("Target.setAutoAttach", events::auto_attach()),
            ("Page.enable", json!({})),
            (
                "Page.setInterceptFileChooserDialog",
                json!({"enabled": true}),
            ),
        ];
        self.send_unanswered(Some(&session), requests.into_iter().collect());
    }

    /// Tells the browser to cancel the downloads boxd stopped (past their bounds); not waited for,
    /// as [`Cdp::set_up_frame`]. The partial files are deleted when the answer reports them.
    fn cancel_downloads(&self, guids: Vec<String>) {
        if guids.is_empty() {
            return;
        }
        tracing::info!(?guids, "cancelling downloads past their bounds");
        let requests = guids
            .into_iter()
            .map(|guid| ("Browser.cancelDownload", json!({"guid": guid})))
            .collect();
        self.send_unanswered(None, requests);
    }

    /// Sends `requests` without waiting for their answers (which nobody waits for, so the reader
    /// drops them).
    fn send_unanswered(&self, session: Option<&str>, requests: Vec<(&'static str, Value)>) {
        let messages: Vec<Vec<u8>> = requests
            .into_iter()
            .map(|(method, params)| {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let mut message = json!({"id": id, "method": method, "params": params});
                if let Some(session) = session {
                    message["sessionId"] = json!(session);
                }
                let mut bytes = message.to_string().into_bytes();
                bytes.push(0);
                bytes
            })
            .collect();
        let outgoing = self.outgoing.clone();
        tokio::spawn(async move {
            for bytes in messages {
                if outgoing.send(bytes).await.is_err() {
                    break;
                }
            }
        });
    }
}

struct Forget<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(self.pending).remove(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn write_all(
    mut writer: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Vec<u8>>,
    closed: Arc<watch::Sender<bool>>,
) {
    while let Some(message) = queue.recv().await {
        if writer.write_all(&message).await.is_err() || writer.flush().await.is_err() {
            break;
        }
    }
    let _ = closed.send(true);
}

async fn read_all(
    mut reader: impl AsyncBufRead + Unpin,
    cdp: Cdp,
    closed: Arc<watch::Sender<bool>>,
) {
    let Cdp {
        pending, events, ..
    } = &cdp;
    // The bound of a message is its caller's, found by the id at its start; events and answers
    // nobody waits for get the connection's.
    let bound = |start: &[u8]| {
        answer_id(start)
            .and_then(|id| lock(pending).get(&id).map(|waiter| waiter.max))
            .unwrap_or(MAX_MESSAGE)
    };
    loop {
        let message = match read_message(&mut reader, bound).await {
            Ok(Some(Message::Whole(message))) => message,
            Ok(Some(Message::Skipped { start, length })) => {
                match answer_id(&start).and_then(|id| lock(pending).remove(&id)) {
                    Some(waiter) => {
                        tracing::warn!(length, "an answer over its call's bound was not kept");
                        let _ = waiter.answer.send(Err(Failure::TooLarge(length)));
                    }
                    None => tracing::warn!(length, "a browser message over the bound was dropped"),
                }
                continue;
            }
            Ok(None) => break,
            Err(err) => {
                tracing::warn!("browser protocol stream broken: {err}");
                break;
            }
        };
        let Ok(message) = serde_json::from_slice::<Incoming>(&message) else {
            tracing::warn!("the browser sent a message that is not JSON; ignored");
            continue;
        };
        if let Some(id) = message.id {
            let answer = match message.error {
                Some(error) => Err(Failure::Protocol(
                    error
                        .message
                        .unwrap_or_else(|| "unknown protocol error".into()),
                )),
                None => Ok(message.result.map_or_else(Box::default, RawValue::to_owned)),
            };
            if let Some(waiter) = lock(pending).remove(&id) {
                let _ = waiter.answer.send(answer);
            }
        } else if let Some(method) = message.method.as_deref()
            && events::HANDLED.contains(&method)
        {
            // Events nothing keeps (most of what the browser says) are not parsed further.
            let params = message
                .params
                .and_then(|params| serde_json::from_str(params.get()).ok())
                .unwrap_or(Value::Null);
            if let Some(frame) = events.handle(message.session.as_deref(), method, &params) {
                cdp.set_up_frame(frame);
            }
            if method.starts_with("Browser.download") {
                cdp.cancel_downloads(events.take_cancels());
            }
        }
    }
    let _ = closed.send(true);
    // Waiters see their sender dropped: `Closed`.
    lock(pending).clear();
    events.closed();
}

/// A message from the browser, its parts left unparsed until someone needs them.
#[derive(Deserialize)]
struct Incoming<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<ProtocolError>,
}

#[derive(Deserialize)]
struct ProtocolError {
    message: Option<String>,
}

/// A message read from the browser.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Message {
    Whole(Vec<u8>),
    /// Longer than its bound: read past, only its first [`PEEK`] bytes kept, with its whole length.
    Skipped {
        start: Vec<u8>,
        length: usize,
    },
}

/// The id of an answer, from the start of its message (`{"id":12,...`); `None` for an event (which
/// starts with its method) or anything else.
fn answer_id(start: &[u8]) -> Option<u64> {
    let at = start.windows(5).position(|window| window == b"\"id\":")?;
    // An event's params may hold an `"id":` of their own; its method comes first.
    if start[..at].windows(8).any(|window| window == b"\"method\"") {
        return None;
    }
    let digits = start.get(at + 5..)?;
    let end = digits
        .iter()
        .position(|byte| !byte.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(digits.get(..end)?).ok()?.parse().ok()
}

/// One NUL-terminated message; `None` at the end of the stream. `bound` tells, from a message's first
/// [`PEEK`] bytes, how long it may be (at most [`MAX_MESSAGE`]): a longer one is read to its end
/// without being kept ([`Message::Skipped`]), so memory stays bounded and the stream stays in step.
pub(super) async fn read_message(
    reader: &mut (impl AsyncBufRead + Unpin),
    bound: impl Fn(&[u8]) -> usize,
) -> std::io::Result<Option<Message>> {
    let mut message = Vec::new();
    let mut max: Option<usize> = None;
    // The bytes of a message being skipped, seen so far.
    let mut skipped: Option<usize> = None;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(None);
        }
        let end = available.iter().position(|byte| *byte == 0);
        let chunk = &available[..end.unwrap_or(available.len())];
        let used = chunk.len() + usize::from(end.is_some());
        let length = skipped.unwrap_or(message.len()).saturating_add(chunk.len());
        if skipped.is_none() && max.is_none() && length > PEEK {
            let room = PEEK.saturating_sub(message.len()).min(chunk.len());
            message.extend_from_slice(&chunk[..room]);
            max = Some(bound(&message).min(MAX_MESSAGE));
            if max.is_some_and(|max| length > max) {
                skipped = Some(length);
            } else {
                message.extend_from_slice(&chunk[room..]);
            }
        } else if skipped.is_some() {
            skipped = Some(length);
        } else if max.is_some_and(|max| length > max) {
            message.truncate(PEEK);
            skipped = Some(length);
        } else {
            message.extend_from_slice(chunk);
        }
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(match skipped {
                Some(length) => Message::Skipped {
                    start: message,
                    length,
                },
                None => Message::Whole(message),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_split_on_nul_and_an_oversized_one_is_skipped_in_step() {
        let whole = |bytes: &[u8]| Some(Message::Whole(bytes.to_vec()));
        let input = b"{\"a\":1}\0{\"b\":2}\0tail".to_vec();
        let mut reader = BufReader::with_capacity(3, &input[..]);
        let any = |_: &[u8]| MAX_MESSAGE;
        assert_eq!(
            read_message(&mut reader, any).await.unwrap(),
            whole(b"{\"a\":1}")
        );
        assert_eq!(
            read_message(&mut reader, any).await.unwrap(),
            whole(b"{\"b\":2}")
        );
        // An unterminated tail at the end of the stream is no message.
        assert!(read_message(&mut reader, any).await.unwrap().is_none());
        // An answer longer than its bound is read past; the next message is read whole.
        let long = format!("{{\"id\":7,\"result\":\"{}\"}}", "x".repeat(3 * PEEK));
        let input = format!("{long}\0{{\"id\":8}}\0");
        let mut reader = BufReader::with_capacity(1000, input.as_bytes());
        let small = |start: &[u8]| {
            assert_eq!(answer_id(start), Some(7));
            PEEK * 2
        };
        match read_message(&mut reader, small).await.unwrap() {
            Some(Message::Skipped { start, length }) => {
                assert_eq!(length, long.len());
                assert_eq!(start, long.as_bytes()[..PEEK]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read_message(&mut reader, |_: &[u8]| PEEK).await.unwrap(),
            whole(b"{\"id\":8}")
        );
        assert_eq!(answer_id(b"{\"method\":\"X\",\"params\":{\"id\":3}}"), None);
        assert_eq!(answer_id(b"{\"id\":42,\"result\":{}}"), Some(42));
    }

    #[tokio::test]
    async fn an_answer_over_its_calls_bound_fails_that_call_and_the_connection_lives_on() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::start(our_read, our_write);
        let (their_read, mut their_write) = tokio::io::split(theirs);
        // The browser stays until the test is done looking at the connection.
        let (done, finished) = oneshot::channel::<()>();
        let browser = tokio::spawn(async move {
            let mut reader = BufReader::new(their_read);
            for size in [PEEK * 4, 10] {
                let Ok(Some(Message::Whole(request))) =
                    read_message(&mut reader, |_: &[u8]| MAX_MESSAGE).await
                else {
                    return;
                };
                let request: Value = serde_json::from_slice(&request).unwrap();
                let answer = json!({"id": request["id"], "result": {"data": "y".repeat(size)}});
                their_write
                    .write_all(format!("{answer}\0").as_bytes())
                    .await
                    .unwrap();
            }
            let _ = finished.await;
        });
        let limit = PEEK * 2;
        let huge = cdp
            .call_bounded(None, "Big", json!({}), Duration::from_secs(5), limit)
            .await;
        assert!(
            matches!(&huge, Err(CdpError::TooLarge { method, bytes, max })
                if method == "Big" && *bytes > PEEK * 4 && *max == limit),
            "{huge:?}"
        );
        let (small, length) = cdp
            .call_bounded(None, "Small", json!({}), Duration::from_secs(5), limit)
            .await
            .unwrap();
        assert_eq!(small["data"], "y".repeat(10));
        assert!(length > 10);
        assert!(!cdp.is_closed());
        let _ = done.send(());
        browser.await.unwrap();
    }

    #[tokio::test]
    async fn answers_reach_their_caller_and_a_closed_browser_fails_pending_calls() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::start(our_read, our_write);
        let (their_read, mut their_write) = tokio::io::split(theirs);
        let browser = tokio::spawn(async move {
            let mut reader = BufReader::new(their_read);
            let Some(Message::Whole(request)) =
                read_message(&mut reader, |_: &[u8]| 1 << 20).await.unwrap()
            else {
                panic!("no request");
            };
            let request: Value = serde_json::from_slice(&request).unwrap();
            let answer = json!({"id": request["id"], "result": {"echo": request["method"]}});
            let event = json!({"method": "Page.loadEventFired", "sessionId": "S", "params": {}});
            for message in [event, answer] {
                their_write
                    .write_all(format!("{message}\0").as_bytes())
                    .await
                    .unwrap();
            }
            // The second request is never answered: the browser goes away instead.
            let _ = read_message(&mut reader, |_: &[u8]| 1 << 20).await;
        });
        let answer = cdp
            .call(Some("S"), "Page.enable", json!({}), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(answer["echo"], "Page.enable");
        let late = cdp
            .call(
                None,
                "Browser.getVersion",
                json!({}),
                Duration::from_secs(5),
            )
            .await;
        browser.await.unwrap();
        assert!(matches!(late, Err(CdpError::Closed)), "{late:?}");
        assert!(cdp.is_closed());
        let timed = Cdp::start(tokio::io::empty(), tokio::io::sink());
        // An empty stream is a closed browser at once; no call waits for its timeout.
        timed.closed().await;
        assert!(matches!(
            timed
                .call(None, "X", json!({}), Duration::from_millis(50))
                .await,
            Err(CdpError::Closed)
        ));
    }
}
