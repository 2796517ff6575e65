//! A thread that owns a family's blocking resource (an X connection, a link to a device) and runs the work
//! sent to it one job at a time, in the order it came: two callers' actions never interleave, and the
//! resource's blocking calls never hold an async worker. The queue is bounded (a full one is "busy", not a
//! wait without end), and the resource reports its loss through [`Loss`]: the family's health turns
//! `failed` with the reason, and whoever watches [`Owner::lost`] reconnects.

use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use super::health::Health;

type Job<R> = Box<dyn FnOnce(&mut R) + Send>;

pub struct Owner<R> {
    jobs: SyncSender<Job<R>>,
    capacity: usize,
    loss: Arc<Loss>,
}

impl<R> Clone for Owner<R> {
    fn clone(&self) -> Self {
        Owner {
            jobs: self.jobs.clone(),
            capacity: self.capacity,
            loss: Arc::clone(&self.loss),
        }
    }
}

/// How the resource says it is gone.
pub struct Loss {
    health: Mutex<Option<Health>>,
    lost: Notify,
}

impl Loss {
    /// The resource is unreachable for `reason`: the family is `failed` with it until it is back.
    pub fn report(&self, reason: String) {
        if let Some(health) = self
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
        {
            health.failed(reason);
        }
        self.lost.notify_one();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("busy: {0} requests are waiting; try again shortly")]
    Busy(usize),
    #[error("its worker thread stopped")]
    Stopped,
}

impl<R: Send + 'static> Owner<R> {
    /// Starts the thread `name` with the resource `make` builds (given the way to report its loss).
    pub fn start(
        name: &str,
        capacity: usize,
        make: impl FnOnce(Arc<Loss>) -> R,
    ) -> Result<Owner<R>, String> {
        let (jobs, received) = std::sync::mpsc::sync_channel::<Job<R>>(capacity);
        let loss = Arc::new(Loss {
            health: Mutex::new(None),
            lost: Notify::new(),
        });
        let mut resource = make(Arc::clone(&loss));
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(job) = received.recv() {
                    job(&mut resource);
                }
            })
            .map_err(|err| format!("cannot start the {name} thread: {err}"))?;
        Ok(Owner {
            jobs,
            capacity,
            loss,
        })
    }

    /// Runs `work` on the thread once its turn comes; `wait` bounds the whole wait (its turn and the
    /// work), None leaves it to the work's own bounds.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut R) -> T + Send + 'static,
        wait: Option<Duration>,
    ) -> Result<T, OwnerError> {
        let (reply, answer) = oneshot::channel();
        let job: Job<R> = Box::new(move |resource: &mut R| {
            let _ = reply.send(work(resource));
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(OwnerError::Busy(self.capacity)),
            Err(TrySendError::Disconnected(_)) => return Err(OwnerError::Stopped),
        }
        match wait {
            None => answer.await.map_err(|_| OwnerError::Stopped),
            Some(wait) => match tokio::time::timeout(wait, answer).await {
                Ok(answered) => answered.map_err(|_| OwnerError::Stopped),
                Err(_) => Err(OwnerError::Busy(self.capacity)),
            },
        }
    }

    /// The health the resource's loss turns `failed`.
    pub fn set_health(&self, health: Health) {
        *self
            .loss
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(health);
    }

    /// Resolves when the resource reported its loss.
    pub async fn lost(&self) {
        self.loss.lost.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_in_order_and_a_full_queue_is_busy() {
        let owner = Owner::start("test-owner", 1, |_| Vec::new()).unwrap();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        // The first job blocks the thread until released; the second fills the queue.
        let blocked = owner.clone();
        let first = tokio::spawn(async move {
            blocked
                .run(
                    move |log: &mut Vec<u32>| {
                        let _ = held.recv();
                        log.push(1);
                    },
                    None,
                )
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued = owner.clone();
        let second =
            tokio::spawn(async move { queued.run(|log: &mut Vec<u32>| log.push(2), None).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let third = owner.run(|log: &mut Vec<u32>| log.push(3), None).await;
        assert!(matches!(third, Err(OwnerError::Busy(1))));
        hold.send(()).unwrap();
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let log = owner
            .run(|log: &mut Vec<u32>| log.clone(), None)
            .await
            .unwrap();
        assert_eq!(log, [1, 2]);
    }
}
