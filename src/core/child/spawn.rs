//! How boxd starts a child, and what it owns afterwards: every spawn site builds its command with
//! [`command`] (the kernel, live processes, hosted MCP servers, the training workers, the browser's
//! nested X server and `xauth`) or [`command_as`] (Chromium, as another user); shell commands and
//! sandboxd's one-shot commands, the hot path, spawn with [`spawn_piped`](super::spawn_piped), which
//! keeps the same rules at a third of the cost. Each holds the result in a [`ChildGroup`], so no site
//! can forget a rule (Xvfb and an image's other services are `boxd init`'s; adb is never spawned):
//!
//! - the environment is boxd's own without its secrets (withheld at start, see `environment`) plus what
//!   a claim's `POST /init` gave (pool mode) plus what the enabled families contribute (`DISPLAY`, ...)
//!   plus what the call asks for;
//! - the child leads its own process group (or, for a terminal, its own session), so one signal reaches
//!   it and everything it started;
//! - its `oom_score_adj` is raised, so under memory pressure the kernel's OOM killer takes a child
//!   before boxd, which holds every other session's state;
//! - it gets SIGKILL when boxd dies, even of SIGKILL (`PR_SET_PDEATHSIG`); what the leader started
//!   survives that and is stopped by the next boxd (`leftovers`);
//! - dropping its [`ChildGroup`] kills the whole group; [`ChildGroup::terminate`] asks first (TERM,
//!   then KILL after a grace).

use std::ffi::OsStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::process::Command;

use super::group::OwnedGroup;
use super::identity::{Identity, Switch};
use crate::core::error::ApiError;

/// Added to every child's OOM score (range -1000..=1000): high enough that a child is chosen before
/// boxd, low enough that the kernel still weighs children by their size among themselves.
pub const CHILD_OOM_SCORE_ADJ: i32 = 500;

/// How the child is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// A new process group; the child stays in boxd's session (no terminal).
    OwnGroup,
    /// A new session with stdin as its controlling terminal (stdio must be a terminal's slave side).
    TerminalSession,
}

static FAMILY_ENVIRONMENT: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// What the enabled families add to every child's environment; set once at start, before any spawn.
pub fn set_family_environment(variables: Vec<(String, String)>) {
    if FAMILY_ENVIRONMENT.set(variables).is_err() {
        tracing::warn!("the children's environment was already set; keeping the first");
    }
}

/// What every child gets over boxd's own environment, in order (a later value wins): the claim's
/// variables (`POST /init`, pool mode), then the enabled families' (`DISPLAY`, ...), so a family's own
/// still win.
pub(super) fn child_environment_layers() -> impl Iterator<Item = &'static (String, String)> {
    super::environment::runtime_environment()
        .iter()
        .chain(FAMILY_ENVIRONMENT.get().map_or(&[][..], Vec::as_slice))
}

/// A command for `program` that follows every rule of this module; the caller adds arguments, working
/// directory, environment and stdio, spawns it, and wraps the pid in a [`ChildGroup`] at once.
pub fn command(program: impl AsRef<OsStr>, grouping: Grouping) -> Command {
    command_as(program, grouping, None)
}

/// [`command`] for a child that runs as `identity` (boxd's own user when `None`): it drops to that user
/// after its OOM score is raised (a process whose user just changed may no longer write its own
/// `/proc` files) and before its parent-death signal is set (a change of user clears it). The caller
/// gives it a home and files it can write (see [`Identity::give`]).
pub fn command_as(
    program: impl AsRef<OsStr>,
    grouping: Grouping,
    identity: Option<&Identity>,
) -> Command {
    let switch = identity.map(Switch::of);
    let mut command = Command::new(program);
    command.envs(child_environment_layers().map(|(key, value)| (key, value)));
    if grouping == Grouping::OwnGroup {
        command.process_group(0);
    }
    let parent = std::process::id();
    let oom_score = CHILD_OOM_SCORE_ADJ.to_string();
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls (setsid,
    // ioctl, open, write, close, setgroups, setgid, setuid, prctl, getppid) on data prepared before the
    // fork.
    unsafe {
        command.pre_exec(move || {
            if grouping == Grouping::TerminalSession {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            raise_oom_score(oom_score.as_bytes());
            if let Some(switch) = &switch {
                switch.apply()?;
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // boxd died between the fork and the prctl: the signal was never going to come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("boxd exited while starting a child"));
            }
            Ok(())
        });
    }
    command
}

/// Why a spawn failed, for the caller: a missing program, a bad argument or a refused exec is the
/// caller's to fix (400); what the machine lacks right now (processes, memory, descriptors, terminals)
/// is not, and may pass (503 with Retry-After).
pub fn spawn_failure(program: &str, err: &std::io::Error) -> ApiError {
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::ENOSPC) => {
            ApiError::Unavailable {
                message: format!(
                    "cannot start {program:?} now, the system is short of processes, memory, file \
                     descriptors or terminals: {err}; try again later"
                ),
                retry_after_seconds: 1,
            }
        }
        _ => ApiError::BadRequest(format!("cannot start {program:?}: {err}")),
    }
}

/// Best effort: without a writable `/proc` the child keeps boxd's score.
fn raise_oom_score(value: &[u8]) {
    // SAFETY: open, write and close on a NUL-terminated literal path and a buffer we own.
    unsafe {
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, value.as_ptr().cast(), value.len());
            libc::close(fd);
        }
    }
}

/// A relative interpreter path (`.venv/bin/python`) means relative to where boxd was started, not to the
/// workspace the kernel runs in; a bare name (`python3`) is looked up on PATH as usual.
pub fn interpreter_path(python: &str) -> String {
    let path = std::path::Path::new(python);
    if path.is_relative()
        && path.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(path).to_string_lossy().into_owned();
    }
    python.to_owned()
}

/// The process group (or terminal session) of a child boxd started, killed when this is dropped:
/// a child that wraps itself (`sh -c`, `npx`) leaves its real work in processes that its leader's death
/// does not take down.
pub struct ChildGroup {
    group: Arc<OwnedGroup>,
    armed: bool,
}

impl ChildGroup {
    /// Takes the group led by `pid` (a child just spawned with [`command`]; call before it can be
    /// reaped). `None` when the child has no pid (it was already reaped).
    pub fn of(pid: Option<u32>, grouping: Grouping) -> Option<ChildGroup> {
        let pid = pid?;
        Some(ChildGroup {
            group: Arc::new(OwnedGroup::new(pid, grouping == Grouping::TerminalSession)),
            armed: true,
        })
    }

    /// Sends `signal` to every member; false once nothing of the group is left.
    pub fn signal(&self, signal: i32) -> bool {
        self.group.signal(signal)
    }

    /// The group itself, to signal it from where the owner is out of reach (a request holds the owner
    /// while another must stop it); dropping it does not kill.
    pub fn shared(&self) -> Arc<OwnedGroup> {
        Arc::clone(&self.group)
    }

    /// Tells the group its leader was reaped (only needed where pidfds are missing).
    pub fn leader_reaped(&self) {
        self.group.leader_reaped();
    }

    /// Keeps the group running when this is dropped: its owner stops it some other way.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// SIGTERM to the group now and SIGKILL after `grace` (from a task of its own, so the caller need
    /// not wait); members that ignore TERM still go.
    pub fn terminate_then_kill(mut self, grace: Duration) {
        self.armed = false;
        if !self.group.signal(libc::SIGTERM) {
            return;
        }
        let group = Arc::clone(&self.group);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            group.signal(libc::SIGKILL);
        });
    }

    /// SIGTERM to the group, waits up to `grace` for it to empty, then SIGKILL.
    pub async fn terminate(mut self, grace: Duration) {
        self.armed = false;
        if !self.group.signal(libc::SIGTERM) {
            return;
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut pause = Duration::from_millis(5);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(pause).await;
            if !self.group.signal(0) {
                return;
            }
            pause = pause.saturating_mul(2).min(Duration::from_millis(100));
        }
        self.group.signal(libc::SIGKILL);
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if self.armed {
            self.group.signal(libc::SIGKILL);
        }
    }
}

/// Waits between attempts to restart a child that keeps failing: doubling from `initial` up to `max`,
/// back to `initial` after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The wait before the next attempt; each call doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn output_of(mut command: Command) -> String {
        let output = command.output().await.expect("the child runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[tokio::test]
    async fn a_child_leads_its_group_has_a_raised_oom_score_and_dies_with_boxd() {
        let mut probe = command("/bin/sh", Grouping::OwnGroup);
        probe.args([
            "-c",
            // Fields 5 and 6 of stat are pgrp and session; field 1 is the pid. PDEATHSIG is not in
            // /proc, so it is checked by its effect in tests/child.rs.
            r#"read -r pid _ _ _ pgrp _ < /proc/self/stat; echo "$pid $pgrp $(cat /proc/self/oom_score_adj)""#,
        ]);
        let seen = output_of(probe).await;
        let fields: Vec<&str> = seen.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "{seen}");
        assert_eq!(fields[0], fields[1], "the child leads its own group");
        assert_eq!(fields[2], CHILD_OOM_SCORE_ADJ.to_string());
    }

    #[tokio::test]
    async fn a_child_as_another_user_has_its_ids_groups_and_raised_oom_score() {
        if !super::super::identity::boxd_is_root() {
            eprintln!("skipped: switching users needs root");
            return;
        }
        let nobody = Identity {
            name: "65534".into(),
            uid: 65534,
            gid: 65534,
            groups: vec![65534, 4242],
        };
        let mut probe = command_as("/bin/sh", Grouping::OwnGroup, Some(&nobody));
        probe.args([
            "-c",
            r#"echo "$(id -u) $(id -g) $(id -G | tr ' ' ,) $(cat /proc/self/oom_score_adj)""#,
        ]);
        let seen = output_of(probe).await;
        assert_eq!(
            seen.trim(),
            format!("65534 65534 65534,4242 {CHILD_OOM_SCORE_ADJ}")
        );
    }

    #[tokio::test]
    async fn dropping_the_group_kills_what_the_leader_started() {
        let mut shell = command("/bin/sh", Grouping::OwnGroup);
        shell
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped());
        let mut child = shell.spawn().expect("sh starts");
        let group = ChildGroup::of(child.id(), Grouping::OwnGroup).expect("a pid");
        let mut stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(&mut stdout)
            .read_line(&mut line)
            .await
            .expect("the sleep's pid");
        let sleep: i32 = line.trim().parse().expect("a pid");
        drop(group);
        let _ = child.wait().await;
        let gone = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{sleep}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        });
        assert!(gone, "the grandchild was killed with the group");
    }

    #[tokio::test]
    async fn terminate_waits_for_a_polite_group_and_kills_a_stubborn_one() {
        let mut polite = command("sleep", Grouping::OwnGroup);
        polite.arg("30");
        let mut child = polite.spawn().expect("sleep starts");
        let group = ChildGroup::of(child.id(), Grouping::OwnGroup).expect("a pid");
        let reaper = tokio::spawn(async move { child.wait().await });
        group.terminate(Duration::from_secs(5)).await;
        let status = reaper.await.expect("joined").expect("status");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));

        let mut stubborn = command("/bin/sh", Grouping::OwnGroup);
        stubborn
            .args(["-c", "trap '' TERM; echo ready; sleep 30 & wait; wait"])
            .stdout(std::process::Stdio::piped());
        let mut child = stubborn.spawn().expect("sh starts");
        let group = ChildGroup::of(child.id(), Grouping::OwnGroup).expect("a pid");
        // Signalled before its trap is set, the shell would die of TERM.
        let mut ready = String::new();
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut ready)
            .await
            .expect("the shell is ready");
        let reaper = tokio::spawn(async move { child.wait().await });
        let started = std::time::Instant::now();
        group.terminate(Duration::from_millis(300)).await;
        let status = reaper.await.expect("joined").expect("status");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let delays: Vec<u64> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn exhaustion_is_503_and_the_callers_mistakes_are_400() {
        for errno in [
            libc::EAGAIN,
            libc::ENOMEM,
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOSPC,
        ] {
            let err = spawn_failure("x", &std::io::Error::from_raw_os_error(errno));
            assert_eq!(
                err.status(),
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "errno {errno}"
            );
            assert!(err.to_string().contains("try again later"), "{err}");
        }
        for errno in [
            libc::ENOENT,
            libc::EACCES,
            libc::ENOEXEC,
            libc::E2BIG,
            libc::ENOTDIR,
        ] {
            let err = spawn_failure("x", &std::io::Error::from_raw_os_error(errno));
            assert_eq!(
                err.status(),
                axum::http::StatusCode::BAD_REQUEST,
                "errno {errno}"
            );
        }
        let nul = std::io::Error::new(std::io::ErrorKind::InvalidInput, "nul byte found");
        assert_eq!(
            spawn_failure("x", &nul).status(),
            axum::http::StatusCode::BAD_REQUEST
        );
    }
}
