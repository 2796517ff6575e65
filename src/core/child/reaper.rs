//! What a killed boxd's children started is stopped at once, not when the next boxd starts.
//!
//! `PR_SET_PDEATHSIG` takes each child's leader down with boxd, even when boxd is SIGKILLed, but not
//! what the leader started (`sleep 1000 &` in a command, a cell's subprocess, a hosted server's
//! helpers): those are reparented and run on. Whoever stops them must outlive boxd and learn at once
//! that boxd died. The mechanisms weighed:
//!
//! - boxd as a child subreaper: orphans come to boxd while it lives, and go on to init once it is
//!   dead, which is exactly when they must be stopped;
//! - a cgroup per child: needs a delegated cgroup tree, which an unprivileged `boxd serve` (tests,
//!   `make run`) and most containers do not have;
//! - boxd started under an init-like parent of its own: the process that callers start and signal
//!   would then be that parent, not boxd, and a SIGKILL of it would leave boxd itself running;
//! - a small guard process from the same binary, started by boxd, that waits on a pipe only boxd
//!   holds: the pipe's end of file comes when boxd is gone, whatever killed it (the kernel closes
//!   the descriptor), with no polling, no signal handling and no privilege. The guard then does what
//!   the next boxd would do (`leftovers`): it kills every process carrying this instance's marker,
//!   and the process group of each, until none is left.
//!
//! The last is the one here. In images, `boxd init` (PID 1, a subreaper) does the same the moment
//! boxd exits, before it starts boxd again (`init::supervise`): a boxd that init started (the hand-over)
//! starts no guard, one process less per sandbox. Nor does a boxd that is itself PID 1 of its PID
//! namespace (`docker run IMAGE boxd serve`): when it exits, the kernel kills every other process of the
//! namespace at once.
//!
//! The guard runs `boxd reaper KEY`, a new image of the binary (`/proc/self/exe`, valid even if the
//! file was replaced since), so it holds none of boxd's memory (the token); it does not carry the
//! marker itself, so no boxd's start-up scan takes it for a leftover. It only kills what started
//! before boxd died: a boxd that restarts at once (same workspace and port) keeps its new children.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::leftovers::{MARKER, stop_leftovers_started_before};
use super::spawn::Backoff;

/// The first argument that runs the guard instead of anything else (see `main`).
pub const REAPER_COMMAND: &str = "reaper";
/// The most the guard spends killing once boxd is gone: passes repeat while they find processes (a
/// dying leader's children are reparented, a fork may land between two passes).
const SWEEP_BOUND: Duration = Duration::from_secs(5);
/// Between two passes that found something.
const SWEEP_PAUSE: Duration = Duration::from_millis(10);
/// Before a guard that exited while boxd runs (someone killed it) is started again: doubling up to the
/// second bound while it keeps failing, so a machine that cannot start it is not flooded with warnings.
const RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);
/// A guard that ran this long before exiting restarts after the first delay again.
const STABLE_RUN: Duration = Duration::from_secs(60);

/// The running guard's pid; 0 while there is none.
static GUARD_PID: AtomicU32 = AtomicU32::new(0);

/// The guard this boxd runs, if any (`GET /memory` counts it as boxd's).
pub fn guard_pid() -> Option<u32> {
    Some(GUARD_PID.load(Ordering::Relaxed)).filter(|pid| *pid != 0)
}

/// Starts the guard for instance `key` and keeps one running while boxd runs (it is started again if
/// it exits). Call once the port is bound (no other live boxd of the instance exists then) and the
/// previous leftovers are stopped, from the async runtime.
pub fn spawn_reaper(key: String) {
    if std::process::id() == 1 {
        tracing::info!(
            "boxd is its PID namespace's first process: the kernel kills what its children leave when it \
             exits; no guard"
        );
        return;
    }
    tokio::spawn(async move {
        let mut backoff = Backoff::new(RESTART_DELAY, MAX_RESTART_DELAY);
        loop {
            let started = Instant::now();
            match start_guard(&key) {
                Ok((mut guard, _boxd_end)) => {
                    GUARD_PID.store(guard.id().unwrap_or(0), Ordering::Relaxed);
                    // `_boxd_end` stays open as long as this task (that is, this process) lives.
                    let status = guard.wait().await;
                    GUARD_PID.store(0, Ordering::Relaxed);
                    tracing::warn!(
                        ?status,
                        "the guard that stops a killed boxd's grandchildren exited; starting it again"
                    );
                }
                Err(err) => tracing::warn!(
                    "cannot start the guard that stops a killed boxd's grandchildren: {err}"
                ),
            }
            if started.elapsed() >= STABLE_RUN {
                backoff.reset();
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    });
}

/// The guard, and boxd's end of the pipe whose end of file tells it boxd is gone.
fn start_guard(key: &str) -> std::io::Result<(tokio::process::Child, OwnedFd)> {
    let mut ends = [-1; 2];
    // SAFETY: pipe2 fills the two descriptors it creates. Both close on exec: no other child of boxd
    // may hold the write end, or the end of file would wait for that child too.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (guard_end, boxd_end) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let mut command = tokio::process::Command::new("/proc/self/exe");
    command
        .arg0("boxd")
        .arg(REAPER_COMMAND)
        .arg(key)
        .env_remove(MARKER)
        .stdin(Stdio::from(guard_end))
        .stdout(Stdio::null())
        // It may outlive boxd by a sweep: it must not keep boxd's working directory's mount busy.
        .current_dir("/")
        // Its own group: a signal to boxd's group (a terminal's ^C, a supervisor's kill) leaves it to
        // clean up after boxd.
        .process_group(0);
    let guard = command.spawn()?;
    Ok((guard, boxd_end))
}

/// `boxd reaper KEY`: waits for boxd to go (end of file on stdin), then stops what it left.
pub fn reaper_main(mut arguments: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    // Started through `/proc/self/exe`, whose name the kernel gives it ("exe"): `ps` and `top` show
    // "boxd", as for init and serve.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"boxd".as_ptr(), 0, 0, 0) };
    let Some(key) = arguments.next().and_then(|key| key.into_string().ok()) else {
        eprintln!("boxd reaper: usage: boxd reaper INSTANCE-KEY (started by boxd serve)");
        return ExitCode::from(2);
    };
    // All it does from here on is wait: the pages of code its start mapped are given back, and the wait
    // maps as little of them again as it can (see `core::memory`).
    if let Err(err) = crate::core::memory::release_code_pages_and_wait(libc::STDIN_FILENO) {
        // Not a pipe boxd holds: nothing tells us when it dies, so do nothing rather than kill.
        eprintln!("boxd reaper: cannot watch boxd: {err}");
        return ExitCode::FAILURE;
    }
    let died_at = ticks_since_boot();
    let started = Instant::now();
    let mut stopped = 0;
    while started.elapsed() < SWEEP_BOUND {
        let found = stop_leftovers_started_before(&key, died_at);
        if found == 0 {
            break;
        }
        stopped += found;
        std::thread::sleep(SWEEP_PAUSE);
    }
    if stopped > 0 {
        eprintln!(
            "boxd reaper: boxd exited; stopped {stopped} processes its children left running in {:?}",
            started.elapsed()
        );
    }
    ExitCode::SUCCESS
}

/// Now, in the unit of `/proc/PID/stat`'s start time (clock ticks since boot), one tick late so a
/// process started in the same tick as boxd's death counts as before it. `None` (no bound) when
/// `/proc/uptime` cannot be read.
fn ticks_since_boot() -> Option<u64> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u32::try_from(per_second).ok().filter(|ticks| *ticks > 0)?;
    let ticks = (seconds * f64::from(per_second)).ceil();
    // A float-to-integer `as` saturates (and maps NaN to 0): no overflow either way.
    (ticks.is_finite() && ticks >= 0.0).then(|| (ticks as u64).saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn runs(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    }

    /// The guard's sweep kills a process carrying the marker that started before boxd died, and spares
    /// one that started after (a restarted boxd's child).
    #[test]
    fn the_sweep_spares_what_started_after_boxd_died() {
        let key = format!("reaper-test-{}", std::process::id());
        let mut marked = std::process::Command::new("sleep")
            .arg("30")
            .env(MARKER, &key)
            .process_group(0)
            .spawn()
            .expect("sleep starts");
        let pid = marked.id();
        // Boxd "died" before the epoch: the sleep started after, so it is spared.
        assert_eq!(stop_leftovers_started_before(&key, Some(0)), 0);
        assert!(runs(pid));
        let now = ticks_since_boot();
        assert!(now.is_some_and(|now| now > 0), "{now:?}");
        assert_eq!(stop_leftovers_started_before(&key, now), 1);
        let _ = marked.wait();
        assert!(!runs(pid));
    }
}
