//! The desktop: the X connection, owned by one thread (`core::owner::Owner`) that runs the actions sent to
//! it one at a time, in the order they came (two agents' clicks never interleave, and X's blocking calls
//! never hold an async worker). It connects on first use and again after the connection is lost.
//!
//! Nothing waits without end, and nothing runs for a caller that is gone:
//! - every wait on the X server is bounded (`x11::X_REPLY_TIMEOUT`); a display that stops answering
//!   (a client holding a server grab, a stopped server) is `stalled`: the family turns `degraded` with
//!   the reason and calls fail at once, until the family's probe finds it answering again;
//! - before an action sends anything, the server must answer one round trip: input written to a server
//!   that does not read it would run whenever it resumes, long after its caller got an error;
//! - a call waits for its turn at most [`TURN_WAIT`]; a call whose caller went away (or whose wait ran
//!   out) is withdrawn and its action never runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::x11::{Session, XError};
use crate::core::health::Health;
use crate::core::owner::{Owner, OwnerError};
use crate::core::ticket::{Ticket, WithdrawOnDrop};

/// Actions waiting for the desktop beyond this are refused as busy (429), not queued without end.
pub const MAX_QUEUED_ACTIONS: usize = 64;
/// How long a call waits for its turn behind earlier actions; then it is withdrawn, never run.
pub const TURN_WAIT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Desktop {
    owner: Owner<Connector>,
    shared: Arc<Shared>,
}

/// What the desktop's thread and the family's probe share.
struct Shared {
    display: String,
    /// Why the display stopped answering, while it does not: calls fail at once instead of each
    /// waiting out the X bound. Cleared by the family's probe once the display answers again.
    stalled: Mutex<Option<String>>,
    /// Whether the display was reached once: before that, an unreachable display is still coming up
    /// (the family is `starting`); after, it is lost (`failed`).
    came_up: AtomicBool,
    /// Woken when the display is lost or stalls, for the family's probe.
    changed: Notify,
    /// The family's health, told at once when a call finds the display stalled or lost (the probe
    /// that follows takes up to the X bound itself).
    health: Mutex<Option<Health>>,
}

struct Connector {
    session: Option<Session>,
    shared: Arc<Shared>,
}

#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error(transparent)]
    X(XError),
    /// The display does not answer (a server grab, a stopped server).
    #[error("display {display} is not answering: {reason}")]
    Stalled { display: String, reason: String },
    #[error("the desktop is {0}")]
    Owner(#[from] OwnerError),
    /// The call's turn did not come in time; its action was withdrawn and did not run.
    #[error(
        "the desktop did not get to this action within {} s (earlier actions were still running); it was withdrawn and did not run",
        TURN_WAIT.as_secs()
    )]
    TurnTimeout,
    /// The caller went away before its turn; nobody reads this.
    #[error("withdrawn before its turn")]
    Withdrawn,
}

impl Desktop {
    pub fn start(display: String) -> Result<Desktop, String> {
        let shared = Arc::new(Shared {
            display,
            stalled: Mutex::new(None),
            came_up: AtomicBool::new(false),
            changed: Notify::new(),
            health: Mutex::new(None),
        });
        let for_thread = Arc::clone(&shared);
        // The owner's own loss report would turn the family `failed`; this module tells the family
        // itself, which tells `starting`, `degraded` and `failed` apart.
        let owner = Owner::start("boxd-desktop", MAX_QUEUED_ACTIONS, |_loss| Connector {
            session: None,
            shared: for_thread,
        })?;
        Ok(Desktop { owner, shared })
    }

    /// Runs `work` on the desktop's thread with a live session (connecting first if needed); at once
    /// an error while the display is stalled.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Session) -> Result<T, XError> + Send + 'static,
    ) -> Result<T, DesktopError> {
        if let Some(reason) = self.shared.stalled_reason() {
            return Err(self.shared.stalled_error(reason));
        }
        self.submit(work, false).await
    }

    /// The family's probe: connects if needed and checks the display answers, even while it is
    /// stalled (which it clears once it answers).
    pub async fn probe(&self) -> Result<(), DesktopError> {
        self.submit(|_| Ok(()), true).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Session) -> Result<T, XError> + Send + 'static,
        probe: bool,
    ) -> Result<T, DesktopError> {
        let ticket = Ticket::new();
        let claim = Arc::clone(&ticket);
        let job = move |connector: &mut Connector| {
            if !claim.start() {
                return Err(DesktopError::Withdrawn);
            }
            connector.with_session(work, probe)
        };
        let guard = WithdrawOnDrop::new(&ticket, "a desktop action");
        let answer = self.owner.run(job, None);
        tokio::pin!(answer);
        tokio::select! {
            answered = &mut answer => return answered?,
            () = tokio::time::sleep(TURN_WAIT) => {}
        }
        if ticket.withdraw() {
            tracing::warn!(wait = ?TURN_WAIT, "a desktop action was withdrawn: its turn did not come in time");
            return Err(DesktopError::TurnTimeout);
        }
        drop(guard);
        // It started just in time: every wait it makes on X is bounded, so its answer comes.
        answer.await?
    }

    pub fn set_health(&self, health: Health) {
        *self
            .shared
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(health);
    }

    /// Resolves when the display was lost or stalled (for the family's probe).
    pub async fn changed(&self) {
        self.shared.changed.notified().await;
    }

    pub fn came_up(&self) -> bool {
        self.shared.came_up.load(Ordering::Acquire)
    }
}

impl Shared {
    fn stalled_reason(&self) -> Option<String> {
        self.stalled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn stalled_error(&self, reason: String) -> DesktopError {
        DesktopError::Stalled {
            display: self.display.clone(),
            reason,
        }
    }

    fn health(&self) -> Option<Health> {
        self.health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_stalled(&self, reason: Option<String>) {
        *self
            .stalled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = reason;
    }
}

impl Connector {
    fn with_session<T>(
        &mut self,
        work: impl FnOnce(&mut Session) -> Result<T, XError>,
        probe: bool,
    ) -> Result<T, DesktopError> {
        let shared = Arc::clone(&self.shared);
        if !probe && let Some(reason) = shared.stalled_reason() {
            // Stalled while this call waited for its turn.
            return Err(shared.stalled_error(reason));
        }
        let outcome = self.attempt(work);
        match outcome {
            Ok(value) => {
                if probe {
                    shared.set_stalled(None);
                }
                if !shared.came_up.swap(true, Ordering::AcqRel) {
                    tracing::info!(display = %shared.display, "the X display came up");
                }
                Ok(value)
            }
            Err(XError::Stalled) => {
                self.session = None;
                let reason = XError::Stalled.to_string();
                let err = shared.stalled_error(reason.clone());
                if shared.came_up.load(Ordering::Acquire) {
                    shared.set_stalled(Some(reason));
                    if let Some(health) = shared.health() {
                        health.degraded(err.to_string());
                    }
                    shared.changed.notify_one();
                }
                Err(err)
            }
            Err(err @ XError::Connection(_)) => {
                self.session = None;
                if shared.came_up.load(Ordering::Acquire) {
                    if let Some(health) = shared.health() {
                        health.failed(format!("display {} unreachable: {err}", shared.display));
                    }
                    shared.changed.notify_one();
                }
                Err(DesktopError::X(err))
            }
            Err(err) => Err(DesktopError::X(err)),
        }
    }

    fn attempt<T>(
        &mut self,
        work: impl FnOnce(&mut Session) -> Result<T, XError>,
    ) -> Result<T, XError> {
        let session = match &mut self.session {
            Some(session) => {
                // The server must be answering before anything is sent (see the module's notes).
                session.sync()?;
                session
            }
            None => {
                let session = Session::connect(&self.shared.display)?;
                tracing::info!(display = %self.shared.display, width = session.width, height = session.height, "connected to the X display");
                self.session.insert(session)
            }
        };
        work(session)
    }
}
