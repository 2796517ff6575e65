//! Keeping the container's programs running: `boxd serve` first, then each service. A program that
//! exits is started again after 1, 2, 4 ... 30 s (back to 1 s once it had run a minute); restarts are
//! scheduled, so one program's backoff never delays another's. Orphans of any program are reaped here,
//! as PID 1 must; when `boxd serve` dies, what its children left is stopped before it starts again.
//! SIGTERM, SIGINT or SIGQUIT stop everything: SIGTERM to each program, SIGKILL to what remains after
//! a grace period.

use std::ffi::OsString;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handover;

/// How long a program that exited waits before it starts again: `first`, doubling with each exit up
/// to `max`, back to `first` once it had run a minute.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}
/// A program that ran this long before exiting starts over at the first delay.
const STABLE_RUN: Duration = Duration::from_secs(60);
/// How long programs may take to stop after SIGTERM; engines send SIGKILL 10 s after their SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(8);
/// The longest the loop sleeps when nothing is due (a wake-up costs nothing; it bounds every wait).
const IDLE_WAKE: Duration = Duration::from_secs(3600);
/// How long init has had nothing to do (no program started, no signal) before it releases its code pages.
const SETTLE_BEFORE_RELEASE: Duration = Duration::from_secs(1);
/// `boxd serve`'s exit status for flags or environment it rejects: the same start would fail again.
const USAGE_ERROR: i32 = 2;
/// Descriptors are first moved at or above this, so placing one at a low number cannot overwrite
/// another.
const SCRATCH_FD_FLOOR: RawFd = 10;
/// The most spent stopping what a dead boxd's children left before boxd starts again.
const SWEEP_BOUND: Duration = Duration::from_secs(2);
/// Between two passes of that sweep that found something.
const SWEEP_PAUSE: Duration = Duration::from_millis(10);

enum Kind {
    Boxd {
        executable: PathBuf,
        listener: TcpListener,
        offer: Arc<handover::Offer>,
        environment: Vec<(OsString, OsString)>,
    },
    Service(PathBuf),
}

pub struct Program {
    name: String,
    kind: Kind,
    pid: Option<libc::pid_t>,
    started: Instant,
    delay: Duration,
    due: Option<Instant>,
}

impl Program {
    fn new(name: String, kind: Kind) -> Program {
        Program {
            name,
            kind,
            pid: None,
            started: Instant::now(),
            delay: Duration::ZERO,
            due: Some(Instant::now()),
        }
    }

    /// `boxd serve` in `environment`, handed `listener` and the secrets of `offer` when it asks.
    pub fn boxd(
        executable: PathBuf,
        listener: TcpListener,
        offer: handover::Offer,
        environment: Vec<(OsString, OsString)>,
    ) -> Program {
        Program::new(
            "boxd".into(),
            Kind::Boxd {
                executable,
                listener,
                offer: Arc::new(offer),
                environment,
            },
        )
    }

    /// Every executable file in `dir`, in name order; none when it does not exist.
    pub fn services(dir: &Path) -> Vec<Program> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| is_executable_file(path))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| {
                let name = path
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Program::new(name, Kind::Service(path))
            })
            .collect()
    }

    fn start(&mut self, backoff: Backoff) {
        self.due = None;
        self.started = Instant::now();
        match self.spawn() {
            Ok(pid) => self.pid = Some(pid),
            Err(err) => {
                eprintln!("boxd init: cannot start {}: {err}", self.name);
                self.schedule_restart(backoff);
            }
        }
    }

    fn spawn(&self) -> std::io::Result<libc::pid_t> {
        let child = match &self.kind {
            Kind::Service(path) => {
                let mut command = Command::new(path);
                // Its own group: SIGTERM reaches what the program started too (a script's children).
                command.stdin(Stdio::null()).process_group(0);
                // SAFETY: the closure calls only sigprocmask, which is async-signal-safe.
                unsafe {
                    command.pre_exec(unblock_signals);
                }
                command.spawn()?
            }
            Kind::Boxd {
                executable,
                listener,
                offer,
                environment,
            } => {
                let address = listener.local_addr()?;
                let (init_end, serve_end) = handover::channel()?;
                let mut command = Command::new(executable);
                command
                    .arg("serve")
                    .arg("--host")
                    .arg(address.ip().to_string())
                    .arg("--port")
                    .arg(address.port().to_string())
                    .arg("--handover-fd")
                    .arg(handover::HANDOVER_FD.to_string())
                    .env_clear()
                    .envs(environment.iter().map(|(name, value)| (name, value)))
                    .stdin(Stdio::null());
                let placements = [(serve_end.as_raw_fd(), handover::HANDOVER_FD)];
                // SAFETY: the closure calls only fcntl, dup2, getegid, setresgid and sigprocmask, which
                // are async-signal-safe, on descriptors this process owns until the spawn returns.
                unsafe {
                    command.pre_exec(move || {
                        place_descriptors(&placements)?;
                        handover::set_group_apart();
                        unblock_signals()
                    });
                }
                let child = command.spawn()?;
                drop(serve_end);
                let pid = libc::pid_t::try_from(child.id())
                    .map_err(|_| std::io::Error::other("pid out of range"))?;
                let offer = Arc::clone(offer);
                let listener = listener.try_clone()?;
                // Its own thread: the wait for serve's request must not hold the reaping and restarts.
                std::thread::Builder::new()
                    .name("handover".into())
                    .spawn(move || hand_over(&init_end, pid, &offer, &listener))?;
                return Ok(pid);
            }
        };
        libc::pid_t::try_from(child.id()).map_err(|_| std::io::Error::other("pid out of range"))
    }

    fn schedule_restart(&mut self, backoff: Backoff) {
        let now = Instant::now();
        if now.duration_since(self.started) >= STABLE_RUN {
            self.delay = backoff.first;
        }
        eprintln!(
            "boxd init: restarting {} in {:.1} s",
            self.name,
            self.delay.as_secs_f64()
        );
        self.due = Some(now + self.delay);
        self.delay = self.delay.saturating_mul(2).min(backoff.max);
    }

    fn signal(&self, signal: libc::c_int) {
        let Some(pid) = self.pid else { return };
        let target = match self.kind {
            Kind::Service(_) => -pid,
            Kind::Boxd { .. } => pid,
        };
        // SAFETY: kill with a pid this process started and has not reaped.
        unsafe { libc::kill(target, signal) };
    }
}

/// Answers the serve started as `pid`, then keeps the claim it reports; a serve that cannot be answered
/// is stopped (and restarted like any exit), since it cannot serve without its secrets.
fn hand_over(
    channel: &std::os::fd::OwnedFd,
    pid: libc::pid_t,
    offer: &handover::Offer,
    listener: &TcpListener,
) {
    match handover::answer(channel, pid, offer, listener) {
        Ok(()) => {
            if let Err(err) = handover::follow_claims(channel, pid, offer) {
                eprintln!("boxd init: no more claims taken from boxd serve (pid {pid}): {err}");
            }
        }
        // It exited before asking: its exit is reported and restarted as usual.
        Err(handover::HandoverError::Refused) => {}
        Err(err) => {
            eprintln!("boxd init: no secrets for boxd serve (pid {pid}): {err}; stopping it");
            // SAFETY: kill only sends a signal, to the child this process started and has not reaped
            // (it just asked, or failed to).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// In the child, before exec: each `(from, to)` descriptor ends up at `to`, open across the exec.
fn place_descriptors(placements: &[(RawFd, RawFd)]) -> std::io::Result<()> {
    let mut moved = [(-1, -1); 2];
    for (slot, &(from, to)) in moved.iter_mut().zip(placements) {
        // SAFETY: fcntl on a descriptor the parent owns (inherited by this child).
        let scratch = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, SCRATCH_FD_FLOOR) };
        if scratch == -1 {
            return Err(std::io::Error::last_os_error());
        }
        *slot = (scratch, to);
    }
    for &(scratch, to) in moved.iter().filter(|(scratch, _)| *scratch >= 0) {
        // SAFETY: dup2 between descriptors of this child; the copy at `to` is open across exec.
        if unsafe { libc::dup2(scratch, to) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the child, before exec: the signals this process waits for are blocked here, and a blocked mask
/// survives exec (a program would never see its SIGTERM).
fn unblock_signals() -> std::io::Result<()> {
    let signals = waited_signals();
    // SAFETY: sigprocmask with a valid set.
    if unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &signals, std::ptr::null_mut()) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The signals this process waits for instead of handling them asynchronously.
fn waited_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
        ] {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// The next of `signals` within `timeout`, or `None` when it passed (or a wake-up of no interest).
fn wait_for_signal(signals: &libc::sigset_t, timeout: Duration) -> Option<libc::c_int> {
    let timeout = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: sigtimedwait with a valid set and timeout; the siginfo is not needed.
    let signal = unsafe { libc::sigtimedwait(signals, std::ptr::null_mut(), &timeout) };
    (signal > 0).then_some(signal)
}

/// What `waitpid` said about one exited process.
struct Exit {
    pid: libc::pid_t,
    status: libc::c_int,
}

/// One exited child (a program or an orphan), if any is waiting to be reaped.
fn reap_one() -> Option<Exit> {
    let mut status = 0;
    // SAFETY: waitpid with a pointer to a local.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some(Exit { pid, status })
}

fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("stopped ({status})")
    }
}

/// Runs `programs` until a stop signal (exit 0) or a usage error of `boxd serve` (exit 2).
pub fn run(mut programs: Vec<Program>, backoff: Backoff) -> ExitCode {
    for program in &mut programs {
        program.delay = backoff.first;
    }
    let signals = waited_signals();
    // Blocked before the first child exists, so no SIGCHLD or SIGTERM is lost; each child unblocks them
    // before its exec.
    // SAFETY: sigprocmask with a valid set; this process is single-threaded.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) } == -1 {
        eprintln!(
            "boxd init: cannot block signals: {}",
            std::io::Error::last_os_error()
        );
        return ExitCode::FAILURE;
    }
    // As PID 1 orphans come here anyway; elsewhere (tests, `boxd init` on a host) this makes them.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // When init gives back the code pages its last work mapped (see below).
    let mut release_at = None;
    loop {
        let now = Instant::now();
        for program in programs.iter_mut() {
            if program.due.is_some_and(|due| due <= now) {
                program.start(backoff);
                release_at = now.checked_add(SETTLE_BEFORE_RELEASE);
            }
        }
        let next_due = programs.iter().filter_map(|program| program.due).min();
        // Every program runs and nothing happened for a while (serve's hand-over is done): init only
        // waits from here on, and the code pages its start and its last event mapped are given back
        // (with the test build, 9.5 of its 11 MiB RSS; see `core::memory`).
        if next_due.is_none() && release_at.is_some_and(|at| at <= now) {
            crate::core::memory::release_code_pages();
            release_at = None;
        }
        let timeout = next_due.map_or(IDLE_WAKE, |due| {
            due.saturating_duration_since(Instant::now())
        });
        let timeout = release_at.map_or(timeout, |at| {
            timeout.min(at.saturating_duration_since(Instant::now()))
        });
        let signal = wait_for_signal(&signals, timeout);
        if signal.is_some() {
            release_at = Instant::now().checked_add(SETTLE_BEFORE_RELEASE);
        }
        if let Some(signal) = signal
            && matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGQUIT)
        {
            eprintln!("boxd init: signal {signal}: stopping");
            return stop(&mut programs, ExitCode::SUCCESS);
        }
        while let Some(exit) = reap_one() {
            let Some(program) = programs
                .iter_mut()
                .find(|program| program.pid == Some(exit.pid))
            else {
                continue; // an orphan, now reaped
            };
            program.pid = None;
            eprintln!("boxd init: {} {}", program.name, describe(exit.status));
            let usage_error = matches!(program.kind, Kind::Boxd { .. })
                && libc::WIFEXITED(exit.status)
                && libc::WEXITSTATUS(exit.status) == USAGE_ERROR;
            if usage_error {
                // clap's usage errors (an unknown flag, a bad BOXD_TOOLS value) would fail forever:
                // boxd's message above is the container's last words.
                eprintln!(
                    "boxd init: boxd rejected its configuration (status 2, message above); stopping"
                );
                return stop(&mut programs, ExitCode::from(2));
            }
            let was_boxd = matches!(program.kind, Kind::Boxd { .. });
            program.schedule_restart(backoff);
            if was_boxd {
                // Before the restart is due (a second from now at the soonest); what is killed here is
                // reaped by this loop as any orphan.
                stop_what_boxd_left(&programs);
            }
        }
    }
}

/// Once `boxd serve` is gone (killed, crashed): its children's leaders die with it (`PR_SET_PDEATHSIG`)
/// and what they started is reparented here, to PID 1 (or to this subreaper). All of it is stopped
/// before boxd starts again: every child of this process that is not one of its programs, and its
/// process group, if it carries a boxd instance's marker (whatever its group) or is in no service's
/// group (a service's orphans are left alone). Passes repeat while they find something, as a dying
/// process's own children come here only then; bounded by [`SWEEP_BOUND`].
fn stop_what_boxd_left(programs: &[Program]) {
    let running: Vec<libc::pid_t> = programs.iter().filter_map(|program| program.pid).collect();
    // SAFETY: getpid and getpgrp only read ids.
    let (me, own_group) = unsafe { (libc::getpid(), libc::getpgrp()) };
    let started = Instant::now();
    let mut stopped = 0usize;
    while started.elapsed() < SWEEP_BOUND {
        let left: Vec<(libc::pid_t, libc::pid_t)> = live_children(me)
            .into_iter()
            .filter(|(pid, _)| !running.contains(pid))
            .filter(|(pid, group)| {
                !running.contains(group)
                    || u32::try_from(*pid).is_ok_and(crate::core::child::carries_any_marker)
            })
            .collect();
        if left.is_empty() {
            break;
        }
        for &(pid, group) in &left {
            if group > 1 && group != own_group && !running.contains(&group) {
                // SAFETY: killpg only sends a signal.
                unsafe { libc::killpg(group, libc::SIGKILL) };
            }
            // SAFETY: kill on a child of this process that is not reaped (not a zombie: its pid is ours).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        stopped = stopped.saturating_add(left.len());
        std::thread::sleep(SWEEP_PAUSE);
    }
    if stopped > 0 {
        eprintln!(
            "boxd init: stopped {stopped} processes boxd's children left running, in {:?}",
            started.elapsed()
        );
    }
}

/// The children of `parent` that still run (not zombies), with their process groups, from `/proc`.
fn live_children(parent: libc::pid_t) -> Vec<(libc::pid_t, libc::pid_t)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name (which may hold anything): state, ppid, pgrp.
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid: libc::pid_t = fields.next()?.parse().ok()?;
            let group: libc::pid_t = fields.next()?.parse().ok()?;
            (ppid == parent && !matches!(state, "Z" | "X")).then_some((pid, group))
        })
        .collect()
}

/// SIGTERM to every running program, SIGKILL to those still running after [`STOP_GRACE`].
fn stop(programs: &mut [Program], code: ExitCode) -> ExitCode {
    let signals = waited_signals();
    for program in programs.iter() {
        program.signal(libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while programs.iter().any(|program| program.pid.is_some()) {
        let now = Instant::now();
        if now >= deadline {
            for program in programs.iter().filter(|program| program.pid.is_some()) {
                eprintln!("boxd init: {} did not stop; killing it", program.name);
                program.signal(libc::SIGKILL);
            }
            break;
        }
        wait_for_signal(&signals, deadline.saturating_duration_since(now));
        while let Some(exit) = reap_one() {
            if let Some(program) = programs
                .iter_mut()
                .find(|program| program.pid == Some(exit.pid))
            {
                program.pid = None;
            }
        }
    }
    code
}
