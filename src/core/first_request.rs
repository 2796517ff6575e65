//! Whether a client has come yet: the listeners say so on every request (only the first one counts),
//! and a family that holds something costly only once a client comes (the IPython kernel) waits for it
//! in its start. So a sandbox nobody contacted holds nothing the families can put off, and no listener
//! needs to know which family waits.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

static CAME: AtomicBool = AtomicBool::new(false);
static COMING: Notify = Notify::const_new();

/// A request reached boxd (any listener, any route). Never waits; after the first call, one atomic load.
pub fn arrived() {
    if !CAME.load(Ordering::Relaxed) && !CAME.swap(true, Ordering::AcqRel) {
        tracing::debug!("the first request reached boxd");
        COMING.notify_waiters();
    }
}

/// Whether a request has reached boxd.
pub fn has_come() -> bool {
    CAME.load(Ordering::Acquire)
}

/// Resolves once a request has reached boxd (at once if one already has).
pub async fn wait() {
    let notified = COMING.notified();
    tokio::pin!(notified);
    // Registered before the flag is read: a request that lands in between still wakes this waiter.
    notified.as_mut().enable();
    if has_come() {
        return;
    }
    notified.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_on_the_first_request_and_later_ones_pass_at_once() {
        let waiter = tokio::spawn(wait());
        arrived();
        assert!(has_come());
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .is_ok()
        );
        arrived();
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), wait())
                .await
                .is_ok()
        );
    }
}
