//! A queued job's turn, shared by its caller and the owner's thread that runs jobs one at a time:
//! exactly one of them moves it out of "queued", so a job either runs or is withdrawn, never both (an
//! input whose caller gave up must not happen later, when a retry may already have done it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const WITHDRAWN: u8 = 2;

pub struct Ticket(AtomicU8);

impl Ticket {
    pub fn new() -> Arc<Ticket> {
        Arc::new(Ticket(AtomicU8::new(QUEUED)))
    }

    /// On the owner's thread, before the job: false if it was withdrawn (then it must not run).
    pub fn start(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// By the caller: false if the job already started (then its answer is still to come).
    pub fn withdraw(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Withdraws the job when its caller's future is dropped (the HTTP client went away) before its turn.
pub struct WithdrawOnDrop {
    ticket: Arc<Ticket>,
    /// What the job is, for the log line: "an adb command", "a desktop action".
    what: &'static str,
}

impl WithdrawOnDrop {
    pub fn new(ticket: &Arc<Ticket>, what: &'static str) -> WithdrawOnDrop {
        WithdrawOnDrop {
            ticket: Arc::clone(ticket),
            what,
        }
    }
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        if self.ticket.withdraw() {
            tracing::debug!(
                "{} was withdrawn: its caller went away before its turn",
                self.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_either_runs_or_is_withdrawn_never_both() {
        let ticket = Ticket::new();
        assert!(ticket.withdraw());
        assert!(!ticket.start(), "a withdrawn job does not run");
        let ticket = Ticket::new();
        assert!(ticket.start());
        assert!(!ticket.withdraw(), "a running job is not withdrawn");
    }
}
