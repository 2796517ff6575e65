//! `run_shell_command`: `/bin/sh -c` in the workspace, in its own process group, with a timeout that kills
//! the whole group and output caps that keep the process safe from a flood.

mod family;
pub use family::{ShellArgs, family, limits};

mod output;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, sleep_until};

use crate::core::admission::Admission;
use crate::core::child::{self, ChildGroup, Grouping};
use crate::core::deadline::Deadline;
use crate::core::error::ApiError;
use crate::core::utf8::Utf8Boundary;
use crate::tools::{
    BadArguments, CallContext, CallToolResult, ContentItem, GENERIC_GROUP, ProgressSink, Tool,
    ToolResult, ToolSpec, timeout_argument,
};
use output::CappedOutput;

/// The exit code `timeout(1)` uses; scripts and agents already read it as "timed out".
const TIMED_OUT_EXIT_CODE: i32 = 124;
const READ_CHUNK: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ShellLimits {
    pub default_timeout: Duration,
    pub max_output_bytes: usize,
    /// Between SIGTERM and SIGKILL of a timed-out group.
    pub kill_grace: Duration,
    /// How long output is still collected after the shell exits, for a background child holding the pipe.
    pub drain: Duration,
}

/// The tool's arguments, as upstream's server declared them.
#[derive(Debug, Deserialize, JsonSchema)]
struct ShellRequest {
    /// Shell command to execute
    command: String,
    /// Seconds before the command's process group is killed (default set by the server)
    timeout: Option<f64>,
}

#[derive(Debug)]
pub struct ShellOutcome {
    pub stdout: String,
    pub stderr: String,
    pub returncode: i32,
}

impl ShellOutcome {
    /// Upstream's result shape: stdout always, stderr only when non-empty, then returncode;
    /// `isError` means "stderr is non-empty".
    pub fn into_result(self) -> CallToolResult {
        let mut content = vec![ContentItem::described_text("stdout", self.stdout)];
        let is_error = !self.stderr.is_empty();
        if is_error {
            content.push(ContentItem::described_text("stderr", self.stderr));
        }
        content.push(ContentItem::described_text(
            "returncode",
            self.returncode.to_string(),
        ));
        CallToolResult::new(content, is_error)
    }
}

/// `admission` caps the commands running at once (blocking and streamed calls alike).
pub fn tool(workspace: PathBuf, limits: ShellLimits, admission: Admission) -> Tool {
    let settings = Arc::new((workspace, limits, admission));
    ToolSpec::declare::<ShellRequest>(GENERIC_GROUP, "run_shell_command", "Run a shell command.")
        .bad_arguments(BadArguments::Unprocessable)
        .handler(move |request, context: CallContext| {
            call(Arc::clone(&settings), request, context.progress)
        })
}

async fn call(
    settings: Arc<(PathBuf, ShellLimits, Admission)>,
    request: ShellRequest,
    progress: Option<ProgressSink>,
) -> ToolResult {
    let (workspace, limits, admission) = &*settings;
    if request.command.trim().is_empty() {
        return Err(ApiError::BadRequest("Command is required.".into()).into());
    }
    if request.command.contains('\0') {
        return Err(ApiError::BadRequest(
            "command contains a NUL byte, which no shell command can hold".into(),
        )
        .into());
    }
    let timeout = timeout_argument(request.timeout, limits.default_timeout)?;
    // Held until the command's outcome is in: its processes are gone or killed by then.
    let _place = admission.enter().await?;
    let outcome = run(
        &request.command,
        workspace,
        timeout,
        limits,
        progress.as_ref(),
    )
    .await
    .map_err(|err| child::spawn_failure("/bin/sh", &err))?;
    Ok(outcome.into_result())
}

pub async fn run(
    command: &str,
    cwd: &Path,
    timeout: Duration,
    limits: &ShellLimits,
    progress: Option<&ProgressSink>,
) -> std::io::Result<ShellOutcome> {
    let mut child = child::spawn_piped("/bin/sh", &["-c", command], cwd)?;
    // Until the shell exits, dropping this (the caller went away: a client disconnect drops the request
    // future) kills the group, so an abandoned command does not run on unobserved.
    let mut group = ChildGroup::of(Some(child.id()), Grouping::OwnGroup);
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("child pipes missing"));
    };

    let mut stdout_buf = CappedOutput::new(limits.max_output_bytes);
    let mut stderr_buf = CappedOutput::new(limits.max_output_bytes);
    let mut stdout_chunk = vec![0u8; READ_CHUNK];
    let mut stderr_chunk = vec![0u8; READ_CHUNK];
    let (mut stdout_open, mut stderr_open) = (true, true);
    let mut stdout_progress = Progress::new(progress, "stdout");
    let mut stderr_progress = Progress::new(progress, "stderr");

    let started = Instant::now();
    let timeout_at = Deadline::from(started, timeout).instant();
    let mut exit_status = None;
    let mut drain_until = None;
    let mut timed_out = false;

    loop {
        if exit_status.is_some() && !stdout_open && !stderr_open {
            break;
        }
        tokio::select! {
            read = stdout.read(&mut stdout_chunk), if stdout_open => match read {
                Ok(0) | Err(_) => {
                    stdout_open = false;
                    stdout_progress.finish();
                }
                Ok(n) => {
                    stdout_buf.push(&stdout_chunk[..n]);
                    stdout_progress.report(&stdout_chunk[..n]);
                }
            },
            read = stderr.read(&mut stderr_chunk), if stderr_open => match read {
                Ok(0) | Err(_) => {
                    stderr_open = false;
                    stderr_progress.finish();
                }
                Ok(n) => {
                    stderr_buf.push(&stderr_chunk[..n]);
                    stderr_progress.report(&stderr_chunk[..n]);
                }
            },
            status = child.wait(), if exit_status.is_none() => {
                exit_status = Some(status?);
                if let Some(group) = group.as_mut() {
                    group.leader_reaped();
                    // What the shell left running in the background may go on (as upstream lets it),
                    // unless the command timed out.
                    if !timed_out {
                        group.disarm();
                    }
                }
                drain_until = Some(Deadline::after(limits.drain).instant());
            },
            _ = sleep_until(timeout_at), if !timed_out && exit_status.is_none() => {
                timed_out = true;
                if let Some(group) = group.take() {
                    tracing::info!(?timeout, "command timed out; stopping its process group");
                    group.terminate_then_kill(limits.kill_grace);
                }
            },
            _ = sleep_until(drain_until.unwrap_or(timeout_at)), if drain_until.is_some() => break,
        }
    }

    let mut stderr_text = stderr_buf.into_text();
    let returncode = if timed_out {
        if !stderr_text.is_empty() && !stderr_text.ends_with('\n') {
            stderr_text.push('\n');
        }
        stderr_text.push_str(&format!(
            "[boxd: command timed out after {}s; its process group was killed]\n",
            timeout.as_secs_f64()
        ));
        TIMED_OUT_EXIT_CODE
    } else {
        exit_status.map(exit_code_like_python).unwrap_or(-1)
    };
    Ok(ShellOutcome {
        stdout: stdout_buf.into_text(),
        stderr: stderr_text,
        returncode,
    })
}

/// Output events of a streaming call, for one stream, cut at UTF-8 character boundaries.
struct Progress<'a> {
    sink: Option<&'a ProgressSink>,
    stream: &'static str,
    boundary: Utf8Boundary,
}

impl<'a> Progress<'a> {
    fn new(sink: Option<&'a ProgressSink>, stream: &'static str) -> Self {
        Progress {
            sink,
            stream,
            boundary: Utf8Boundary::default(),
        }
    }

    fn report(&mut self, read: &[u8]) {
        if self.sink.is_some() {
            let text = self.boundary.split(read);
            self.send(&text);
        }
    }

    fn finish(&mut self) {
        if self.sink.is_some() {
            let rest = self.boundary.finish();
            self.send(&rest);
        }
    }

    fn send(&self, text: &[u8]) {
        if let (Some(sink), false) = (self.sink, text.is_empty()) {
            let event = json!({
                "type": "output",
                "stream": self.stream,
                "data": String::from_utf8_lossy(text),
            });
            // Never waits: a caller that stops reading loses progress events, never the command's
            // timeout or its result (which carries the whole output).
            sink.send(event);
        }
    }
}

/// Upstream (Python's asyncio) reports death by signal N as `-N`; keep that.
fn exit_code_like_python(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| -signal))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ShellLimits {
        ShellLimits {
            default_timeout: Duration::from_secs(10),
            max_output_bytes: 1024,
            kill_grace: Duration::from_millis(500),
            drain: Duration::from_millis(100),
        }
    }

    #[tokio::test]
    async fn splits_streams_and_reports_exit_code() {
        let outcome = run(
            "echo out; echo err >&2; exit 3",
            Path::new("/"),
            Duration::from_secs(5),
            &limits(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(outcome.stdout, "out\n");
        assert_eq!(outcome.stderr, "err\n");
        assert_eq!(outcome.returncode, 3);
    }

    #[tokio::test]
    async fn death_by_signal_is_negative() {
        let outcome = run(
            "kill -9 $$",
            Path::new("/"),
            Duration::from_secs(5),
            &limits(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(outcome.returncode, -9);
    }

    #[tokio::test]
    async fn timeout_kills_and_reports_124() {
        let outcome = run(
            "echo started; sleep 30",
            Path::new("/"),
            Duration::from_millis(300),
            &limits(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(outcome.returncode, 124);
        assert_eq!(outcome.stdout, "started\n");
        assert!(outcome.stderr.contains("timed out"));
    }
}
