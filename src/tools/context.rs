//! What every tool call carries besides its arguments: who asked (request id, session), how to stop
//! it (a cancellation token and an optional deadline), and where its progress goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::core::deadline::Deadline;

/// Progress events buffered for one streaming call before newer ones are dropped.
pub const PROGRESS_CAPACITY: usize = 64;

#[derive(Clone, Default)]
pub struct CallContext {
    /// The request's id (`x-request-id`, or one boxd made), also on every log line of the call.
    pub request_id: String,
    /// `x-agentscope-runtime-session-id`, when the caller sent one.
    pub session: Option<String>,
    /// Cancelled when the caller goes away (an HTTP disconnect, an MCP cancellation): work a tool
    /// started outside its own future (a queued cell, a child) must stop then.
    pub cancel: CancellationToken,
    /// The caller's own deadline, if it has one; the call answers 504 once it passes.
    pub deadline: Option<Deadline>,
    /// Streaming calls only: where output goes as it happens.
    pub progress: Option<ProgressSink>,
}

impl CallContext {
    pub fn new(request_id: impl Into<String>, session: Option<String>) -> CallContext {
        CallContext {
            request_id: request_id.into(),
            session,
            ..CallContext::default()
        }
    }

    pub fn with_progress(mut self, progress: ProgressSink) -> CallContext {
        self.progress = Some(progress);
        self
    }
}

/// The one policy for every progress stream: bounded and lossy, never blocking the producer. A reader
/// that falls behind loses events, and the next event it does get is preceded by
/// `{"type":"dropped","events":N}`; the call's final result is complete either way. So a slow or
/// stalled client can never hold a shell command, or the one IPython kernel everyone shares.
#[derive(Clone)]
pub struct ProgressSink {
    events: mpsc::Sender<Value>,
    dropped: Arc<AtomicU64>,
}

impl ProgressSink {
    pub fn channel(capacity: usize) -> (ProgressSink, mpsc::Receiver<Value>) {
        let (events, receiver) = mpsc::channel(capacity.max(2));
        let sink = ProgressSink {
            events,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        (sink, receiver)
    }

    pub fn send(&self, event: Value) {
        let missed = self.dropped.swap(0, Ordering::AcqRel);
        if missed > 0
            && self
                .events
                .try_send(json!({"type": "dropped", "events": missed}))
                .is_err()
        {
            self.dropped
                .fetch_add(missed.saturating_add(1), Ordering::AcqRel);
            return;
        }
        if self.events.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_stream_drops_events_and_says_how_many() {
        let (sink, mut receiver) = ProgressSink::channel(2);
        for n in 0..10 {
            sink.send(json!({"type": "output", "n": n}));
        }
        assert_eq!(
            receiver.try_recv().ok(),
            Some(json!({"type": "output", "n": 0}))
        );
        assert_eq!(
            receiver.try_recv().ok(),
            Some(json!({"type": "output", "n": 1}))
        );
        assert!(receiver.try_recv().is_err());
        sink.send(json!({"type": "output", "n": 10}));
        assert_eq!(
            receiver.try_recv().ok(),
            Some(json!({"type": "dropped", "events": 8}))
        );
        assert_eq!(
            receiver.try_recv().ok(),
            Some(json!({"type": "output", "n": 10}))
        );
    }
}
