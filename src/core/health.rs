//! A family's readiness, as `/readyz` shows it and as the registry checks it before every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::core::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Not in `--tools`: its tools and routes are absent.
    Disabled,
    /// Starting (a child warming up); calls wait a little, then answer 503.
    Starting,
    Ready,
    /// Serving, with something wrong worth showing (e.g. one hosted server of several failed).
    Degraded,
    /// Its start failed; calls answer 503 with the reason until a restart succeeds.
    Failed,
    /// Stopped for good (shutting down).
    Unavailable,
}

impl Status {
    pub fn serves(self) -> bool {
        matches!(self, Status::Ready | Status::Degraded)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Disabled => "disabled",
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Degraded => "degraded",
            Status::Failed => "failed",
            Status::Unavailable => "unavailable",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub restarts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    /// Unix milliseconds of the last change.
    pub since_ms: u64,
}

/// Shared between a family (which sets it) and its tools and routes (which check it). Cheap to clone.
/// The watch channel is the one copy of the state: readers see it, waiters are woken by it.
#[derive(Clone)]
pub struct Health {
    family: &'static str,
    state: Arc<watch::Sender<Snapshot>>,
    /// Calls waiting in `admit` for the family to start.
    waiting: Arc<AtomicUsize>,
}

/// How long a call to a starting family waits for it before answering 503.
pub const WAIT_FOR_START: Duration = Duration::from_secs(30);

impl Health {
    pub fn new(family: &'static str, status: Status) -> Health {
        let (state, _) = watch::channel(Snapshot {
            status,
            reason: None,
            restarts: 0,
            last_exit: None,
            since_ms: now_ms(),
        });
        Health {
            family,
            state: Arc::new(state),
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Changes the status; every change is logged here, once, with the family and the reason.
    fn set(&self, status: Status, reason: Option<String>) {
        let changed = self.state.send_if_modified(|state| {
            if state.status == status && state.reason == reason {
                return false;
            }
            state.status = status;
            state.reason = reason.clone();
            state.since_ms = now_ms();
            true
        });
        if changed {
            let reason = reason.as_deref().unwrap_or("");
            match status {
                Status::Failed | Status::Degraded => {
                    tracing::warn!(
                        family = self.family,
                        status = status.as_str(),
                        reason,
                        "family state"
                    )
                }
                _ => tracing::info!(
                    family = self.family,
                    status = status.as_str(),
                    reason,
                    "family state"
                ),
            }
        }
    }

    pub fn ready(&self) {
        self.set(Status::Ready, None);
    }

    /// Ready, with what it serves (a device's serial and state) shown as the reason in `/readyz`.
    pub fn ready_with(&self, detail: impl Into<String>) {
        self.set(Status::Ready, Some(detail.into()));
    }

    pub fn starting(&self, reason: impl Into<String>) {
        self.set(Status::Starting, Some(reason.into()));
    }

    pub fn degraded(&self, reason: impl Into<String>) {
        self.set(Status::Degraded, Some(reason.into()));
    }

    pub fn failed(&self, reason: impl Into<String>) {
        self.set(Status::Failed, Some(reason.into()));
    }

    pub fn unavailable(&self, reason: impl Into<String>) {
        self.set(Status::Unavailable, Some(reason.into()));
    }

    /// Counts a restart of the family's child and why the previous one ended.
    pub fn restarted(&self, last_exit: impl Into<String>) {
        let last_exit = last_exit.into();
        self.state.send_modify(|state| {
            state.restarts = state.restarts.saturating_add(1);
            state.last_exit = Some(last_exit);
        });
    }

    pub fn status(&self) -> Status {
        self.state.borrow().status
    }

    /// Calls waiting in `admit` for the family to start; each is queued once it is ready. A family with
    /// work to finish after it starts (the IPython kernel's) does it at once only when none waits.
    pub fn waiting_calls(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Ok when the family serves (the common case: one read, no waiting); while it starts, waits for
    /// it (bounded); else a 503 with the reason.
    pub async fn admit(&self) -> Result<(), ApiError> {
        if self.status().serves() {
            return Ok(());
        }
        // The family may not have been started yet: its start waits for the first answer, and this
        // call may be it.
        super::start_gate::open();
        let _waiting = WaitingCall::enter(&self.waiting);
        let mut changes = self.state.subscribe();
        // Timing out leaves the family starting: answered below like any other state that does not serve.
        let _ = tokio::time::timeout(
            WAIT_FOR_START,
            changes.wait_for(|state| state.status != Status::Starting),
        )
        .await;
        let (status, reason) = {
            let state = self.state.borrow();
            (state.status, state.reason.clone())
        };
        if status.serves() {
            return Ok(());
        }
        let retry_after_seconds = match status {
            Status::Starting => 5,
            Status::Failed => 10,
            _ => 30,
        };
        Err(ApiError::Unavailable {
            message: format!(
                "{} tools unavailable ({}): {}",
                self.family,
                status.as_str(),
                reason.as_deref().unwrap_or("not ready")
            ),
            retry_after_seconds,
        })
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(&*self.state.borrow()).unwrap_or_else(|_| json!({}))
    }
}

/// One call counted in `Health::waiting_calls` while it lives.
struct WaitingCall<'a>(&'a AtomicUsize);

impl<'a> WaitingCall<'a> {
    fn enter(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        WaitingCall(waiting)
    }
}

impl Drop for WaitingCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_family_answers_503_with_its_reason() {
        let health = Health::new("ipython", Status::Starting);
        health.failed("IPython is not installed for python3");
        let err = health.admit().await.unwrap_err();
        assert_eq!(err.status().as_u16(), 503);
        assert!(err.to_string().contains("IPython is not installed"));
    }

    #[tokio::test]
    async fn a_call_waits_for_a_starting_family() {
        let health = Health::new("x", Status::Starting);
        let later = health.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            later.ready();
        });
        assert!(health.admit().await.is_ok());
    }

    #[tokio::test]
    async fn calls_waiting_for_a_start_are_counted_until_it_ends() {
        let health = Health::new("x", Status::Starting);
        let waiter = tokio::spawn({
            let health = health.clone();
            async move { health.admit().await }
        });
        for _ in 0..1000 {
            if health.waiting_calls() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(health.waiting_calls(), 1);
        health.ready();
        assert!(waiter.await.expect("the call ends").is_ok());
        assert_eq!(health.waiting_calls(), 0);
        assert!(health.admit().await.is_ok());
        assert_eq!(health.waiting_calls(), 0);
    }
}
