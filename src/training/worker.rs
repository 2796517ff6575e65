//! One environment worker: a Python process (its source embedded, see [`EnvironmentKind`]) that imports
//! the environment library once and then serves at most one instance. It speaks JSON lines: a first line
//! saying whether the library and its data loaded, then one answer line per request line (the protocol
//! is written out at the top of `worker/protocol.py`). One process per instance is the isolation:
//! bfcl-eval keeps an episode's simulated state in module globals.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::tenancy::{Confinement, Lease, Users};
use crate::core::child::{self, ChildGroup, Grouping, OwnedGroup, StderrTail};
use crate::core::error::ApiError;
use crate::core::footprint::Held;

/// The environment a training sandbox serves (one per sandbox, as upstream), parsed from
/// `--training-env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvironmentKind {
    Bfcl,
    #[value(name = "appworld")]
    AppWorld,
}

impl EnvironmentKind {
    /// As upstream names it (`env_type`), and the worker's `--env`.
    pub fn name(self) -> &'static str {
        match self {
            EnvironmentKind::Bfcl => "bfcl",
            EnvironmentKind::AppWorld => "appworld",
        }
    }

    /// The worker's source for this environment: the protocol, this environment's code (and not the
    /// other's), then the loop; `worker/protocol.py` says how the three files fit.
    fn worker_source(self) -> &'static str {
        match self {
            EnvironmentKind::Bfcl => concat!(
                include_str!("worker/protocol.py"),
                include_str!("worker/bfcl.py"),
                include_str!("worker/main.py"),
            ),
            EnvironmentKind::AppWorld => concat!(
                include_str!("worker/protocol.py"),
                include_str!("worker/appworld.py"),
                include_str!("worker/main.py"),
            ),
        }
    }
}

impl std::fmt::Display for EnvironmentKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// The longest answer line read from a worker; a longer one is a broken worker, not a state.
pub const ANSWER_MAX: usize = 32 * 1024 * 1024;

/// Every worker of `launch`: boxd's child running the worker's source (for `GET /memory`).
pub fn workers(launch: &Launch) -> Held {
    Held::Children {
        program: launch.python.clone(),
        args: ["-u", "-c", launch.environment.worker_source()]
            .map(String::from)
            .to_vec(),
    }
}

/// How a worker is started: the same for every worker of this boxd.
#[derive(Debug, Clone)]
pub struct Launch {
    pub python: String,
    pub environment: EnvironmentKind,
    /// Where the workers' homes are (with a uid per worker, one directory each under it; else the
    /// workers' shared working directory). AppWorld writes its outputs under a worker's home.
    pub directory: PathBuf,
    /// How long importing the library and loading the data may take.
    pub start_timeout: Duration,
    /// The address space one worker process may map, in bytes (`RLIMIT_AS`): past it allocations fail
    /// in the worker (an error answer), not in its neighbours or boxd.
    pub memory_max: u64,
    /// Seconds of CPU time one process of a worker may use (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Processes (threads included) one instance may have at once (`RLIMIT_NPROC`, counted per uid: so
    /// only with a uid per worker).
    pub processes_max: u64,
    /// Who the workers run as (see `tenancy`).
    pub users: Users,
    /// Whether each worker gets a network namespace of its own (probed at start).
    pub network_namespace: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker could not start, or its library or data did not load; the text says which and how
    /// to fix it.
    #[error("{0}")]
    NotStarted(String),
    /// The worker answered that the request is wrong (400) or that the environment failed (500).
    #[error("{message}")]
    Refused { status: u16, message: String },
    #[error("the environment worker exited during {op} ({status}){last_words}")]
    Died {
        op: String,
        status: String,
        last_words: String,
    },
    #[error("the environment worker did not answer {op} within {seconds} s; it was stopped")]
    TimedOut { op: String, seconds: u64 },
    #[error("the environment worker broke the protocol during {op}: {detail}")]
    Protocol { op: String, detail: String },
}

impl WorkerError {
    /// Whether the worker is unusable after this error (its instance must go).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, WorkerError::Refused { .. })
    }
}

impl From<WorkerError> for ApiError {
    fn from(err: WorkerError) -> ApiError {
        match err {
            WorkerError::NotStarted(message) => ApiError::Unavailable {
                message,
                retry_after_seconds: 10,
            },
            WorkerError::Refused { status, message } => match status {
                400 => ApiError::BadRequest(message),
                404 => ApiError::NotFound(message),
                422 => ApiError::Unprocessable(message),
                _ => ApiError::Internal(message),
            },
            WorkerError::TimedOut { .. } => ApiError::GatewayTimeout(err.to_string()),
            WorkerError::Died { .. } | WorkerError::Protocol { .. } => {
                ApiError::BadGateway(err.to_string())
            }
        }
    }
}

/// A started worker whose library loaded. Dropping it kills its process group, then (with a uid of its
/// own) every process of its uid, in the background; [`Worker::retire`] does the same and waits.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    answers: BufReader<ChildStdout>,
    stderr: StderrTail,
    group: ChildGroup,
    /// Last: dropped after the group was killed.
    lease: Lease,
}

impl Worker {
    pub async fn start(launch: &Launch, name: String) -> Result<Worker, WorkerError> {
        let started = Instant::now();
        let (users, directory) = (launch.users.clone(), launch.directory.clone());
        let lease = tokio::task::spawn_blocking(move || Lease::take(&users, &directory))
            .await
            .map_err(|err| WorkerError::NotStarted(format!("the worker's user: {err}")))?
            .map_err(WorkerError::NotStarted)?;
        let own_uid = matches!(launch.users, Users::PerInstance(_));
        let confinement = Confinement::new(
            lease.identity.clone(),
            launch.network_namespace,
            launch.memory_max,
            launch.cpu_seconds,
            own_uid.then_some(launch.processes_max),
        );
        let mut command = child::command(&launch.python, Grouping::OwnGroup);
        if lease.identity.is_some() {
            // Whatever Python or the library keeps in a home (caches, settings) goes to the worker's
            // own directory, which its user was given.
            command.env("HOME", &lease.home);
        }
        if own_uid {
            // AppWorld's experiment outputs go under this worker's home, not a directory every
            // instance shares (see worker/appworld.py).
            command.env("BOXD_TRAINING_OWN_ROOT", "1");
        }
        // SAFETY: `apply` makes only async-signal-safe system calls on data prepared before the fork
        // (see its contract). It runs after `command`'s own hook (OOM score, parent-death signal).
        unsafe {
            command.pre_exec(move || confinement.apply());
        }
        let mut child = command
            .args(["-u", "-c", launch.environment.worker_source()])
            .args(["--env", launch.environment.name()])
            .current_dir(&lease.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| {
                WorkerError::NotStarted(format!(
                    "cannot start the Python interpreter {:?} for the {} environment: {err}",
                    launch.python, launch.environment
                ))
            })?;
        let group = ChildGroup::of(child.id(), Grouping::OwnGroup).ok_or_else(|| {
            WorkerError::NotStarted("the environment worker exited as it started".into())
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(WorkerError::NotStarted("worker pipes missing".into()));
        };
        let mut worker = Worker {
            child,
            stdin,
            answers: BufReader::new(stdout),
            stderr: StderrTail::forward(stderr, name),
            group,
            lease,
        };
        let greeting = match tokio::time::timeout(launch.start_timeout, worker.read_line()).await {
            Err(_) => {
                return Err(WorkerError::NotStarted(format!(
                    "the {} environment did not load within {} s{}",
                    launch.environment,
                    launch.start_timeout.as_secs(),
                    worker.stderr.text()
                )));
            }
            Ok(Err(detail)) => return Err(WorkerError::NotStarted(detail)),
            Ok(Ok(None)) => {
                let words = worker.stderr.last_words(Duration::from_millis(500)).await;
                let status = worker.exit_status().await;
                return Err(WorkerError::NotStarted(format!(
                    "the environment worker ({}) exited at start ({status}){words}",
                    launch.python
                )));
            }
            Ok(Ok(Some(line))) => line,
        };
        let greeting: Map<String, Value> = serde_json::from_slice(&greeting).map_err(|_| {
            WorkerError::NotStarted(format!(
                "unexpected first line from the environment worker: {}",
                String::from_utf8_lossy(&greeting)
            ))
        })?;
        if greeting.get("ready") != Some(&Value::Bool(true)) {
            let error = greeting
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the environment worker is not ready (no reason given)");
            return Err(WorkerError::NotStarted(error.to_owned()));
        }
        let library = greeting.get("library").and_then(Value::as_str);
        let tasks = greeting.get("tasks").and_then(Value::as_u64);
        tracing::info!(
            environment = %launch.environment,
            library = library.unwrap_or("?"),
            tasks = tasks.unwrap_or(0),
            ready_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "environment worker ready"
        );
        Ok(worker)
    }

    /// Kills the worker and everything it started, and waits until nothing of it is left (with a uid of
    /// its own: every process of that uid, even one that left the group with `setsid`).
    pub async fn retire(self) {
        let Worker { group, lease, .. } = self;
        drop(group);
        lease.end().await;
    }

    /// This worker's process group, to kill it while a request holds the worker.
    pub fn group(&self) -> Arc<OwnedGroup> {
        self.group.shared()
    }

    /// Sends `op` with `fields` and returns the answer's `data`, within `timeout`. After a fatal error
    /// (see [`WorkerError::is_fatal`]) the worker must be dropped.
    pub async fn ask(
        &mut self,
        op: &str,
        fields: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, WorkerError> {
        let mut request = fields;
        request.insert("op".into(), json!(op));
        let mut line = Value::Object(request).to_string();
        line.push('\n');
        let exchange = async {
            if self.stdin.write_all(line.as_bytes()).await.is_err()
                || self.stdin.flush().await.is_err()
            {
                return Ok(None);
            }
            self.read_line().await
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => {
                self.group.signal(libc::SIGKILL);
                return Err(WorkerError::TimedOut {
                    op: op.into(),
                    seconds: timeout.as_secs(),
                });
            }
            Ok(Err(detail)) => {
                return Err(WorkerError::Protocol {
                    op: op.into(),
                    detail,
                });
            }
            Ok(Ok(None)) => {
                let last_words = self.stderr.last_words(Duration::from_millis(300)).await;
                return Err(WorkerError::Died {
                    op: op.into(),
                    status: self.exit_status().await,
                    last_words,
                });
            }
            Ok(Ok(Some(answer))) => answer,
        };
        let mut answer: Map<String, Value> =
            serde_json::from_slice(&answer).map_err(|err| WorkerError::Protocol {
                op: op.into(),
                detail: format!("an answer that is not a JSON object ({err})"),
            })?;
        if answer.get("ok") == Some(&Value::Bool(true)) {
            return Ok(answer.remove("data").unwrap_or(Value::Null));
        }
        let status = answer
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|status| u16::try_from(status).ok())
            .unwrap_or(500);
        let message = match answer.remove("error") {
            Some(Value::String(message)) => message,
            _ => format!("the environment failed during {op} (no reason given)"),
        };
        Err(WorkerError::Refused { status, message })
    }

    /// One line from stdout, without its newline; `None` at end of stream; an error past
    /// [`ANSWER_MAX`] bytes.
    async fn read_line(&mut self) -> Result<Option<Vec<u8>>, String> {
        let mut line = Vec::new();
        loop {
            let buffer = self
                .answers
                .fill_buf()
                .await
                .map_err(|err| format!("reading from the environment worker failed: {err}"))?;
            if buffer.is_empty() {
                return Ok(None);
            }
            let (taken, done) = match buffer.iter().position(|&byte| byte == b'\n') {
                Some(end) => (end + 1, true),
                None => (buffer.len(), false),
            };
            let wanted = if done { taken - 1 } else { taken };
            if line.len().saturating_add(wanted) > ANSWER_MAX {
                return Err(format!(
                    "an answer longer than {} MiB",
                    ANSWER_MAX / (1024 * 1024)
                ));
            }
            line.extend_from_slice(&buffer[..wanted]);
            self.answers.consume(taken);
            if done {
                return Ok(Some(line));
            }
        }
    }

    /// How the worker ended, once its stdout closed (it is killed if it lingers).
    async fn exit_status(&mut self) -> String {
        let status = match tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await
        {
            Ok(Ok(status)) => status,
            _ => {
                self.group.signal(libc::SIGKILL);
                match self.child.wait().await {
                    Ok(status) => status,
                    Err(err) => return format!("unknown exit: {err}"),
                }
            }
        };
        describe_exit(status)
    }
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "unknown exit".into(),
    }
}
