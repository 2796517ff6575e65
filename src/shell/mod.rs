//! `run_shell_command`: `/bin/sh -c` in the workspace, in its own process group, with a timeout that kills
//! the whole group and output caps that keep the process safe from a flood.

mod family;
pub use family::{ShellArgs, family, limits};

mod output;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::core::admission::Admission;
use crate::core::child::{
    self, AtTimeout, OutputSink, RunBounds, exit_code_like_python, run_captured,
};
use crate::core::error::ApiError;
use crate::core::utf8::Utf8Boundary;
use crate::tools::{
    BadArguments, CallContext, CallToolResult, ContentItem, GENERIC_GROUP, ProgressSink, Tool,
    ToolResult, ToolSpec, timeout_argument,
};
use output::CappedOutput;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The exit code `timeout(1)` uses; scripts and agents already read it as "timed out".
const TIMED_OUT_EXIT_CODE: i32 = 124;

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
    let mut stdout = Stream {
        kept: CappedOutput::new(limits.max_output_bytes),
        progress: Progress::new(progress, "stdout"),
    };
    let mut stderr = Stream {
        kept: CappedOutput::new(limits.max_output_bytes),
        progress: Progress::new(progress, "stderr"),
    };
    let bounds = RunBounds {
        timeout,
        drain: limits.drain,
        at_timeout: AtTimeout::TerminateThenKill {
            grace: limits.kill_grace,
        },
    };
    let finished = run_captured(
        "/bin/sh",
        &["-c", command],
        cwd,
        &bounds,
        &mut stdout,
        &mut stderr,
    )
    .await?;
    let mut stderr_text = stderr.kept.into_text();
    let returncode = if finished.timed_out {
        if !stderr_text.is_empty() && !stderr_text.ends_with('\n') {
            stderr_text.push('\n');
        }
        stderr_text.push_str(&format!(
            "[boxd: command timed out after {}s; its process group was killed]\n",
            timeout.as_secs_f64()
        ));
        TIMED_OUT_EXIT_CODE
    } else {
        finished.status.map(exit_code_like_python).unwrap_or(-1)
    };
    Ok(ShellOutcome {
        stdout: stdout.kept.into_text(),
        stderr: stderr_text,
        returncode,
    })
}

/// One stream of a command: kept (capped) for the result, and reported as it comes when streaming.
struct Stream<'a> {
    kept: CappedOutput,
    progress: Progress<'a>,
}

impl OutputSink for Stream<'_> {
    fn push(&mut self, chunk: &[u8]) {
        self.kept.push(chunk);
        self.progress.report(chunk);
    }

    fn finish(&mut self) {
        self.progress.finish();
    }
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
