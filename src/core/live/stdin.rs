//! A process's stdin queue, bounded in bytes: a process that does not read its stdin holds at most
//! [`QUEUE_BYTES`] of boxd's memory, and a writer waits at most [`WAIT`] for room before being told so.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::unavailable;
use crate::core::error::ApiError;

/// One stdin write (a request body, a WebSocket frame) at most.
pub const BODY_MAX: usize = 1024 * 1024;
/// Queued and not yet taken by the process, per process.
pub const QUEUE_BYTES: usize = 4 * BODY_MAX;
/// How long a writer waits for room in a full queue.
pub const WAIT: Duration = Duration::from_secs(5);

pub enum Input {
    Data(Bytes),
    Close,
}

/// An input with its share of the byte budget, given back once it has been written to the process.
pub struct Queued {
    pub input: Input,
    _budget: OwnedSemaphorePermit,
}

#[derive(Clone)]
pub struct StdinQueue {
    sender: mpsc::UnboundedSender<Queued>,
    budget: Arc<Semaphore>,
}

/// How long a writer may wait for room: a request waits a little, a WebSocket (whose one loop also
/// carries output and pings) not at all.
#[derive(Debug, Clone, Copy)]
pub enum Patience {
    Wait(Duration),
    NoWait,
}

impl StdinQueue {
    /// The receiver goes to the task that feeds the process. Every input costs at least one byte of the
    /// budget, so the unbounded channel is bounded by it.
    pub fn new() -> (StdinQueue, mpsc::UnboundedReceiver<Queued>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let queue = StdinQueue {
            sender,
            budget: Arc::new(Semaphore::new(QUEUE_BYTES)),
        };
        (queue, receiver)
    }

    pub async fn send(&self, id: &str, input: Input, patience: Patience) -> Result<(), ApiError> {
        let cost = match &input {
            Input::Data(data) if data.len() > BODY_MAX => {
                return Err(ApiError::PayloadTooLarge(format!(
                    "stdin writes are at most {BODY_MAX} bytes (1 MiB), got {}; send it in parts",
                    data.len()
                )));
            }
            Input::Data(data) if data.is_empty() => return Ok(()),
            Input::Data(data) => data.len(),
            Input::Close => 1,
        };
        // At most BODY_MAX, so it fits.
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        let budget = Arc::clone(&self.budget);
        let full = || {
            unavailable(format!(
                "process {id} is not reading its stdin: {} bytes are already queued (the cap is \
                 {QUEUE_BYTES}); try again once it reads",
                QUEUE_BYTES.saturating_sub(self.budget.available_permits())
            ))
        };
        let permit = match patience {
            Patience::NoWait => budget.try_acquire_many_owned(cost).map_err(|_| full())?,
            Patience::Wait(wait) => {
                match tokio::time::timeout(wait, budget.acquire_many_owned(cost)).await {
                    Ok(Ok(permit)) => permit,
                    Ok(Err(_)) => return Err(closed(id)),
                    Err(_) => return Err(full()),
                }
            }
        };
        self.sender
            .send(Queued {
                input,
                _budget: permit,
            })
            .map_err(|_| closed(id))
    }
}

fn closed(id: &str) -> ApiError {
    ApiError::Conflict(format!("stdin of process {id} is closed"))
}
