//! The desktop: the X connection, owned by one thread (`family::Owner`) that runs the actions sent to it
//! one at a time, in the order they came (two agents' clicks never interleave, and X's blocking calls
//! never hold an async worker). It connects on first use and again after the connection is lost, and
//! reports the loss to the family's health.

use std::sync::Arc;

use super::x11::{Session, XError};
use crate::core::health::Health;
use crate::core::owner::{Loss, Owner, OwnerError};

/// Actions waiting for the desktop beyond this are refused as busy (429), not queued without end.
pub const MAX_QUEUED_ACTIONS: usize = 64;

#[derive(Clone)]
pub struct Desktop {
    owner: Owner<Connector>,
}

struct Connector {
    display: String,
    session: Option<Session>,
    loss: Arc<Loss>,
}

#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error(transparent)]
    X(#[from] XError),
    #[error("the desktop is {0}")]
    Owner(#[from] OwnerError),
}

impl Desktop {
    pub fn start(display: String) -> Result<Desktop, String> {
        let owner = Owner::start("boxd-desktop", MAX_QUEUED_ACTIONS, |loss| Connector {
            display,
            session: None,
            loss,
        })?;
        Ok(Desktop { owner })
    }

    /// Runs `work` on the desktop's thread with a live session (connecting first if needed).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Session) -> Result<T, XError> + Send + 'static,
    ) -> Result<T, DesktopError> {
        Ok(self
            .owner
            .run(move |connector| connector.with_session(work), None)
            .await??)
    }

    pub fn set_health(&self, health: Health) {
        self.owner.set_health(health);
    }

    /// Resolves when a call found the display gone.
    pub async fn lost(&self) {
        self.owner.lost().await;
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
        self.loss
            .report(format!("display {} unreachable: {err}", self.display));
    }
}
