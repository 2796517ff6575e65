//! A command run to its end with its whole output: the gRPC `Execute` and the legacy `/execute`. Built
//! on boxd's child primitive, the shell tool's spawn (`core::child::spawn_piped_with_env`: its own
//! process group, the families' environment, the OOM score, death with boxd, and no fork of boxd's
//! memory); the group is killed when the deadline passes or the caller goes away (dropping the future
//! drops the [`ChildGroup`]), not only its leader.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::{Instant, sleep_until};

use crate::core::child::{self, ChildGroup, Grouping};
use crate::core::error::{ApiError, ApiResult};

/// Output kept per stream (stdout, stderr) of one run: both fit in gRPC's default 4 MiB message, which
/// clients refuse to receive past. The first and last halves are kept, with a note of what was left out.
pub const OUTPUT_MAX: usize = 2 * 1024 * 1024 - 4096;
/// How long output is still read after the command exits, for what it left running in the background
/// holding its pipes (`server &`): they are not waited for.
const DRAIN: Duration = Duration::from_millis(200);
const READ_CHUNK: usize = 64 * 1024;

pub struct Finished {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit code, or 128 + the signal that ended it, as a shell reports it.
    pub exit_code: i32,
    /// The deadline passed: the whole group was killed.
    pub timed_out: bool,
}

/// Runs `argv` in `cwd` (a checked workspace directory) with `env` added, stdin empty, until it exits or
/// `deadline` passes.
pub async fn run_to_end(
    argv: &[String],
    cwd: &Path,
    env: &BTreeMap<String, String>,
    deadline: Option<Instant>,
) -> ApiResult<Finished> {
    let Some(program) = argv.first().filter(|program| !program.is_empty()) else {
        return Err(ApiError::BadRequest("the command is empty".into()));
    };
    let args: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    let extra: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let mut running = child::spawn_piped_with_env(program, &args, cwd, &extra)
        .map_err(|err| spawn_error(program, &err))?;
    let mut group = ChildGroup::of(Some(running.id()), Grouping::OwnGroup);
    let (Some(mut stdout), Some(mut stderr)) = (running.stdout.take(), running.stderr.take())
    else {
        return Err(ApiError::Internal("the child's pipes are missing".into()));
    };
    let (mut stdout_kept, mut stderr_kept) = (Capped::default(), Capped::default());
    let (mut stdout_chunk, mut stderr_chunk) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let (mut stdout_open, mut stderr_open) = (true, true);
    let mut status = None;
    let mut drain_until: Option<Instant> = None;
    let mut timed_out = false;
    // A far deadline stands for none, so one `select!` serves both.
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    loop {
        if status.is_some() && !stdout_open && !stderr_open {
            break;
        }
        tokio::select! {
            read = stdout.read(&mut stdout_chunk), if stdout_open => match read {
                Ok(n) if n > 0 => stdout_kept.push(stdout_chunk.get(..n).unwrap_or_default()),
                _ => stdout_open = false,
            },
            read = stderr.read(&mut stderr_chunk), if stderr_open => match read {
                Ok(n) if n > 0 => stderr_kept.push(stderr_chunk.get(..n).unwrap_or_default()),
                _ => stderr_open = false,
            },
            exited = running.wait(), if status.is_none() => {
                status = Some(exited.map_err(|err| ApiError::Internal(format!("wait: {err}")))?);
                if let Some(group) = group.as_mut() {
                    group.leader_reaped();
                    if !timed_out {
                        // What it started in the background may go on, as with the shell tool.
                        group.disarm();
                    }
                }
                drain_until = Some(Instant::now() + DRAIN);
            },
            () = sleep_until(deadline.unwrap_or(far)), if !timed_out && status.is_none() => {
                timed_out = true;
                tracing::info!(program, "command passed its deadline; killing its process group");
                if let Some(group) = group.as_ref() {
                    group.signal(libc::SIGKILL);
                }
            },
            () = sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let exit_code = status
        .and_then(|status| {
            status
                .code()
                .or_else(|| status.signal().map(|signal| signal.saturating_add(128)))
        })
        .unwrap_or(-1);
    Ok(Finished {
        stdout: stdout_kept.into_bytes(),
        stderr: stderr_kept.into_bytes(),
        exit_code,
        timed_out,
    })
}

/// A missing program, or a cwd gone since it was checked: `NOT_FOUND`, as sandboxd answers it.
pub fn spawn_error(program: &str, err: &std::io::Error) -> ApiError {
    if err.kind() == std::io::ErrorKind::NotFound {
        return ApiError::NotFound(format!("cannot start {program:?}: {err}"));
    }
    child::spawn_failure(program, err)
}

/// The first and last halves of at most [`OUTPUT_MAX`] bytes, and how many were left out between.
#[derive(Default)]
struct Capped {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    omitted: u64,
}

impl Capped {
    const HALF: usize = OUTPUT_MAX / 2;

    fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < Self::HALF {
            let take = data.len().min(Self::HALF.saturating_sub(self.head.len()));
            let (first, rest) = data.split_at(take);
            self.head.extend_from_slice(first);
            data = rest;
        }
        self.tail.extend(data);
        let excess = self.tail.len().saturating_sub(Self::HALF);
        if excess > 0 {
            self.tail.drain(..excess);
            self.omitted = self
                .omitted
                .saturating_add(u64::try_from(excess).unwrap_or(u64::MAX));
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut out = self.head;
        if self.omitted > 0 {
            out.extend_from_slice(
                format!(
                    "\n[boxd: output truncated, {} bytes omitted]\n",
                    self.omitted
                )
                .as_bytes(),
            );
        }
        out.extend(self.tail);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_both_ends() {
        let mut kept = Capped::default();
        kept.push(b"short");
        assert_eq!(kept.into_bytes(), b"short");
        let mut kept = Capped::default();
        let big = vec![b'x'; OUTPUT_MAX + 10];
        kept.push(b"head");
        kept.push(&big);
        kept.push(b"tail");
        let out = kept.into_bytes();
        assert!(out.starts_with(b"head"));
        assert!(out.ends_with(b"tail"));
        assert!(out.len() < OUTPUT_MAX + 100);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("bytes omitted"), "{}", text.len());
    }
}
