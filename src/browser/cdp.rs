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
/// base64); a longer one ends the connection instead of growing boxd's memory without bound.
pub const MAX_MESSAGE: usize = 96 * 1024 * 1024;
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
}

/// Answers travel to their caller unparsed: the caller's task parses them, and the reader moves on.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Box<RawValue>, String>>>>>;

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
        lock(&self.pending).insert(id, answer_tx);
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
                Ok(Ok(result)) => serde_json::from_str(result.get()).map_err(|err| {
                    CdpError::Protocol(format!("{method}: a malformed answer: {err}"))
                }),
                Ok(Err(message)) => Err(CdpError::Protocol(message)),
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
        let messages: Vec<Vec<u8>> = requests
            .into_iter()
            .map(|(method, params)| {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let message =
                    json!({"id": id, "method": method, "params": params, "sessionId": session});
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
    loop {
        let message = match read_message(&mut reader, MAX_MESSAGE).await {
            Ok(Some(message)) => message,
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
                Some(error) => Err(error
                    .message
                    .unwrap_or_else(|| "unknown protocol error".into())),
                None => Ok(message.result.map_or_else(Box::default, RawValue::to_owned)),
            };
            if let Some(waiter) = lock(pending).remove(&id) {
                let _ = waiter.send(answer);
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

/// One NUL-terminated message, at most `max` bytes; `None` at the end of the stream.
pub(super) async fn read_message(
    reader: &mut (impl AsyncBufRead + Unpin),
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut message = Vec::new();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(None);
        }
        let end = available.iter().position(|byte| *byte == 0);
        let chunk = &available[..end.unwrap_or(available.len())];
        if message.len().saturating_add(chunk.len()) > max {
            return Err(std::io::Error::other(format!(
                "a message longer than {max} bytes"
            )));
        }
        message.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(end.is_some());
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_split_on_nul_and_an_oversized_one_is_refused() {
        let input = b"{\"a\":1}\0{\"b\":2}\0tail".to_vec();
        let mut reader = BufReader::with_capacity(3, &input[..]);
        assert_eq!(
            read_message(&mut reader, 100).await.unwrap().unwrap(),
            b"{\"a\":1}"
        );
        assert_eq!(
            read_message(&mut reader, 100).await.unwrap().unwrap(),
            b"{\"b\":2}"
        );
        // An unterminated tail at the end of the stream is no message.
        assert!(read_message(&mut reader, 100).await.unwrap().is_none());
        let long = [b'x'; 64];
        assert!(read_message(&mut &long[..], 10).await.is_err());
    }

    #[tokio::test]
    async fn answers_reach_their_caller_and_a_closed_browser_fails_pending_calls() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::start(our_read, our_write);
        let (their_read, mut their_write) = tokio::io::split(theirs);
        let browser = tokio::spawn(async move {
            let mut reader = BufReader::new(their_read);
            let request = read_message(&mut reader, 1 << 20).await.unwrap().unwrap();
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
            let _ = read_message(&mut reader, 1 << 20).await;
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
