//! One command run to its end (`PROGRAM ARGS...` in a directory, boxd's spawn rules), its stdout and
//! stderr read apart into the caller's sinks, its process group stopped at the timeout: the loop behind
//! `run_shell_command` and OpenAI's `shell`, which differ only in what they keep and how they stop.

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::{Instant, sleep_until};

use super::{ChildGroup, Grouping, spawn_piped};
use crate::core::deadline::Deadline;

const READ_CHUNK: usize = 64 * 1024;

/// Where one stream's output goes as it is read.
pub trait OutputSink {
    fn push(&mut self, chunk: &[u8]);
    /// The stream ended (or the command is done with it).
    fn finish(&mut self) {}
}

/// How a command that outlived its timeout is stopped.
#[derive(Debug, Clone, Copy)]
pub enum AtTimeout {
    /// SIGKILL to the whole group at once; its pipes are read for `wait` more, then left.
    Kill { wait: Duration },
    /// SIGTERM to the group, SIGKILL after `grace`; the command's exit is awaited.
    TerminateThenKill { grace: Duration },
}

#[derive(Debug, Clone, Copy)]
pub struct RunBounds {
    pub timeout: Duration,
    /// How long the pipes are still read after the shell exited, for a background child holding them.
    pub drain: Duration,
    pub at_timeout: AtTimeout,
}

/// How the command ended.
pub struct Finished {
    /// `None` when it was left unreaped (killed at its timeout and not gone within the wait).
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
}

/// Runs the command to its end. An error only when it cannot be started. Until its shell exits,
/// dropping the returned future (the caller went away) kills the whole group; what the command left
/// running in the background after a normal exit goes on, as it would after the same command in a
/// terminal.
pub async fn run_captured(
    program: &str,
    args: &[&str],
    cwd: &Path,
    bounds: &RunBounds,
    stdout_sink: &mut (dyn OutputSink + Send),
    stderr_sink: &mut (dyn OutputSink + Send),
) -> std::io::Result<Finished> {
    let mut child = spawn_piped(program, args, cwd)?;
    let mut group = ChildGroup::of(Some(child.id()), Grouping::OwnGroup);
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("the command's pipes are missing"));
    };
    let mut stdout_chunk = vec![0u8; READ_CHUNK];
    let mut stderr_chunk = vec![0u8; READ_CHUNK];
    let (mut stdout_open, mut stderr_open) = (true, true);

    let timeout_at = Deadline::after(bounds.timeout).instant();
    let mut status = None;
    // Once set, the loop ends there whatever is still open: after the exit (the drain) or the kill.
    let mut stop_at: Option<Instant> = None;
    let mut timed_out = false;

    loop {
        if status.is_some() && !stdout_open && !stderr_open {
            break;
        }
        tokio::select! {
            read = stdout.read(&mut stdout_chunk), if stdout_open => match read {
                Ok(0) | Err(_) => {
                    stdout_open = false;
                    stdout_sink.finish();
                }
                Ok(n) => stdout_sink.push(stdout_chunk.get(..n).unwrap_or_default()),
            },
            read = stderr.read(&mut stderr_chunk), if stderr_open => match read {
                Ok(0) | Err(_) => {
                    stderr_open = false;
                    stderr_sink.finish();
                }
                Ok(n) => stderr_sink.push(stderr_chunk.get(..n).unwrap_or_default()),
            },
            exited = child.wait(), if status.is_none() => {
                status = Some(exited?);
                if let Some(group) = group.as_mut() {
                    group.leader_reaped();
                    group.disarm();
                }
                if stop_at.is_none() {
                    stop_at = Some(Deadline::after(bounds.drain).instant());
                }
            },
            () = sleep_until(timeout_at), if !timed_out && status.is_none() => {
                timed_out = true;
                tracing::info!(timeout = ?bounds.timeout, "command timed out; stopping its process group");
                match bounds.at_timeout {
                    AtTimeout::Kill { wait } => {
                        // Dropped armed: SIGKILL to the whole group.
                        drop(group.take());
                        stop_at = Some(Deadline::after(wait).instant());
                    }
                    AtTimeout::TerminateThenKill { grace } => {
                        if let Some(group) = group.take() {
                            group.terminate_then_kill(grace);
                        }
                    }
                }
            },
            () = sleep_until(stop_at.unwrap_or(timeout_at)), if stop_at.is_some() => break,
        }
    }
    if stdout_open {
        stdout_sink.finish();
    }
    if stderr_open {
        stderr_sink.finish();
    }
    Ok(Finished { status, timed_out })
}

/// Python's asyncio (upstream's servers) reports death by signal N as `-N`; boxd keeps that.
pub fn exit_code_like_python(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| signal.saturating_neg()))
        .unwrap_or(-1)
}
