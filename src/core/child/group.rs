//! Process-group signalling shared by everything that runs children in their own group (shell commands,
//! the IPython kernel, hosted MCP servers, live processes), so one signal reaches a command and everything
//! it started.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sends `signal` to every process in group `pgid`; false when the group has no member left (ESRCH).
pub fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    unsafe { libc::killpg(pgid, signal) == 0 }
}

/// A process group (or, for a terminal, a whole session) that boxd started, signalled only while the id
/// still names what boxd started.
///
/// A group's id is its leader's pid. Once the leader is reaped and every member has exited, the kernel
/// frees that number, and a later process can get it and lead a group of its own: a bare `killpg` on a
/// stored id would then reach an unrelated group. So: while the leader is not reaped (its pidfd still
/// answers) the id is ours; after that, the id is ours only if no process has it as its pid (a new
/// leader would) and every member is in the session and no older than the leader we started; and the
/// first time nothing is left, the group is marked gone and never signalled again.
pub struct OwnedGroup {
    id: i32,
    /// The group is a terminal's session (its leader called `setsid`): members may be in other groups.
    session: bool,
    /// The session every member of the group must be in.
    expected_sid: i32,
    /// None where `pidfd_open` is missing (Linux < 5.3); `leader_reaped` stands in then.
    leader: Option<OwnedFd>,
    leader_reaped: AtomicBool,
    /// The leader's start, in clock ticks since boot; a member that started earlier is not ours.
    leader_start: Option<u64>,
    gone: AtomicBool,
    /// One signal at a time, so "gone" is decided on what the previous signal found.
    signalling: Mutex<()>,
}

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy)]
struct ProcEntry {
    pid: i32,
    pgrp: i32,
    sid: i32,
    start: u64,
    /// Exited, not yet reaped: a signal "reaches" it but does nothing.
    zombie: bool,
}

impl OwnedGroup {
    /// Call before the leader can be reaped (right after spawn): the pid is then surely ours. `session`
    /// is true when the leader called `setsid` (a terminal).
    pub fn new(leader_pid: u32, session: bool) -> OwnedGroup {
        let id = i32::try_from(leader_pid).unwrap_or(i32::MAX);
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, id, 0) };
        let leader = i32::try_from(raw)
            .ok()
            .filter(|fd| *fd >= 0)
            // SAFETY: the descriptor was just returned to us and nothing else owns it.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        let expected_sid = if session {
            id
        } else {
            // SAFETY: getsid(0) only reads our own session id.
            unsafe { libc::getsid(0) }
        };
        OwnedGroup {
            id,
            session,
            expected_sid,
            leader,
            leader_reaped: AtomicBool::new(false),
            leader_start: read_stat(id).map(|entry| entry.start),
            gone: AtomicBool::new(false),
            signalling: Mutex::new(()),
        }
    }

    /// Tells the group its leader was reaped; only needed where pidfds are missing.
    pub fn leader_reaped(&self) {
        self.leader_reaped.store(true, Ordering::SeqCst);
    }

    /// True once nothing of the group is left (or its id was found reused): it is never signalled again.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Sends `signal` to every member (the whole session for a terminal) and says whether any was reached;
    /// signal 0 only checks. False, and marked gone for good, once nothing of it is left or its id names
    /// someone else's group. Blocking: it may scan `/proc`.
    pub fn signal(&self, signal: i32) -> bool {
        let _one_at_a_time = self
            .signalling
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.is_gone() {
            return false;
        }
        let leader_alive = self.leader_alive();
        let scan = (self.session || !leader_alive).then(processes);
        if !leader_alive
            && let Some(entries) = &scan
            && let Some(stranger) = self.reused_by(entries)
        {
            tracing::warn!(
                id = self.id,
                ?stranger,
                "process group id now names another group; not signalled"
            );
            self.gone.store(true, Ordering::SeqCst);
            return false;
        }
        // SAFETY: killpg only sends a signal; it touches no memory of ours.
        let group = unsafe { libc::killpg(self.id, signal) } == 0;
        let session = match &scan {
            Some(entries) if self.session => entries
                .iter()
                .filter(|entry| entry.sid == self.id && !entry.zombie && self.not_older(entry))
                // SAFETY: kill only sends a signal; it touches no memory of ours.
                .filter(|entry| unsafe { libc::kill(entry.pid, signal) } == 0)
                .count(),
            _ => 0,
        };
        let reached = group || session > 0;
        if !reached {
            self.gone.store(true, Ordering::SeqCst);
        }
        reached
    }

    fn leader_alive(&self) -> bool {
        match &self.leader {
            Some(pidfd) => {
                use std::os::fd::AsRawFd;
                // SAFETY: pidfd_send_signal with signal 0 only checks that the pidfd's process still
                // exists (a zombie counts: its pid is not free until we reap it).
                let sent = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        0,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                // EPERM: it exists but runs as someone we may not signal; still our leader.
                sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
            }
            None => !self.leader_reaped.load(Ordering::SeqCst),
        }
    }

    /// With the leader reaped: the process that shows the id is not ours, if any does.
    fn reused_by(&self, entries: &[ProcEntry]) -> Option<ProcEntry> {
        entries.iter().copied().find(|entry| {
            // A live process with the id as its pid: the number was freed and handed out again.
            entry.pid == self.id
                || (entry.pgrp == self.id
                    && (entry.sid != self.expected_sid || !self.not_older(entry)))
        })
    }

    fn not_older(&self, entry: &ProcEntry) -> bool {
        self.leader_start.is_none_or(|start| entry.start >= start)
    }
}

/// Every process `/proc` lists, as far as it could be read.
fn processes() -> Vec<ProcEntry> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid > 0)
        .filter_map(read_stat)
        .collect()
}

fn read_stat(pid: i32) -> Option<ProcEntry> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &stat)
}

/// Fields of `/proc/PID/stat` after the command name (which may hold spaces and parentheses, so it is
/// skipped up to its last `)`): state is the 3rd field, pgrp the 5th, session the 6th, starttime the 22nd.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcEntry> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcEntry {
        pid,
        zombie: matches!(*fields.first()?, "Z" | "X"),
        pgrp: fields.get(2)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    fn sleeper() -> Child {
        Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep starts")
    }

    #[test]
    fn stat_fields_are_read_past_a_command_name_with_spaces() {
        let line = "42 (a b) c)) S 1 40 41 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        let entry = parse_stat(42, line).unwrap();
        assert_eq!((entry.pgrp, entry.sid, entry.start), (40, 41, 12345));
        assert!(!entry.zombie);
        assert!(parse_stat(1, "1 (x) S 0").is_none());
    }

    #[test]
    fn a_live_group_is_signalled_and_an_empty_one_is_gone_for_good() {
        let mut leader = sleeper();
        let group = OwnedGroup::new(leader.id(), false);
        assert!(group.signal(0), "the running group is ours");
        assert!(group.signal(libc::SIGKILL));
        leader.wait().unwrap();
        group.leader_reaped();
        assert!(!group.signal(libc::SIGKILL), "nothing is left");
        assert!(group.is_gone());
    }

    /// The record's leader is reaped and its number now leads another group (what PID reuse does):
    /// that group must not be signalled. Reuse is simulated by pointing the record at a live group.
    #[test]
    fn a_reused_group_id_is_never_signalled() {
        let mut ours = sleeper();
        let mut group = OwnedGroup::new(ours.id(), false);
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(ours.id() as i32, libc::SIGKILL) };
        ours.wait().unwrap();
        group.leader_reaped();

        let mut stranger = sleeper();
        group.id = stranger.id() as i32;
        assert!(!group.signal(libc::SIGKILL), "a stranger's group");
        assert!(group.is_gone());
        assert!(
            stranger.try_wait().unwrap().is_none(),
            "the stranger's group survives"
        );
        let _ = stranger.kill();
        let _ = stranger.wait();
    }

    /// The same, when the stranger's leader has exited and only a member of its group is left: that
    /// member is in another session than the record's group could be in.
    #[test]
    fn a_reused_group_of_another_session_is_never_signalled() {
        let mut ours = sleeper();
        let mut group = OwnedGroup::new(ours.id(), false);
        let _ = ours.kill();
        ours.wait().unwrap();
        group.leader_reaped();

        // `setsid` makes `sh` lead a new session and group; `sh` leaves its background sleep in both.
        let stranger = Command::new("setsid")
            .args(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .output()
            .expect("setsid runs");
        let sleep_pid: i32 = String::from_utf8_lossy(&stranger.stdout)
            .trim()
            .parse()
            .unwrap();
        let sleep = read_stat(sleep_pid).expect("the sleep runs");
        assert_ne!(sleep.pgrp, sleep_pid, "the sleep is a member, not a leader");
        group.id = sleep.pgrp;
        assert!(!group.signal(libc::SIGKILL));
        assert!(group.is_gone());
        assert!(
            read_stat(sleep_pid).is_some_and(|entry| !entry.zombie),
            "the stranger's member survives"
        );
        // SAFETY: plain kill(2) on the sleep started above.
        unsafe { libc::kill(sleep_pid, libc::SIGKILL) };
    }
}
