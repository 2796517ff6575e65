//! The live instances of one environment and the warm spare worker that the next `create` takes.
//!
//! An instance is a worker that took a task: one request at a time reaches it (a second one meanwhile
//! is refused with 409), and a request's exchange with its worker runs to its end even when the caller
//! goes away (an abandoned answer left in the pipe would answer the next request). It is released by
//! `release`, by a later `create` reusing its id, by idleness, or by its own death; in every case its
//! process group is killed. Nothing about a failed `create` stays behind: its worker is killed (or, when
//! it only refused the task, goes back to being the spare) and no id is registered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio::task::JoinHandle;

use super::tenancy::Users;
use super::worker::{Launch, Worker, WorkerError};
use crate::core::child::{Backoff, OwnedGroup};
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

/// The longest instance id and task id accepted.
pub const ID_MAX: usize = 256;
/// How long a failed worker start answers for itself: requests meanwhile get its error at once
/// instead of starting a Python process each.
const START_FAILURE_HOLD: Duration = Duration::from_secs(10);
/// How long a worker start waits for the family's start to prepare the workers' directory (a `/proc`
/// scan or two: milliseconds, seconds on a very busy host).
const PREPARE_WAIT: Duration = Duration::from_secs(30);

struct Instance {
    task_id: String,
    /// `None` once the worker is gone (released, dead, timed out).
    worker: Arc<AsyncMutex<Option<Worker>>>,
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

type Starting = JoinHandle<Result<Worker, WorkerError>>;

pub struct Environment {
    launch: Launch,
    limits: InstanceLimits,
    live: Mutex<Live>,
    /// The next worker, started ahead so that `create` does not wait for Python's imports.
    spare: AsyncMutex<Option<Starting>>,
    /// The last failed start and when it happened (see [`START_FAILURE_HOLD`]).
    start_failure: Mutex<Option<(Instant, String)>>,
    health: Mutex<Option<Health>>,
    started: std::sync::atomic::AtomicU64,
    /// The outcome of [`Environment::prepare`]; no worker starts before it is there. The routes serve
    /// before the family starts (without the token, they pass no family's admission), and until then
    /// the workers' directory may not exist and boxd may still be stopping what a previous boxd left,
    /// which a worker started meanwhile would be taken for.
    prepared: watch::Sender<Option<Result<(), String>>>,
}

/// A create's place under the cap, from its admission to its registration (or its failure).
struct Admission<'a> {
    environment: &'a Environment,
}

impl Admission<'_> {
    /// Registers `instance` under `id` and frees the place in one step, so that no other create sees
    /// it counted twice; returns the instance it replaced.
    fn register(self, id: &str, instance: Arc<Instance>) -> Option<Arc<Instance>> {
        let mut live = lock(&self.environment.live);
        live.pending = live.pending.saturating_sub(1);
        let replaced = live.instances.insert(id.to_owned(), instance);
        drop(live);
        std::mem::forget(self);
        replaced
    }
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
            start_failure: Mutex::new(None),
            health: Mutex::new(None),
            started: std::sync::atomic::AtomicU64::new(0),
            prepared: watch::Sender::new(None),
        }
    }

    pub fn name(&self) -> &'static str {
        self.launch.environment.name()
    }

    pub fn limits(&self) -> &InstanceLimits {
        &self.limits
    }

    /// The workers' working directory.
    pub fn directory(&self) -> &std::path::Path {
        &self.launch.directory
    }

    /// The workers, and whatever runs as their users (what left a worker's group).
    pub fn held_processes(&self) -> Vec<crate::core::footprint::Held> {
        let mut held = vec![super::worker::workers(&self.launch)];
        held.extend(
            self.launch
                .users
                .confined_uids()
                .into_iter()
                .map(crate::core::footprint::Held::User),
        );
        held
    }

    /// Makes the workers' directory and clears the uid range; the family's start calls it once, after
    /// boxd stopped what a previous boxd left. Worker starts wait for it.
    pub async fn prepare(&self) -> Result<(), String> {
        let directory = self.launch.directory.clone();
        let users = self.launch.users.clone();
        let outcome = tokio::task::spawn_blocking(move || prepare(&directory, &users))
            .await
            .unwrap_or_else(|err| Err(format!("cannot create the workers' directory: {err}")));
        self.prepared.send_replace(Some(outcome.clone()));
        outcome
    }

    /// Waits for [`Environment::prepare`], at most [`PREPARE_WAIT`].
    async fn prepared(&self) -> Result<(), WorkerError> {
        // The family's start waits for the first answer, and this request may be it.
        crate::core::start_gate::open();
        let mut outcome = self.prepared.subscribe();
        match tokio::time::timeout(PREPARE_WAIT, outcome.wait_for(Option::is_some)).await {
            Ok(Ok(outcome)) => match &*outcome {
                Some(Err(reason)) => Err(WorkerError::NotStarted(reason.clone())),
                _ => Ok(()),
            },
            Ok(Err(_)) | Err(_) => Err(WorkerError::NotStarted(
                "the training family has not started yet: try again".to_owned(),
            )),
        }
    }

    /// Who the workers run as.
    pub fn users(&self) -> &super::tenancy::Users {
        &self.launch.users
    }

    /// Starts the first spare and keeps trying, with a backoff, until the environment loads; `health`
    /// says how it goes (so a readiness probe sees the environment come up once it can).
    pub async fn start(self: &Arc<Self>, health: Health) {
        *lock(&self.health) = Some(health);
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            let loaded = {
                let mut spare = self.spare.lock().await;
                let first = spare.take().unwrap_or_else(|| self.start_worker());
                match self.settle(first).await {
                    Ok(worker) => {
                        *spare = Some(ready(worker));
                        true
                    }
                    Err(_) => false,
                }
            };
            if loaded {
                return;
            }
            tokio::time::sleep(backoff.next_delay()).await;
            lock(&self.start_failure).take();
        }
    }

    /// Waits for a starting worker and records how its start went (health, the failure hold).
    async fn settle(&self, starting: Starting) -> Result<Worker, ApiError> {
        let outcome = match starting.await {
            Ok(outcome) => outcome,
            Err(err) => Err(WorkerError::NotStarted(format!(
                "the worker start task failed: {err}"
            ))),
        };
        let health = lock(&self.health).clone();
        match &outcome {
            Ok(_) => {
                lock(&self.start_failure).take();
                if let Some(health) = health {
                    health.ready_with(format!("environment {}", self.launch.environment));
                }
            }
            Err(err) => {
                *lock(&self.start_failure) = Some((Instant::now(), err.to_string()));
                if let Some(health) = health {
                    health.unavailable(err.to_string());
                }
            }
        }
        Ok(outcome?)
    }

    /// The error of a start that failed less than [`START_FAILURE_HOLD`] ago.
    fn recent_start_failure(&self) -> Result<(), ApiError> {
        match &*lock(&self.start_failure) {
            Some((when, message)) if when.elapsed() < START_FAILURE_HOLD => {
                Err(ApiError::from(WorkerError::NotStarted(message.clone())))
            }
            _ => Ok(()),
        }
    }

    fn start_worker(self: &Arc<Self>) -> Starting {
        let number = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("training-{}-{number}", self.launch.environment);
        let environment = Arc::clone(self);
        tokio::spawn(async move {
            environment.prepared().await?;
            Worker::start(&environment.launch, name).await
        })
    }

    /// The spare worker, for good: a new one starts at once for the next caller.
    async fn take_spare(self: &Arc<Self>) -> Result<Worker, ApiError> {
        self.recent_start_failure()?;
        let taken = {
            let mut spare = self.spare.lock().await;
            let taken = spare.take().unwrap_or_else(|| self.start_worker());
            *spare = Some(self.start_worker());
            taken
        };
        self.settle(taken).await
    }

    /// Makes `worker`, which took no task, the spare again (the one starting meanwhile is stopped).
    async fn return_spare(&self, worker: Worker) {
        let mut spare = self.spare.lock().await;
        if let Some(starting) = spare.replace(ready(worker)) {
            starting.abort();
        }
    }

    /// Asks the spare worker something that does not bind it to a task (the task ids of a split); it
    /// stays the spare.
    pub async fn ask_spare(
        self: &Arc<Self>,
        op: &str,
        fields: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        self.recent_start_failure()?;
        let mut spare = self.spare.lock().await;
        let starting = spare.take().unwrap_or_else(|| self.start_worker());
        let mut worker = self.settle(starting).await?;
        let answer = worker.ask(op, fields, self.limits.call_timeout).await;
        *spare = Some(match &answer {
            Err(err) if err.is_fatal() => self.start_worker(),
            _ => ready(worker),
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
        let admission = self.admit()?;
        let mut worker = self.take_spare().await?;
        let mut fields = Map::new();
        fields.insert("task_id".into(), json!(task_id));
        fields.insert("instance_id".into(), json!(instance_id));
        fields.insert("params".into(), Value::Object(params));
        let answer = match worker.ask("create", fields, self.limits.call_timeout).await {
            Ok(answer) => answer,
            // The worker refused the task before taking it (an unknown id): still a clean spare.
            Err(WorkerError::Refused {
                status: 400,
                message,
            }) => {
                self.return_spare(worker).await;
                return Err(ApiError::BadRequest(message));
            }
            // Otherwise dropping the worker kills it: a failed create leaves nothing.
            Err(err) => return Err(err.into()),
        };
        let instance = Arc::new(Instance {
            task_id: task_id.to_owned(),
            group: worker.group(),
            worker: Arc::new(AsyncMutex::new(Some(worker))),
            last_used: Mutex::new(Instant::now()),
        });
        if let Some(replaced) = admission.register(instance_id, instance) {
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
        self: &Arc<Self>,
        instance_id: &str,
        op: &str,
        fields: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        let instance = {
            let live = lock(&self.live);
            let instance = live
                .instances
                .get(instance_id)
                .cloned()
                .ok_or_else(|| not_found(instance_id))?;
            // Under the lock the idle sweep takes: a request that found the instance keeps it.
            instance.touch();
            instance
        };
        let Ok(mut held) = Arc::clone(&instance.worker).try_lock_owned() else {
            return Err(ApiError::Conflict(format!(
                "a request is in flight on instance {instance_id}; send one at a time"
            )));
        };
        // The exchange runs in a task of its own: a caller that goes away must not leave the answer
        // unread in the pipe, where the next request would read it as its own.
        let environment = Arc::clone(self);
        let instance_id = instance_id.to_owned();
        let op = op.to_owned();
        let exchange = tokio::spawn(async move {
            let Some(worker) = held.as_mut() else {
                return Err(not_found(&instance_id));
            };
            let answer = worker
                .ask(&op, fields, environment.limits.call_timeout)
                .await;
            instance.touch();
            match answer {
                Ok(data) => Ok(data),
                Err(err) if err.is_fatal() => {
                    held.take();
                    instance.kill();
                    environment.forget(&instance_id, &instance);
                    tracing::warn!(instance = %instance_id, task = %instance.task_id, error = %err, "instance lost");
                    let message =
                        format!("instance {instance_id} is gone (create it again): {err}");
                    Err(match err {
                        WorkerError::TimedOut { .. } => ApiError::GatewayTimeout(message),
                        _ => ApiError::BadGateway(message),
                    })
                }
                Err(err) => Err(err.into()),
            }
        });
        exchange.await?
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

    /// Kills the instance's worker at once (a request in flight on it fails) and, unless a request
    /// holds it (that request's end does it), waits until nothing it started is left; false when there
    /// is no such instance.
    pub async fn release(&self, instance_id: &str) -> bool {
        let removed = lock(&self.live).instances.remove(instance_id);
        let Some(instance) = removed else {
            return false;
        };
        if let Some(worker) = finish(&instance) {
            worker.retire().await;
        }
        tracing::info!(instance = instance_id, task = %instance.task_id, "instance released");
        true
    }

    /// Releases every instance idle for longer than `idle_release` (one with a request in flight is
    /// not idle); returns how many. Decided and removed under one lock, so an id reused meanwhile or a
    /// request that just found its instance is never hit.
    pub fn release_idle(&self) -> usize {
        let idle: Vec<(String, Arc<Instance>)> = {
            let mut live = lock(&self.live);
            let ids: Vec<String> = live
                .instances
                .iter()
                .filter(|(_, instance)| {
                    instance.idle_for() >= self.limits.idle_release
                        && instance.worker.try_lock().is_ok()
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| live.instances.remove(&id).map(|instance| (id, instance)))
                .collect()
        };
        for (id, instance) in &idle {
            drop(finish(instance));
            tracing::info!(instance = %id, task = %instance.task_id, "released an idle instance");
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
            if let Some(worker) = finish(&instance) {
                worker.retire().await;
            }
        }
        if let Some(spare) = self.spare.lock().await.take() {
            spare.abort();
            if let Ok(Ok(worker)) = spare.await {
                worker.retire().await;
            }
        }
    }
}

/// Kills an instance's worker and hands it over to be reaped (see [`Worker::retire`]), unless a request
/// holds it (that request drops it).
fn finish(instance: &Instance) -> Option<Worker> {
    instance.kill();
    instance
        .worker
        .try_lock()
        .ok()
        .and_then(|mut held| held.take())
}

/// Makes the workers' directory and clears the uid range, before the first worker (blocking). With a
/// uid per worker the directory is root's and only traversable (0711: no instance lists the others'
/// homes, each 0700 under it); with one user for all it is that user's, 0700.
fn prepare(directory: &std::path::Path, users: &Users) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let mode = if matches!(users, Users::PerInstance(_)) {
        0o711
    } else {
        0o700
    };
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(directory)
        .and_then(|()| match users {
            Users::Shared(user) => user.give(directory),
            _ => Ok(()),
        })
        .map_err(|err| format!("cannot create {}: {err}", directory.display()))?;
    if let Users::PerInstance(pool) = users {
        let swept = pool.sweep();
        if swept > 0 {
            tracing::warn!(
                uids = swept,
                "killed leftover processes of the training uids (a previous boxd's workers)"
            );
        }
    }
    Ok(())
}

/// A spare that is already there, in the slot's form.
fn ready(worker: Worker) -> Starting {
    tokio::spawn(async move { Ok(worker) })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::worker::EnvironmentKind;

    fn environment(directory: std::path::PathBuf) -> Arc<Environment> {
        let launch = Launch {
            python: "/nonexistent/python3".to_owned(),
            environment: EnvironmentKind::Bfcl,
            directory,
            start_timeout: Duration::from_secs(5),
            memory_max: 1 << 30,
            cpu_seconds: 10,
            processes_max: 8,
            users: Users::Own,
            network_namespace: false,
        };
        let limits = InstanceLimits {
            max_live: 1,
            idle_release: Duration::from_secs(60),
            call_timeout: Duration::from_secs(5),
        };
        Arc::new(Environment::new(launch, limits))
    }

    // The routes serve before the family starts: a `create` that comes first must not start a worker
    // in a directory not made yet (CI saw `cannot start the Python interpreter ...: No such file or
    // directory`, the missing working directory), nor before boxd stopped a previous boxd's leftovers.
    #[tokio::test]
    async fn a_worker_started_before_the_family_waits_for_its_directory() {
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let directory = scratch.path().join("workers");
        let environment = environment(directory.clone());
        let starting = environment.start_worker();
        let early = tokio::time::timeout(Duration::from_millis(200), async {
            while !starting.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            early.is_err(),
            "the worker start did not wait for the directory"
        );
        environment.prepare().await.expect("the directory is made");
        assert!(directory.is_dir());
        let started = starting.await.expect("the start task ends");
        let Err(WorkerError::NotStarted(reason)) = started else {
            panic!("a worker started with no interpreter");
        };
        assert!(reason.contains("/nonexistent/python3"), "{reason}");
    }
}
