//! The desktop: one thread that owns the X connection and runs the actions sent to it, one at a time, in
//! the order they came (two agents' clicks never interleave, and X's blocking calls never hold an async
//! worker). It connects on first use and again after the connection is lost; the family's health says
//! whether the display is reachable.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};

use super::x11::{Session, XError};
use crate::family::Health;

/// Actions waiting for the desktop beyond this are refused as busy (429), not queued without end.
pub const MAX_QUEUED_ACTIONS: usize = 64;

type Job = Box<dyn FnOnce(&mut Connector) + Send>;

#[derive(Clone)]
pub struct Desktop {
    jobs: SyncSender<Job>,
    state: Arc<Shared>,
}

struct Shared {
    health: Mutex<Option<Health>>,
    /// Signalled when a call finds the display gone, so the family's watch reconnects.
    lost: Notify,
}

struct Connector {
    display: String,
    session: Option<Session>,
    state: Arc<Shared>,
}

#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error(transparent)]
    X(#[from] XError),
    #[error("the desktop is busy: {MAX_QUEUED_ACTIONS} actions are waiting; try again shortly")]
    Busy,
    #[error("the desktop thread stopped")]
    Stopped,
}

impl Desktop {
    pub fn start(display: String) -> Result<Desktop, String> {
        let (jobs, received) = std::sync::mpsc::sync_channel(MAX_QUEUED_ACTIONS);
        let state = Arc::new(Shared {
            health: Mutex::new(None),
            lost: Notify::new(),
        });
        let connector = Connector {
            display,
            session: None,
            state: Arc::clone(&state),
        };
        std::thread::Builder::new()
            .name("boxd-desktop".into())
            .spawn(move || serve(connector, received))
            .map_err(|err| format!("cannot start the desktop thread: {err}"))?;
        Ok(Desktop { jobs, state })
    }

    /// Runs `work` on the desktop's thread with a live session (connecting first if needed).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Session) -> Result<T, XError> + Send + 'static,
    ) -> Result<T, DesktopError> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |connector: &mut Connector| {
            let outcome = connector.with_session(work);
            let _ = reply.send(outcome);
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(DesktopError::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(DesktopError::Stopped),
        }
        Ok(answer.await.map_err(|_| DesktopError::Stopped)??)
    }

    pub fn set_health(&self, health: Health) {
        *self
            .state
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(health);
    }

    /// Resolves when a call found the display gone.
    pub async fn lost(&self) {
        self.state.lost.notified().await;
    }
}

fn serve(mut connector: Connector, jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        job(&mut connector);
    }
}

impl Connector {
    fn with_session<T>(
        &mut self,
        work: impl FnOnce(&mut Session) -> Result<T, XError>,
    ) -> Result<T, XError> {
        if self.session.is_none() {
            match Session::connect(&self.display) {
                Ok(session) => {
                    tracing::info!(display = %self.display, width = session.width, height = session.height, "connected to the X display");
                    self.session = Some(session);
                }
                Err(err) => {
                    self.lost(&err);
                    return Err(err);
                }
            }
        }
        let Some(session) = self.session.as_mut() else {
            return Err(XError::Connection("not connected".into()));
        };
        let outcome = work(session);
        if let Err(err @ XError::Connection(_)) = &outcome {
            self.session = None;
            self.lost(err);
        }
        outcome
    }

    fn lost(&self, err: &XError) {
        if let Some(health) = self
            .state
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
        {
            health.failed(format!("display {} unreachable: {err}", self.display));
        }
        self.state.lost.notify_one();
    }
}
