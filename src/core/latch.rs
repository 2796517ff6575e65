//! A one-way, process-wide signal: closed at start, opened once, never closed again. Opening never waits
//! and, after the first time, costs one atomic load; waiters registered before or while it opens wake.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

pub struct Latch {
    open: AtomicBool,
    opening: Notify,
}

impl Latch {
    pub const fn new() -> Latch {
        Latch {
            open: AtomicBool::new(false),
            opening: Notify::const_new(),
        }
    }

    /// Opens the latch; true for the call that opened it.
    pub fn open(&self) -> bool {
        if self.open.load(Ordering::Relaxed) || self.open.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.opening.notify_waiters();
        true
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once the latch is open (at once if it is).
    pub async fn opened(&self) {
        let notified = self.opening.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: an `open` that lands in between still wakes this waiter.
        notified.as_mut().enable();
        if self.is_open() {
            return;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_when_it_opens_and_later_ones_pass_at_once() {
        static LATCH: Latch = Latch::new();
        let waiter = tokio::spawn(LATCH.opened());
        assert!(LATCH.open());
        assert!(!LATCH.open());
        assert!(LATCH.is_open());
        let limit = std::time::Duration::from_secs(5);
        assert!(tokio::time::timeout(limit, waiter).await.is_ok());
        assert!(tokio::time::timeout(limit, LATCH.opened()).await.is_ok());
    }
}
