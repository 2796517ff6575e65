//! The live instances of one environment and the warm spare worker that the next `create` takes.
//!
//! An instance is a worker that took a task: requests to it run one at a time (its mutex), it is
//! released by `release`, by a later `create` reusing its id, by idleness, or by its own death; in every
//! case its process group is killed. Nothing about a failed `create` stays behind: its worker is killed
//! and no id is registered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;

use super::worker::{Launch, Worker, WorkerError};
use crate::core::child::OwnedGroup;
use crate::core::error::ApiError;
use crate::core::health::Health;

/// The bounds of one environment's instances.
#[derive(Debug, Clone)]
pub struct InstanceLimits {
    pub max_live: usize,
    /// An instance no request touched for this long is released.
    pub idle_release: Duration,
    /// How long one request to a worker (create, step, evaluate, get_info, profile) may take.
    pub call_timeout: Duration,
}

/// The longest instance id accepted.
pub const INSTANCE_ID_MAX: usize = 256;

struct Instance {
    task_id: String,
    worker: AsyncMutex<Option<Worker>>,
    /// Kills the worker while a request holds it.
    group: Arc<OwnedGroup>,
    last_used: Mutex<Instant>,
}

impl Instance {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    fn kill(&self) {
        self.group.signal(libc::SIGKILL);
    }
}

#[derive(Default)]
struct Live {
    instances: HashMap<String, Arc<Instance>>,
    /// Creates between their admission and their registration: they count against the cap.
    pending: usize,
}

pub struct Environment {
    launch: Launch,
    limits: InstanceLimits,
    live: Mutex<Live>,
    /// The next worker, started ahead so that `create` does not wait for Python's imports.
    spare: AsyncMutex<Option<JoinHandle<Result<Worker, WorkerError>>>>,
    health: Mutex<Option<Health>>,
    started: std::sync::atomic::AtomicU64,
}

/// A removed admission slot on every exit path of `create`.
struct Admission<'a> {
    environment: &'a Environment,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut live = lock(&self.environment.live);
        live.pending = live.pending.saturating_sub(1);
    }
}

impl Environment {
    pub fn new(launch: Launch, limits: InstanceLimits) -> Environment {
        Environment {
            launch,
            limits,
            live: Mutex::new(Live::default()),
            spare: AsyncMutex::new(None),
            health: Mutex::new(None),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> &str {
        &self.launch.environment
    }

    pub fn limits(&self) -> &InstanceLimits {
        &self.limits
    }

    /// Starts the first spare and reports, through `health`, whether the environment loads.
    pub async fn start(self: &Arc<Self>, health: Health) {
        *lock(&self.health) = Some(health);
        let mut spare = self.spare.lock().await;
        let first = spare.take().unwrap_or_else(|| self.start_worker());
        match first.await {
            Ok(Ok(worker)) => {
                *spare = Some(tokio::spawn(async move { Ok(worker) }));
                self.report(Ok(()));
            }
            Ok(Err(err)) => self.report(Err(err.to_string())),
            Err(err) => self.report(Err(format!("the worker start task failed: {err}"))),
        }
    }

    fn report(&self, outcome: Result<(), String>) {
        let Some(health) = lock(&self.health).clone() else {
            return;
        };
        match outcome {
            Ok(()) => health.ready_with(format!("environment {}", self.launch.environment)),
            Err(reason) => health.unavailable(reason),
        }
    }

    fn start_worker(self: &Arc<Self>) -> JoinHandle<Result<Worker, WorkerError>> {
        let number = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("training-{}-{number}", self.launch.environment);
        let launch = self.launch.clone();
        tokio::spawn(async move { Worker::start(&launch, name).await })
    }

    /// The spare worker, for good: a new one starts at once for the next caller.
    async fn take_spare(self: &Arc<Self>) -> Result<Worker, ApiError> {
        let taken = {
            let mut spare = self.spare.lock().await;
            let taken = spare.take().unwrap_or_else(|| self.start_worker());
            *spare = Some(self.start_worker());
            taken
        };
        let worker = taken.await?;
        self.report(worker.as_ref().map(|_| ()).map_err(ToString::to_string));
        Ok(worker?)
    }

    /// Asks the spare worker something that does not bind it to a task (the task ids of a split); it
    /// stays the spare.
    pub async fn ask_spare(
        self: &Arc<Self>,
        op: &str,
        fields: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        let mut spare = self.spare.lock().await;
        let handle = spare.take().unwrap_or_else(|| self.start_worker());
        let outcome = handle.await?;
        self.report(outcome.as_ref().map(|_| ()).map_err(ToString::to_string));
        let mut worker = outcome?;
        let answer = worker.ask(op, fields, self.limits.call_timeout).await;
        *spare = Some(match &answer {
            Err(err) if err.is_fatal() => self.start_worker(),
            _ => tokio::spawn(async move { Ok(worker) }),
        });
        Ok(answer?)
    }

    /// A new instance of `task_id` under `instance_id` (an instance already under that id is released
    /// first); the worker's answer (`state`, `info`).
    pub async fn create(
        self: &Arc<Self>,
        task_id: &str,
        instance_id: &str,
        params: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        if self.release(instance_id).await {
            tracing::info!(
                instance = instance_id,
                "create reuses the id; released the old instance"
            );
        }
        let _admission = self.admit()?;
        let mut worker = self.take_spare().await?;
        let mut fields = Map::new();
        fields.insert("task_id".into(), json!(task_id));
        fields.insert("instance_id".into(), json!(instance_id));
        fields.insert("params".into(), Value::Object(params));
        // On any error the worker is dropped here, which kills it: a failed create leaves nothing.
        let answer = worker
            .ask("create", fields, self.limits.call_timeout)
            .await?;
        let instance = Arc::new(Instance {
            task_id: task_id.to_owned(),
            group: worker.group(),
            worker: AsyncMutex::new(Some(worker)),
            last_used: Mutex::new(Instant::now()),
        });
        let replaced = lock(&self.live)
            .instances
            .insert(instance_id.to_owned(), instance);
        if let Some(replaced) = replaced {
            // Two creates of one id at once: the later one wins, as a sequential reuse would.
            replaced.kill();
        }
        tracing::info!(
            instance = instance_id,
            task = task_id,
            environment = %self.launch.environment,
            "instance created"
        );
        Ok(answer)
    }

    fn admit(&self) -> Result<Admission<'_>, ApiError> {
        let mut live = lock(&self.live);
        let count = live.instances.len().saturating_add(live.pending);
        if count >= self.limits.max_live {
            return Err(ApiError::TooManyRequests(format!(
                "{count} instances are live, the most this sandbox keeps (--training-max-instances); \
                 release one first"
            )));
        }
        live.pending = live.pending.saturating_add(1);
        Ok(Admission { environment: self })
    }

    /// Sends `op` to the instance's worker. A worker that dies, hangs or breaks the protocol takes its
    /// instance with it; the error says so.
    pub async fn ask(
        &self,
        instance_id: &str,
        op: &str,
        fields: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        let instance = lock(&self.live)
            .instances
            .get(instance_id)
            .cloned()
            .ok_or_else(|| not_found(instance_id))?;
        let mut held = instance.worker.lock().await;
        let Some(worker) = held.as_mut() else {
            return Err(not_found(instance_id));
        };
        instance.touch();
        let answer = worker.ask(op, fields, self.limits.call_timeout).await;
        instance.touch();
        match answer {
            Ok(data) => Ok(data),
            Err(err) if err.is_fatal() => {
                held.take();
                instance.kill();
                self.forget(instance_id, &instance);
                tracing::warn!(instance = instance_id, task = %instance.task_id, error = %err, "instance lost");
                let message = format!("instance {instance_id} is gone (create it again): {err}");
                Err(match err {
                    WorkerError::TimedOut { .. } => ApiError::GatewayTimeout(message),
                    _ => ApiError::BadGateway(message),
                })
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Removes `instance_id` if it is still `instance` (a create may have reused the id since).
    fn forget(&self, instance_id: &str, instance: &Arc<Instance>) {
        let mut live = lock(&self.live);
        if live
            .instances
            .get(instance_id)
            .is_some_and(|current| Arc::ptr_eq(current, instance))
        {
            live.instances.remove(instance_id);
        }
    }

    /// Kills the instance's worker at once (a request in flight on it fails); false when there is no
    /// such instance.
    pub async fn release(&self, instance_id: &str) -> bool {
        let removed = lock(&self.live).instances.remove(instance_id);
        let Some(instance) = removed else {
            return false;
        };
        instance.kill();
        // Reaps it; a request still holding the worker drops it itself.
        if let Ok(mut held) = instance.worker.try_lock() {
            held.take();
        }
        tracing::info!(instance = instance_id, task = %instance.task_id, "instance released");
        true
    }

    /// Releases every instance idle for longer than `idle_release` (one with a request in flight is
    /// not idle); returns how many.
    pub async fn release_idle(&self) -> usize {
        let idle: Vec<String> = lock(&self.live)
            .instances
            .iter()
            .filter(|(_, instance)| {
                instance.idle_for() >= self.limits.idle_release
                    && instance.worker.try_lock().is_ok()
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            tracing::info!(instance = %id, "releasing an idle instance");
            self.release(id).await;
        }
        idle.len()
    }

    /// Kills every instance and the spare (boxd stops).
    pub async fn stop(&self) {
        let instances: Vec<Arc<Instance>> = lock(&self.live)
            .instances
            .drain()
            .map(|(_, instance)| instance)
            .collect();
        for instance in instances {
            instance.kill();
        }
        if let Some(spare) = self.spare.lock().await.take() {
            spare.abort();
            if let Ok(Ok(worker)) = spare.await {
                drop(worker);
            }
        }
    }
}

fn not_found(instance_id: &str) -> ApiError {
    // Upstream's wording, which clients may match.
    ApiError::BadRequest(format!("Instance {instance_id} not found!"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
