//! A concurrency cap for work that must wait its turn: at most `limit` at once, a caller waits for a
//! place at most `max_wait`, then gets a 429 with `Retry-After` naming the cap, never a long stall.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::core::error::ApiError;

/// What a busy answer asks the client to wait before retrying.
pub const BUSY_RETRY_AFTER_SECONDS: u64 = 1;

#[derive(Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    /// Names the work in the busy answer ("shell commands").
    what: &'static str,
    limit: usize,
    max_wait: Duration,
}

impl Admission {
    pub fn new(what: &'static str, limit: usize, max_wait: Duration) -> Self {
        Admission {
            permits: Arc::new(Semaphore::new(limit)),
            what,
            limit,
            max_wait,
        }
    }

    /// A place, held until the permit is dropped; or `ApiError::Busy` when none frees up in time.
    pub async fn enter(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            return Ok(permit);
        }
        match tokio::time::timeout(self.max_wait, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(ApiError::Busy {
                message: format!(
                    "boxd is busy: {} {} are running, the most it runs at once, and none finished within {} s; retry later",
                    self.limit,
                    self.what,
                    self.max_wait.as_secs_f64()
                ),
                retry_after_seconds: BUSY_RETRY_AFTER_SECONDS,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_cap_a_caller_waits_its_bound_then_is_told_busy() {
        let admission = Admission::new("jobs", 1, Duration::from_millis(50));
        let held = admission.enter().await.expect("the first place");
        let started = tokio::time::Instant::now();
        let refused = admission.enter().await.map(|_| ());
        assert!(started.elapsed() >= Duration::from_millis(50));
        match refused {
            Err(
                err @ ApiError::Busy {
                    retry_after_seconds: BUSY_RETRY_AFTER_SECONDS,
                    ..
                },
            ) => {
                assert!(err.to_string().contains("1 jobs are running"), "{err}");
            }
            other => panic!("expected busy, got {other:?}"),
        }
        drop(held);
        assert!(admission.enter().await.is_ok());
    }
}
