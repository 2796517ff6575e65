//! One command of a `shell` call: `bash -c COMMAND` in the workspace, in a process group of its own
//! (boxd's spawn rules, `core::child`), its stdout and stderr read apart and kept up to a byte cap, the
//! whole group killed with SIGKILL at its timeout (the SDK's executor kills with SIGKILL too, but only
//! the shell, so what the shell started ran on and could hold the call open).

use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::{Instant, sleep_until};

use crate::core::child::{self, ChildGroup, Grouping};
use crate::core::deadline::Deadline;
use crate::core::utf8::Utf8Boundary;

const READ_CHUNK: usize = 64 * 1024;

pub struct RunLimits {
    pub timeout: Duration,
    /// Bytes kept of each stream; the rest is read and counted, not kept.
    pub max_output_bytes: usize,
    /// How long the pipes are still read after the shell exited.
    pub drain: Duration,
    /// How long a killed group has to close its pipes.
    pub kill_wait: Duration,
}

/// How a command ended, as the `shell_call_output` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The shell's exit code; `-N` for death by signal N, as Python's asyncio (the SDK's executor)
    /// reports it.
    Exit(i32),
    Timeout,
}

pub struct Ran {
    pub stdout: Captured,
    pub stderr: Captured,
    pub outcome: Outcome,
}

/// The head of one stream, up to a cap, and how many bytes past it were dropped.
#[derive(Default)]
pub struct Captured {
    kept: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl Captured {
    fn new(cap: usize) -> Captured {
        Captured {
            kept: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let (take, rest) = chunk.split_at(chunk.len().min(room));
        self.kept.extend_from_slice(take);
        self.dropped = self
            .dropped
            .saturating_add(u64::try_from(rest.len()).unwrap_or(u64::MAX));
    }

    /// The text, keeping at most `budget` bytes (cut on a character boundary) and taking them from it;
    /// what is left out is said at the end. Invalid UTF-8 becomes U+FFFD, as in boxd's other command
    /// output.
    pub fn keep(mut self, budget: &mut usize) -> String {
        if self.kept.len() > *budget {
            let cut = self.kept.split_off(*budget);
            self.dropped = self
                .dropped
                .saturating_add(u64::try_from(cut.len()).unwrap_or(u64::MAX));
        }
        if self.dropped > 0 {
            // A character the cut split in two is left out whole.
            let whole = Utf8Boundary::default().split(&self.kept);
            let split = self.kept.len().saturating_sub(whole.len());
            self.dropped = self
                .dropped
                .saturating_add(u64::try_from(split).unwrap_or(u64::MAX));
            self.kept.truncate(whole.len());
        }
        *budget = budget.saturating_sub(self.kept.len());
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[boxd: output truncated, {} bytes omitted]\n",
                self.dropped
            ));
        }
        text
    }
}

/// Runs `command` with `shell -c` in `cwd`. An error only when the shell cannot be started.
pub async fn run(
    shell: &str,
    command: &str,
    cwd: &Path,
    limits: &RunLimits,
) -> std::io::Result<Ran> {
    let mut child = child::spawn_piped(shell, &["-c", command], cwd)?;
    // Until the shell exits, dropping this (the caller went away, or the timeout) kills the group.
    let mut group = ChildGroup::of(Some(child.id()), Grouping::OwnGroup);
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("the command's pipes are missing"));
    };

    let mut stdout_kept = Captured::new(limits.max_output_bytes);
    let mut stderr_kept = Captured::new(limits.max_output_bytes);
    let mut stdout_chunk = vec![0u8; READ_CHUNK];
    let mut stderr_chunk = vec![0u8; READ_CHUNK];
    let (mut stdout_open, mut stderr_open) = (true, true);

    let timeout_at = Deadline::after(limits.timeout).instant();
    let mut exit_status = None;
    // Once set, the loop ends there whatever is still open: after the exit (the drain) or the kill.
    let mut stop_at: Option<Instant> = None;
    let mut timed_out = false;

    loop {
        if exit_status.is_some() && !stdout_open && !stderr_open {
            break;
        }
        tokio::select! {
            read = stdout.read(&mut stdout_chunk), if stdout_open => match read {
                Ok(0) | Err(_) => stdout_open = false,
                Ok(n) => stdout_kept.push(stdout_chunk.get(..n).unwrap_or_default()),
            },
            read = stderr.read(&mut stderr_chunk), if stderr_open => match read {
                Ok(0) | Err(_) => stderr_open = false,
                Ok(n) => stderr_kept.push(stderr_chunk.get(..n).unwrap_or_default()),
            },
            status = child.wait(), if exit_status.is_none() => {
                exit_status = Some(status?);
                if let Some(group) = group.as_mut() {
                    group.leader_reaped();
                    // What the command left running in the background goes on, as it would after
                    // the same command in a terminal.
                    group.disarm();
                }
                if !timed_out {
                    stop_at = Some(Deadline::after(limits.drain).instant());
                }
            },
            () = sleep_until(timeout_at), if !timed_out && exit_status.is_none() => {
                timed_out = true;
                tracing::info!(timeout = ?limits.timeout, "shell command timed out; killing its process group");
                // Dropped armed: SIGKILL to the whole group.
                drop(group.take());
                stop_at = Some(Deadline::after(limits.kill_wait).instant());
            },
            () = sleep_until(stop_at.unwrap_or(timeout_at)), if stop_at.is_some() => break,
        }
    }

    let outcome = if timed_out {
        Outcome::Timeout
    } else {
        exit_status.map_or(Outcome::Exit(-1), |status| {
            Outcome::Exit(exit_code_like_python(status))
        })
    };
    Ok(Ran {
        stdout: stdout_kept,
        stderr: stderr_kept,
        outcome,
    })
}

fn exit_code_like_python(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| signal.saturating_neg()))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout: Duration, max_output_bytes: usize) -> RunLimits {
        RunLimits {
            timeout,
            max_output_bytes,
            drain: Duration::from_millis(100),
            kill_wait: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn streams_apart_and_the_exit_code() {
        let ran = run(
            "/bin/sh",
            "echo out; echo err >&2; exit 3",
            Path::new("/"),
            &limits(Duration::from_secs(5), 1024),
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
        let mut budget = 1024;
        assert_eq!(ran.outcome, Outcome::Exit(3));
        assert_eq!(ran.stdout.keep(&mut budget), "out\n");
        assert_eq!(ran.stderr.keep(&mut budget), "err\n");
        assert_eq!(budget, 1016);
    }

    #[tokio::test]
    async fn a_timeout_keeps_what_came_before_it() {
        let started = std::time::Instant::now();
        let ran = run(
            "/bin/sh",
            "echo started; sleep 30",
            Path::new("/"),
            &limits(Duration::from_millis(300), 1024),
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ran.outcome, Outcome::Timeout);
        assert_eq!(ran.stdout.keep(&mut 1024), "started\n");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_cap_keeps_the_head_on_a_character_boundary_and_says_what_it_left_out() {
        let mut captured = Captured::new(5);
        captured.push("aé".as_bytes());
        captured.push("bcdef".as_bytes());
        let mut budget = 4;
        // "aé" is 3 bytes, "b" the 4th; the cap of 5 kept "aébc", the budget of 4 keeps "aéb".
        assert_eq!(
            captured.keep(&mut budget),
            "aéb\n[boxd: output truncated, 4 bytes omitted]\n"
        );
        assert_eq!(budget, 0);
        let mut split = Captured::new(2);
        split.push("éé".as_bytes());
        assert_eq!(
            split.keep(&mut 100),
            "é\n[boxd: output truncated, 2 bytes omitted]\n"
        );
    }
}
