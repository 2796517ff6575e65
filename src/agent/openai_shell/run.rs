//! One command of a `shell` call: `bash -c COMMAND` in the workspace, in a process group of its own
//! (boxd's spawn rules, `core::child`), its stdout and stderr read apart and kept up to a byte cap, the
//! whole group killed with SIGKILL at its timeout (the SDK's executor kills with SIGKILL too, but only
//! the shell, so what the shell started ran on and could hold the call open).

use std::path::Path;
use std::time::Duration;

use crate::core::child::{AtTimeout, OutputSink, RunBounds, exit_code_like_python, run_captured};
use crate::core::utf8::Utf8Boundary;

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

impl OutputSink for Captured {
    fn push(&mut self, chunk: &[u8]) {
        Captured::push(self, chunk);
    }
}

/// Runs `command` with `shell -c` in `cwd`. An error only when the shell cannot be started.
pub async fn run(
    shell: &str,
    command: &str,
    cwd: &Path,
    limits: &RunLimits,
) -> std::io::Result<Ran> {
    let mut stdout = Captured::new(limits.max_output_bytes);
    let mut stderr = Captured::new(limits.max_output_bytes);
    let bounds = RunBounds {
        timeout: limits.timeout,
        drain: limits.drain,
        at_timeout: AtTimeout::Kill {
            wait: limits.kill_wait,
        },
    };
    let finished = run_captured(
        shell,
        &["-c", command],
        cwd,
        &bounds,
        &mut stdout,
        &mut stderr,
    )
    .await?;
    let outcome = if finished.timed_out {
        Outcome::Timeout
    } else {
        finished.status.map_or(Outcome::Exit(-1), |status| {
            Outcome::Exit(exit_code_like_python(status))
        })
    };
    Ok(Ran {
        stdout,
        stderr,
        outcome,
    })
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
