//! Live processes: commands that outlive a request. Each runs in its own process group (a PTY session
//! when asked), its output kept in a bounded log addressed by byte offsets so any number of readers can
//! follow, fall behind, disconnect and re-attach; its exit status is kept for late readers until reaped.
//!
//! One table for the whole of boxd: the `processes` family's routes and the `sandboxd` family's gRPC
//! `ProcessService` start, follow, feed and signal the same processes, under the same limits.

pub mod output;
pub mod signals;
pub mod stdin;
mod terminal;

use crate::core::utf8::Utf8Boundary;
pub use output::StreamName;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::core::child::{self, Grouping, OwnedGroup};
use crate::core::confine::Workspace;
use crate::core::error::{ApiError, ApiResult};
use output::{OutputLog, ReadOut};
use stdin::{Input, Patience, Queued, StdinQueue};
use terminal::Terminal;

const READ_CHUNK: usize = 64 * 1024;
/// End-of-file character of a terminal in canonical mode: how "close stdin" reaches a PTY process.
const TERMINAL_EOF: u8 = 0x04;

pub type ProcessResult<T> = ApiResult<T>;

/// Refused for now (no room on a stdin queue, no resources to spawn): 503, retry in a second.
pub fn unavailable(message: String) -> ApiError {
    ApiError::Unavailable {
        message,
        retry_after_seconds: 1,
    }
}

#[derive(Debug, Clone)]
pub struct ProcessLimits {
    /// Running at once; starting one more is refused (429).
    pub max_running: usize,
    /// Kept (running or exited) at once: the oldest exited ones make room first.
    pub max_kept: usize,
    /// Output log cap per process; older output is dropped first.
    pub buffer_bytes: usize,
    /// How long an exited process (status and output) stays readable.
    pub retention: Duration,
    /// Between SIGTERM and SIGKILL when a timeout or kill ends a process group.
    pub kill_grace: Duration,
    /// How long output is still collected after the process exits, for children holding its pipes.
    pub drain: Duration,
}

/// A process to start, already checked for what only its caller knows how to ask (a shell string or an
/// argv, a timeout within bounds).
#[derive(Debug)]
pub struct Launch {
    /// The program and its arguments; the first is never empty.
    pub argv: Vec<String>,
    /// A workspace path, as the caller gave it ("" is the workspace).
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    /// A terminal of this size, or pipes.
    pub terminal: Option<TerminalSize>,
    /// Before the group gets SIGTERM (then SIGKILL after a grace).
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

impl TerminalSize {
    pub const DEFAULT: TerminalSize = TerminalSize { rows: 24, cols: 80 };

    pub fn checked(self) -> ApiResult<Self> {
        if (1..=1000).contains(&self.rows) && (1..=1000).contains(&self.cols) {
            Ok(self)
        } else {
            Err(ApiError::BadRequest(format!(
                "terminal size must be 1..=1000 rows and cols, got {}x{}",
                self.rows, self.cols
            )))
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum RunState {
    Running,
    Exited {
        exit_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        ended_at: SystemTime,
    },
}

/// What a status request, a listing and the final stream event report.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessStatus {
    pub id: String,
    pub pid: u32,
    pub command: Vec<String>,
    pub cwd: PathBuf,
    pub pty: Option<TerminalSize>,
    pub status: &'static str,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Offset just past the latest output: where a new reader starts to see only what comes next.
    pub output_end: u64,
}

pub struct LiveProcess {
    pub id: String,
    /// A small number of its own, counted from 1 in start order: the id of the gRPC `ProcessService`,
    /// whose ids are `int32`.
    pub number: i32,
    pid: u32,
    command: Vec<String>,
    cwd: PathBuf,
    started_at: SystemTime,
    terminal: Option<(Arc<Terminal>, Mutex<TerminalSize>)>,
    /// Its group (a terminal's: its session), signalled only while it is still the one started here.
    group: Arc<OwnedGroup>,
    state: Mutex<RunState>,
    output: Mutex<OutputLog>,
    /// Bumped on every output append and on exit; readers wait on it.
    changed: watch::Sender<u64>,
    /// Dropped at exit, which ends the task feeding stdin.
    input: Mutex<Option<StdinQueue>>,
}

impl LiveProcess {
    pub fn is_running(&self) -> bool {
        matches!(*lock(&self.state), RunState::Running)
    }

    /// Whether it runs on a terminal (which can be resized) rather than pipes.
    pub fn has_terminal(&self) -> bool {
        self.terminal.is_some()
    }

    /// Once it has ended: its exit code, or 128 + the signal that ended it, as a shell reports it.
    pub fn shell_exit_code(&self) -> Option<i32> {
        match *lock(&self.state) {
            RunState::Running => None,
            RunState::Exited {
                exit_code, signal, ..
            } => Some(
                exit_code
                    .or_else(|| signal.map(|signal| signal.saturating_add(128)))
                    .unwrap_or(-1),
            ),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub fn read_output(&self, offset: u64, max_bytes: usize) -> ReadOut {
        lock(&self.output).read_from(offset, max_bytes)
    }

    pub fn status(&self) -> ProcessStatus {
        let state = *lock(&self.state);
        let (status, exit_code, signal, timed_out, ended_at) = match state {
            RunState::Running => ("running", None, None, false, None),
            RunState::Exited {
                exit_code,
                signal,
                timed_out,
                ended_at,
            } => (
                "exited",
                exit_code,
                signal.map(signals::name),
                timed_out,
                Some(rfc3339(ended_at)),
            ),
        };
        ProcessStatus {
            id: self.id.clone(),
            pid: self.pid,
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            pty: self.terminal.as_ref().map(|(_, size)| *lock(size)),
            status,
            exit_code,
            signal,
            timed_out,
            started_at: rfc3339(self.started_at),
            ended_at,
            output_end: lock(&self.output).end(),
        }
    }

    /// Waits up to [`stdin::WAIT`] for room in the stdin queue, then answers 503.
    pub async fn write_stdin(&self, data: Bytes) -> ProcessResult<()> {
        self.send_input(Input::Data(data), Patience::Wait(stdin::WAIT))
            .await
    }

    /// As [`Self::write_stdin`], without waiting: for a WebSocket, whose loop must keep serving.
    pub async fn try_write_stdin(&self, data: Bytes) -> ProcessResult<()> {
        self.send_input(Input::Data(data), Patience::NoWait).await
    }

    pub async fn close_stdin(&self, patience: Patience) -> ProcessResult<()> {
        self.send_input(Input::Close, patience).await
    }

    async fn send_input(&self, input: Input, patience: Patience) -> ProcessResult<()> {
        let queue = lock(&self.input)
            .clone()
            .ok_or_else(|| ApiError::Conflict(format!("process {} has exited", self.id)))?;
        queue.send(&self.id, input, patience).await
    }

    /// Sends `signal` to everything the process started: its group and, on a terminal, its whole
    /// session. Members can outlive the leader (`cmd &`), so this still works after the exit, until
    /// nothing of it is left, or its id was handed to someone else's group (then 409, for good).
    pub async fn signal(&self, signal: i32) -> ApiResult<()> {
        let group = Arc::clone(&self.group);
        let reached = tokio::task::spawn_blocking(move || group.signal(signal))
            .await
            .unwrap_or(false);
        if reached {
            Ok(())
        } else {
            Err(ApiError::Conflict(format!(
                "process {} has exited and nothing it started is left",
                self.id
            )))
        }
    }

    pub fn resize(&self, size: TerminalSize) -> ApiResult<()> {
        let size = size.checked()?;
        let (terminal, shown) = self.terminal.as_ref().ok_or_else(|| {
            ApiError::Conflict(format!("process {} has no terminal to resize", self.id))
        })?;
        let mut shown = lock(shown);
        terminal
            .resize(size)
            .map_err(|err| ApiError::Internal(format!("resize failed: {err}")))?;
        *shown = size;
        Ok(())
    }

    fn append(&self, stream: StreamName, data: Bytes) {
        if data.is_empty() || !self.is_running() {
            return;
        }
        lock(&self.output).push(stream, data);
        self.changed.send_modify(|version| *version += 1);
    }

    fn finish(&self, exit_code: Option<i32>, signal: Option<i32>, timed_out: bool) {
        lock(&self.input).take();
        *lock(&self.state) = RunState::Exited {
            exit_code,
            signal,
            timed_out,
            ended_at: SystemTime::now(),
        };
        self.changed.send_modify(|version| *version += 1);
    }

    fn ended_at(&self) -> Option<SystemTime> {
        match *lock(&self.state) {
            RunState::Exited { ended_at, .. } => Some(ended_at),
            RunState::Running => None,
        }
    }
}

pub struct ProcessManager {
    workspace: Arc<Workspace>,
    limits: ProcessLimits,
    processes: Mutex<BTreeMap<String, Arc<LiveProcess>>>,
    /// Slots taken by running processes and by starts under way: reserved before the spawn, so
    /// concurrent starts cannot pass `max_running` together.
    running: Arc<AtomicUsize>,
    /// The next [`LiveProcess::number`].
    numbers: AtomicI32,
}

/// One of `max_running` slots, held from before the spawn until the process has exited (or the spawn
/// failed).
struct RunningSlot(Arc<AtomicUsize>);

impl Drop for RunningSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ProcessManager {
    /// Also starts the reaper of exited processes (it stops when the manager is dropped).
    pub fn new(workspace: Arc<Workspace>, limits: ProcessLimits) -> Arc<Self> {
        let manager = Arc::new(ProcessManager {
            workspace,
            limits,
            processes: Mutex::new(BTreeMap::new()),
            running: Arc::new(AtomicUsize::new(0)),
            numbers: AtomicI32::new(1),
        });
        let weak = Arc::downgrade(&manager);
        tokio::spawn(reap_exited(weak));
        manager
    }

    pub fn get(&self, id: &str) -> ApiResult<Arc<LiveProcess>> {
        lock(&self.processes)
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("no process {id}")))
    }

    /// By [`LiveProcess::number`]: a walk over at most `max_kept` records.
    pub fn get_number(&self, number: i32) -> ApiResult<Arc<LiveProcess>> {
        lock(&self.processes)
            .values()
            .find(|process| process.number == number)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("no process {number}")))
    }

    /// The pids of the processes still running, for `GET /memory` (each family that serves this table
    /// names them; the first in the family list counts them).
    pub fn running_pids(&self) -> Vec<u32> {
        lock(&self.processes)
            .values()
            .filter(|process| process.is_running())
            .map(|process| process.pid)
            .collect()
    }

    pub fn list(&self) -> Vec<ProcessStatus> {
        let processes: Vec<Arc<LiveProcess>> = lock(&self.processes).values().cloned().collect();
        let mut statuses: Vec<ProcessStatus> =
            processes.iter().map(|process| process.status()).collect();
        statuses.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        statuses
    }

    /// Kills whatever of the process is left (leader, group, terminal session) and forgets it.
    pub async fn remove(&self, id: &str) -> ApiResult<ProcessStatus> {
        let process = lock(&self.processes)
            .remove(id)
            .ok_or_else(|| ApiError::NotFound(format!("no process {id}")))?;
        let _ = process.signal(libc::SIGKILL).await;
        Ok(process.status())
    }

    /// Kills whatever is left of every process: boxd is stopping. Blocking (it may scan `/proc`).
    pub fn shutdown(&self) {
        let processes: Vec<Arc<LiveProcess>> = lock(&self.processes).values().cloned().collect();
        for process in processes {
            process.group.signal(libc::SIGKILL);
        }
    }

    pub async fn start(self: &Arc<Self>, launch: Launch) -> ProcessResult<Arc<LiveProcess>> {
        let Launch {
            argv: command,
            cwd: requested,
            env,
            terminal,
            timeout,
        } = launch;
        if command.first().is_none_or(|program| program.is_empty()) {
            return Err(ApiError::BadRequest("the command is empty".into()));
        }
        if let Some(name) = env
            .keys()
            .find(|name| name.is_empty() || name.contains(['=', '\0']))
        {
            return Err(ApiError::BadRequest(format!(
                "invalid environment variable name {name:?}"
            )));
        }
        let terminal = terminal.map(TerminalSize::checked).transpose()?;
        let cwd = {
            let workspace = Arc::clone(&self.workspace);
            tokio::task::spawn_blocking(move || {
                let resolved = workspace.resolve(&requested)?;
                if !resolved.real.is_dir() {
                    return Err(ApiError::BadRequest(format!(
                        "cwd {requested:?} is not a directory"
                    )));
                }
                Ok(resolved)
            })
            .await
            .map_err(ApiError::from)??
        };
        let slot = self.reserve()?;

        let spawned = spawn(&command, &cwd.real, &env, terminal)
            .map_err(|err| crate::core::child::spawn_failure(&command[0], &err))?;
        let (changed, _) = watch::channel(0);
        let process = Arc::new(LiveProcess {
            id: new_id(),
            number: self.numbers.fetch_add(1, Ordering::Relaxed),
            pid: spawned.pid,
            command,
            cwd: cwd.shown,
            started_at: SystemTime::now(),
            terminal: spawned.master.map(|master| {
                let size = terminal.unwrap_or(TerminalSize::DEFAULT);
                (master, Mutex::new(size))
            }),
            group: spawned.group,
            state: Mutex::new(RunState::Running),
            output: Mutex::new(OutputLog::new(self.limits.buffer_bytes)),
            changed,
            input: Mutex::new(Some(spawned.input)),
        });
        let readers = spawned
            .readers
            .into_iter()
            .map(|(stream, reader)| spawn_reader(Arc::downgrade(&process), stream, reader))
            .collect();
        tokio::spawn(supervise(
            Arc::clone(&process),
            spawned.child,
            readers,
            timeout,
            self.limits.clone(),
            slot,
        ));
        self.keep(Arc::clone(&process));
        tracing::info!(id = %process.id, pid = process.pid, pty = terminal.is_some(), "process started");
        Ok(process)
    }

    /// Takes one of `max_running` slots, or refuses the start (429).
    fn reserve(&self) -> ApiResult<RunningSlot> {
        let max = self.limits.max_running;
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                (taken < max).then_some(taken + 1)
            })
            .map(|_| RunningSlot(Arc::clone(&self.running)))
            .map_err(|taken| {
                ApiError::TooManyRequests(format!(
                    "{taken} processes are running or starting, the limit is {max}; kill one first"
                ))
            })
    }

    /// Keeps the record; past `max_kept`, forgets the longest-exited process.
    fn keep(&self, process: Arc<LiveProcess>) {
        let mut processes = lock(&self.processes);
        processes.insert(process.id.clone(), process);
        while processes.len() > self.limits.max_kept {
            let oldest = processes
                .values()
                .filter_map(|p| p.ended_at().map(|at| (at, p.id.clone())))
                .min();
            match oldest {
                Some((_, id)) => {
                    processes.remove(&id);
                }
                None => break,
            }
        }
    }
}

/// Live processes keep their group for as long as their record lives (signals, `DELETE`, eviction) and
/// stop it themselves, so they hold the group itself rather than a [`child::ChildGroup`].
fn owned_group(pid: u32, grouping: Grouping) -> Arc<OwnedGroup> {
    Arc::new(OwnedGroup::new(pid, grouping == Grouping::TerminalSession))
}

struct Spawned {
    pid: u32,
    child: tokio::process::Child,
    group: Arc<OwnedGroup>,
    master: Option<Arc<Terminal>>,
    input: StdinQueue,
    readers: Vec<(StreamName, Reader)>,
}

enum Reader {
    Pipe(Box<dyn AsyncRead + Send + Unpin>),
    Terminal(Arc<Terminal>),
}

fn spawn(
    argv: &[String],
    cwd: &std::path::Path,
    env: &BTreeMap<String, String>,
    terminal: Option<TerminalSize>,
) -> std::io::Result<Spawned> {
    let grouping = match terminal {
        None => Grouping::OwnGroup,
        Some(_) => Grouping::TerminalSession,
    };
    let mut command = child::command(&argv[0], grouping);
    command.args(&argv[1..]).current_dir(cwd).envs(env);
    let (input, inputs) = StdinQueue::new();
    match terminal {
        None => {
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command.spawn()?;
            let pid = child.id().ok_or_else(|| std::io::Error::other("no pid"))?;
            let group = owned_group(pid, grouping);
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(std::io::Error::other("child pipes missing"));
            };
            tokio::spawn(feed_pipe(stdin, inputs));
            Ok(Spawned {
                pid,
                child,
                group,
                master: None,
                input,
                readers: vec![
                    (StreamName::Stdout, Reader::Pipe(Box::new(stdout))),
                    (StreamName::Stderr, Reader::Pipe(Box::new(stderr))),
                ],
            })
        }
        Some(size) => {
            let (master, slave) = terminal::open(size)?;
            command
                .stdin(slave.try_clone()?)
                .stdout(slave.try_clone()?)
                .stderr(slave);
            if !env.contains_key("TERM") {
                command.env("TERM", "xterm-256color");
            }
            let child = command.spawn()?;
            // Only the child holds the slave now, so the master's reads end when it and its
            // descendants are done with the terminal.
            drop(command);
            let pid = child.id().ok_or_else(|| std::io::Error::other("no pid"))?;
            let group = owned_group(pid, grouping);
            let master = Arc::new(master);
            tokio::spawn(feed_terminal(Arc::clone(&master), inputs));
            Ok(Spawned {
                pid,
                child,
                group,
                master: Some(Arc::clone(&master)),
                input,
                readers: vec![(StreamName::Pty, Reader::Terminal(master))],
            })
        }
    }
}

async fn feed_pipe(
    mut stdin: tokio::process::ChildStdin,
    mut inputs: mpsc::UnboundedReceiver<Queued>,
) {
    while let Some(queued) = inputs.recv().await {
        match &queued.input {
            Input::Data(data) => {
                if stdin.write_all(data).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            Input::Close => break,
        }
    }
}

async fn feed_terminal(terminal: Arc<Terminal>, mut inputs: mpsc::UnboundedReceiver<Queued>) {
    while let Some(queued) = inputs.recv().await {
        let data = match &queued.input {
            Input::Data(data) => data.clone(),
            Input::Close => Bytes::from_static(&[TERMINAL_EOF]),
        };
        if terminal.write_all(&data).await.is_err() {
            break;
        }
    }
}

fn spawn_reader(process: Weak<LiveProcess>, stream: StreamName, reader: Reader) -> JoinHandle<()> {
    let mut delivery = Delivery {
        process,
        stream,
        boundary: Utf8Boundary::default(),
    };
    let mut buffer = vec![0u8; READ_CHUNK];
    tokio::spawn(async move {
        match reader {
            Reader::Pipe(mut pipe) => {
                while delivery.deliver(pipe.read(&mut buffer).await, &buffer) {}
            }
            // A terminal's reads end with EIO once every holder of its other end has closed it.
            Reader::Terminal(terminal) => {
                while delivery.deliver(terminal.read(&mut buffer).await, &buffer) {}
            }
        }
    })
}

/// Hands one stream's reads to the process's log, cut at character boundaries.
struct Delivery {
    process: Weak<LiveProcess>,
    stream: StreamName,
    boundary: Utf8Boundary,
}

impl Delivery {
    /// Appends what a read returned; false once the stream ended (or the process is gone).
    fn deliver(&mut self, read: std::io::Result<usize>, buffer: &[u8]) -> bool {
        let Some(process) = self.process.upgrade() else {
            return false;
        };
        match read {
            Ok(n) if n > 0 => {
                process.append(self.stream, self.boundary.split(&buffer[..n]));
                true
            }
            _ => {
                process.append(self.stream, self.boundary.finish());
                false
            }
        }
    }
}

/// Waits for the exit (enforcing the timeout on the whole group), lets the readers drain, then records
/// the exit so streams end after the last output.
async fn supervise(
    process: Arc<LiveProcess>,
    mut child: tokio::process::Child,
    readers: Vec<JoinHandle<()>>,
    timeout: Option<Duration>,
    limits: ProcessLimits,
    slot: RunningSlot,
) {
    let mut timed_out = false;
    let status = match timeout {
        None => child.wait().await,
        Some(timeout) => match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                timed_out = true;
                tracing::info!(id = %process.id, ?timeout, "process timed out; SIGTERM to its group");
                let _ = process.signal(libc::SIGTERM).await;
                match tokio::time::timeout(limits.kill_grace, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        let _ = process.signal(libc::SIGKILL).await;
                        child.wait().await
                    }
                }
            }
        },
    };
    process.group.leader_reaped();
    if timed_out {
        // Members that ignored TERM get KILL on schedule, whatever the leader did.
        let process = Arc::clone(&process);
        tokio::spawn(async move {
            tokio::time::sleep(limits.kill_grace).await;
            let _ = process.signal(libc::SIGKILL).await;
        });
    }
    let drain_until = crate::core::deadline::Deadline::after(limits.drain).instant();
    for reader in readers {
        let _ = tokio::time::timeout_at(drain_until, reader).await;
    }
    use std::os::unix::process::ExitStatusExt;
    let (exit_code, signal) = match &status {
        Ok(status) => (status.code(), status.signal()),
        Err(_) => (None, None),
    };
    process.finish(exit_code, signal, timed_out);
    drop(slot);
    tracing::info!(id = %process.id, ?exit_code, ?signal, timed_out, "process exited");
    // Nothing left of the group now means it is gone for good: later signals must not reach whoever
    // gets its id next. Signal 0 only looks.
    let group = Arc::clone(&process.group);
    let _ = tokio::task::spawn_blocking(move || group.signal(0)).await;
}

async fn reap_exited(manager: Weak<ProcessManager>) {
    let period = match manager.upgrade() {
        Some(manager) => {
            (manager.limits.retention / 2).clamp(Duration::from_millis(100), Duration::from_secs(5))
        }
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let retention = manager.limits.retention;
        lock(&manager.processes).retain(|_, process| {
            process
                .ended_at()
                .and_then(|ended| ended.elapsed().ok())
                .is_none_or(|age| age < retention)
        });
    }
}

fn new_id() -> String {
    let mut random = [0u8; 6];
    let _ = getrandom::fill(&mut random);
    format!("p-{}", hex::encode(random))
}

fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
