//! sandboxd's `ProcessService` (`spec/process/v1/process.proto` of agent-sandbox) over gRPC: `Start`
//! streams a process of boxd's one live-process table (`core::live`: the same processes
//! `/processes` lists and drives), `Execute` runs one to its end (`run`), `WriteStdin`, `SendSignal`
//! and `ResizeTTY` act on the table's processes by their number. Beyond the reference daemon: an exit
//! by signal N reports 128+N, and a deadline or a cancelled `Start` ends the whole process group.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::paths::workspace_path;
use super::pb::process_service_server::ProcessService;
use super::pb::{
    ExecuteRequest, ExecuteResponse, ExitEvent, InitEvent, ProcessConfig, ResizeTtyRequest,
    ResizeTtyResponse, SendSignalRequest, SendSignalResponse, Signal, StartRequest, StartResponse,
    WriteStdinRequest, WriteStdinResponse, start_response::Event, write_stdin_request::Payload,
};
use super::run::run_to_end;
use crate::core::admission::Admission;
use crate::core::confine::Workspace;
use crate::core::error::ApiError;
use crate::core::live::stdin::{self, Patience};
use crate::core::live::{Launch, LiveProcess, ProcessManager, StreamName, TerminalSize};

/// Output read from the table per stream event.
const EVENT_BYTES: usize = 64 * 1024;

pub struct Processes {
    pub live: Arc<ProcessManager>,
    pub workspace: Arc<Workspace>,
    /// How long an `Execute` without a `grpc-timeout` may run (`--sandboxd-exec-timeout`).
    pub exec_timeout: Duration,
    /// The gate one-shot commands share with the shell family.
    pub commands: Admission,
}

/// An [`ApiError`] as the gRPC status a client can act on.
fn status_of(err: ApiError) -> Status {
    let message = err.to_string();
    match err {
        ApiError::BadRequest(_) | ApiError::Unprocessable(_) => Status::invalid_argument(message),
        ApiError::Forbidden(_) => Status::permission_denied(message),
        ApiError::NotFound(_) => Status::not_found(message),
        ApiError::Conflict(_) => Status::failed_precondition(message),
        ApiError::RangeNotSatisfiable(_) => Status::out_of_range(message),
        ApiError::PayloadTooLarge(_)
        | ApiError::InsufficientStorage(_)
        | ApiError::TooManyRequests(_)
        | ApiError::Busy { .. } => Status::resource_exhausted(message),
        ApiError::BadGateway(_) | ApiError::Unavailable { .. } => Status::unavailable(message),
        ApiError::GatewayTimeout(_) => Status::deadline_exceeded(message),
        ApiError::Internal(_) => Status::internal(message),
    }
}

/// Whether `program` names something to run: an absolute path that exists, a relative path (the spawn's
/// own check decides), or a name found on the `PATH` the child gets (its own, else
/// boxd's).
fn program_is_found(program: &str, path: Option<String>) -> bool {
    if program.starts_with('/') {
        return std::path::Path::new(program).exists();
    }
    if program.contains('/') {
        return true;
    }
    let path = path
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
}

/// The caller's deadline, from the `grpc-timeout` header (gRPC over HTTP/2: up to 8 digits and a unit).
fn deadline_of<T>(request: &Request<T>) -> Option<Duration> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let unit_at = value.len().checked_sub(1)?;
    let (digits, unit) = value.split_at(unit_at);
    let amount: u64 = digits.parse().ok()?;
    match unit {
        "H" => amount.checked_mul(3600).map(Duration::from_secs),
        "M" => amount.checked_mul(60).map(Duration::from_secs),
        "S" => Some(Duration::from_secs(amount)),
        "m" => Some(Duration::from_millis(amount)),
        "u" => Some(Duration::from_micros(amount)),
        "n" => Some(Duration::from_nanos(amount)),
        _ => None,
    }
}

/// What a `ProcessConfig` asks to run.
struct Command {
    /// Non-empty, its first element too.
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    /// As the client sent it ("" when absent).
    cwd: String,
}

fn command_of(config: Option<ProcessConfig>) -> Result<Command, ApiError> {
    let config = config.unwrap_or_default();
    if config
        .command
        .first()
        .is_none_or(|program| program.is_empty())
    {
        return Err(ApiError::BadRequest("command is required".into()));
    }
    Ok(Command {
        argv: config.command,
        env: config.env_vars.into_iter().collect(),
        cwd: config.cwd.unwrap_or_default(),
    })
}

impl Processes {
    fn process(&self, number: i32) -> Result<Arc<LiveProcess>, ApiError> {
        self.live
            .get_number(number)
            .map_err(|_| ApiError::NotFound(format!("process {number} not found")))
    }
}

type StartStream = Pin<Box<dyn Stream<Item = Result<StartResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ProcessService for Processes {
    type StartStream = StartStream;

    async fn start(&self, request: Request<StartRequest>) -> Result<Response<StartStream>, Status> {
        let timeout = deadline_of(&request);
        let StartRequest { config, pty } = request.into_inner();
        let Command { argv, env, cwd } = command_of(config).map_err(status_of)?;
        let terminal = pty.map(|pty| {
            if pty.cols == 0 || pty.rows == 0 {
                return TerminalSize::DEFAULT;
            }
            TerminalSize {
                rows: u16::try_from(pty.rows).unwrap_or(u16::MAX),
                cols: u16::try_from(pty.cols).unwrap_or(u16::MAX),
            }
        });
        let (program, path) = (
            argv.first().cloned().unwrap_or_default(),
            env.get("PATH").cloned(),
        );
        let found = tokio::task::spawn_blocking({
            let program = program.clone();
            move || program_is_found(&program, path)
        })
        .await
        .unwrap_or(true);
        if !found {
            // sandboxd's answer for a program that is not there (as `Execute` gives from its spawn).
            return Err(Status::not_found(format!(
                "cannot start {program:?}: no such program"
            )));
        }
        let launch = Launch {
            argv,
            cwd: workspace_path(self.workspace.root(), &cwd),
            env,
            terminal,
            timeout,
        };
        let process = self.live.start(launch).await.map_err(status_of)?;
        Ok(Response::new(Box::pin(follow(process))))
    }

    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        // A call without a deadline of its own gets the legacy `/execute`'s: none would hold a process
        // and its output buffers for ever.
        let timeout = deadline_of(&request).unwrap_or(self.exec_timeout);
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        let Command { argv, env, cwd } =
            command_of(request.into_inner().config).map_err(status_of)?;
        let cwd = {
            let workspace = Arc::clone(&self.workspace);
            let requested = workspace_path(workspace.root(), &cwd);
            tokio::task::spawn_blocking(move || {
                let resolved = workspace.resolve(&requested)?;
                if !resolved.real.is_dir() {
                    return Err(ApiError::NotFound(format!(
                        "cwd {cwd:?} is not a directory"
                    )));
                }
                Ok(resolved.real)
            })
            .await
            .map_err(|err| status_of(err.into()))?
            .map_err(status_of)?
        };
        let _slot = self.commands.enter().await.map_err(status_of)?;
        let finished = run_to_end(&argv, &cwd, &env, deadline)
            .await
            .map_err(status_of)?;
        if finished.timed_out {
            return Err(Status::deadline_exceeded(
                "the command passed the call's deadline; its process group was killed",
            ));
        }
        Ok(Response::new(ExecuteResponse {
            exit_code: finished.exit_code,
            stdout: finished.stdout,
            stderr: finished.stderr,
        }))
    }

    async fn write_stdin(
        &self,
        request: Request<WriteStdinRequest>,
    ) -> Result<Response<WriteStdinResponse>, Status> {
        let WriteStdinRequest {
            process_id,
            payload,
        } = request.into_inner();
        let process = self.process(process_id).map_err(status_of)?;
        match payload {
            Some(Payload::Input(input)) => process.write_stdin(Bytes::from(input)).await,
            Some(Payload::Eof(())) => process.close_stdin(Patience::Wait(stdin::WAIT)).await,
            None => Ok(()),
        }
        .map_err(status_of)?;
        Ok(Response::new(WriteStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        let request = request.into_inner();
        let signal = match Signal::try_from(request.signal) {
            Ok(Signal::Sigint) => libc::SIGINT,
            Ok(Signal::Sigterm) => libc::SIGTERM,
            Ok(Signal::Sigkill) => libc::SIGKILL,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "unsupported or unspecified signal {}",
                    request.signal
                )));
            }
        };
        let process = self.process(request.process_id).map_err(status_of)?;
        process.signal(signal).await.map_err(status_of)?;
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn resize_tty(
        &self,
        request: Request<ResizeTtyRequest>,
    ) -> Result<Response<ResizeTtyResponse>, Status> {
        let request = request.into_inner();
        let process = self.process(request.process_id).map_err(status_of)?;
        if !process.has_terminal() {
            return Err(Status::failed_precondition(format!(
                "process {} has no PTY",
                request.process_id
            )));
        }
        let size = TerminalSize {
            rows: u16::try_from(request.rows).unwrap_or(u16::MAX),
            cols: u16::try_from(request.cols).unwrap_or(u16::MAX),
        };
        process.resize(size).map_err(status_of)?;
        Ok(Response::new(ResizeTtyResponse {}))
    }
}

/// Kills the process group when the `Start` stream is dropped before the exit was sent: the client
/// cancelled, went away or passed its deadline.
struct StopOnDrop(Option<Arc<LiveProcess>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(process) = self.0.take()
            && process.is_running()
        {
            tracing::info!(id = %process.id, "Start stream ended before the process; killing its group");
            tokio::spawn(async move {
                let _ = process.signal(libc::SIGKILL).await;
            });
        }
    }
}

struct Following {
    process: Arc<LiveProcess>,
    changed: watch::Receiver<u64>,
    offset: u64,
    pending: VecDeque<StartResponse>,
    done: bool,
    guard: StopOnDrop,
}

/// The `Start` stream: `InitEvent` with the process's number, its output as it comes (a terminal's as
/// stdout), then `ExitEvent`.
fn follow(process: Arc<LiveProcess>) -> impl Stream<Item = Result<StartResponse, Status>> + Send {
    let init = StartResponse {
        event: Some(Event::Init(InitEvent {
            process_id: process.number,
        })),
    };
    let following = Following {
        changed: process.subscribe(),
        offset: 0,
        pending: VecDeque::from([init]),
        done: false,
        guard: StopOnDrop(Some(Arc::clone(&process))),
        process,
    };
    futures_util::stream::unfold(following, |mut following| async move {
        loop {
            if let Some(event) = following.pending.pop_front() {
                return Some((Ok(event), following));
            }
            if following.done {
                return None;
            }
            // Whether it ran before the read: output is appended only while it runs, so a read after
            // it stopped running has everything.
            let running = following.process.is_running();
            let page = following.process.read_output(following.offset, EVENT_BYTES);
            if page.dropped > 0 {
                tracing::warn!(id = %following.process.id, bytes = page.dropped, "a slow Start reader lost output");
            }
            let advanced = page.next_offset != following.offset;
            following.offset = page.next_offset;
            for chunk in page.chunks {
                let data = chunk.data.to_vec();
                following.pending.push_back(StartResponse {
                    event: Some(match chunk.stream {
                        StreamName::Stderr => Event::Stderr(data),
                        StreamName::Stdout | StreamName::Pty => Event::Stdout(data),
                    }),
                });
            }
            if advanced {
                continue;
            }
            if !running {
                let exit_code = following.process.shell_exit_code().unwrap_or(-1);
                following.pending.push_back(StartResponse {
                    event: Some(Event::Exit(ExitEvent { exit_code })),
                });
                following.done = true;
                following.guard.0 = None;
                continue;
            }
            if following.changed.changed().await.is_err() {
                // The table let go of the process: nothing more will come.
                following.done = true;
            }
        }
    })
}
