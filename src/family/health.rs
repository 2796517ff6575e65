//! A family's readiness, as `/readyz` shows it and as the registry checks it before every call.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::ApiError;

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
#[derive(Clone)]
pub struct Health {
    state: Arc<Mutex<Snapshot>>,
    changes: watch::Sender<Status>,
}

/// How long a call to a starting family waits for it before answering 503.
const WAIT_FOR_START: Duration = Duration::from_secs(30);

impl Health {
    pub fn new(status: Status) -> Health {
        Health {
            state: Arc::new(Mutex::new(Snapshot {
                status,
                reason: None,
                restarts: 0,
                last_exit: None,
                since_ms: now_ms(),
            })),
            changes: watch::channel(status).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, status: Status, reason: Option<String>) {
        {
            let mut state = self.lock();
            if state.status == status && state.reason == reason {
                return;
            }
            state.status = status;
            state.reason = reason;
            state.since_ms = now_ms();
        }
        self.changes.send_replace(status);
    }

    pub fn ready(&self) {
        self.set(Status::Ready, None);
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
        let mut state = self.lock();
        state.restarts = state.restarts.saturating_add(1);
        state.last_exit = Some(last_exit.into());
    }

    pub fn snapshot(&self) -> Snapshot {
        self.lock().clone()
    }

    pub fn status(&self) -> Status {
        self.lock().status
    }

    /// Ok when the family serves; while it starts, waits for it (bounded); else a 503 with the reason.
    pub async fn admit(&self, family: &str) -> Result<(), ApiError> {
        let mut changes = self.changes.subscribe();
        let waited = tokio::time::timeout(
            WAIT_FOR_START,
            changes.wait_for(|status| *status != Status::Starting),
        )
        .await;
        drop(waited);
        let state = self.snapshot();
        if state.status.serves() {
            return Ok(());
        }
        let retry_after = match state.status {
            Status::Starting => 5,
            Status::Failed => 10,
            _ => 30,
        };
        let reason = state.reason.unwrap_or_else(|| "not ready".into());
        Err(ApiError::Unavailable {
            message: format!(
                "the {family} tools are {}: {reason}",
                serde_json::to_value(state.status)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
            retry_after_seconds: retry_after,
        })
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.snapshot()).unwrap_or_else(|_| json!({}))
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
        let health = Health::new(Status::Starting);
        health.failed("IPython is not installed for python3");
        let err = health.admit("ipython").await.unwrap_err();
        assert_eq!(err.status().as_u16(), 503);
        assert!(err.to_string().contains("IPython is not installed"));
    }

    #[tokio::test]
    async fn a_call_waits_for_a_starting_family() {
        let health = Health::new(Status::Starting);
        let later = health.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            later.ready();
        });
        assert!(health.admit("x").await.is_ok());
    }
}
