//! Who a worker runs as, and what confines it: the isolation between training instances, and between an
//! instance and boxd (issue #45).
//!
//! An instance's worker runs untrusted code (AppWorld's `execute` runs the policy's Python). With
//! `--training-uids FIRST-LAST` and boxd as root, every worker (the spare included) gets a uid of its own
//! from that range, with a group of the same number and no other group, and a home of its own (0700,
//! owned by that uid, removed at release) as HOME and working directory. A unique uid is what makes the
//! rest hold without `CAP_SYS_ADMIN` (the Docker and Kubernetes default):
//!
//! - one instance cannot open another's files, signal or trace its processes, or read `/proc/<pid>/fd`
//!   of them (different uid; the workers are also non-dumpable, see `worker/protocol.py`);
//! - everything an instance started can be killed, even what left its process group (`setsid`): a
//!   process running as that uid calls `kill(-1, SIGKILL)`, which reaches every process of the uid (the
//!   caller excepted) and nothing else ([`kill_everything_of`]); released uids are reaped before they are
//!   handed out again;
//! - `RLIMIT_NPROC` counts per uid, so it bounds the processes (and threads) of one instance.
//!
//! Each worker also gets a network namespace of its own when the kernel lets boxd make one (root with
//! `CAP_SYS_ADMIN`; neither BFCL nor AppWorld needs a network): only a loopback of its own, so boxd's
//! listeners are out of reach. Where that is refused (EPERM under Docker's default capabilities), boxd's
//! listeners refuse loopback connections from the uids of [`Users::confined_uids`] instead.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::child::{self, Identity};

/// The most uids a range may hold: more would be a mistyped range.
const UIDS_MAX: u32 = 65_536;
/// How long [`kill_everything_of`] keeps trying before it gives the uid up for this run of boxd.
const REAP_BOUND: Duration = Duration::from_secs(3);
/// `kill(-1, SIGKILL)` rounds one reaper process makes before it lets boxd look (a fork bomb refills).
const KILL_ROUNDS: u32 = 64;

/// The users the workers run as.
#[derive(Debug, Clone)]
pub enum Users {
    /// boxd's own user (boxd is unprivileged, or no user was given).
    Own,
    /// Every worker as one user (`--training-user` without `--training-uids`): instances are not
    /// isolated from each other.
    Shared(Identity),
    /// A uid of its own for every worker (`--training-uids`).
    PerInstance(Arc<UidPool>),
}

impl Users {
    /// The users whose loopback connections boxd's listeners refuse: the workers' when they are not boxd's.
    pub fn confined_uids(&self) -> Vec<RangeInclusive<u32>> {
        match self {
            Users::Own => Vec::new(),
            Users::Shared(identity) => vec![identity.uid..=identity.uid],
            Users::PerInstance(pool) => vec![pool.range.clone()],
        }
    }

    /// For logs and `/readyz`.
    pub fn describe(&self) -> String {
        match self {
            Users::Own => "boxd's own user".into(),
            Users::Shared(identity) => format!(
                "{} (one user for every instance; --training-uids gives each its own)",
                identity.describe()
            ),
            Users::PerInstance(pool) => format!(
                "a uid of their own each, from {}-{}",
                pool.range.start(),
                pool.range.end()
            ),
        }
    }
}

/// Parses `FIRST-LAST` (or one uid) for `--training-uids`.
pub fn parse_uid_range(spec: &str) -> Result<RangeInclusive<u32>, String> {
    let spec = spec.trim();
    let (first, last) = spec.split_once('-').unwrap_or((spec, spec));
    let number = |text: &str| {
        text.trim()
            .parse::<u32>()
            .map_err(|_| format!("{spec:?} is not FIRST-LAST (two uids, e.g. 50000-50199)"))
    };
    let (first, last) = (number(first)?, number(last)?);
    if first == 0 {
        return Err(
            "the range holds uid 0 (root): the workers must leave root, give unprivileged uids"
                .into(),
        );
    }
    if last < first {
        return Err(format!("{spec:?}: the last uid is below the first"));
    }
    if last == u32::MAX || last.saturating_sub(first) >= UIDS_MAX {
        return Err(format!(
            "{spec:?}: at most {UIDS_MAX} uids, below 4294967295"
        ));
    }
    Ok(first..=last)
}

/// The uids of `--training-uids` not in use by a worker.
#[derive(Debug)]
pub struct UidPool {
    range: RangeInclusive<u32>,
    free: Mutex<Vec<u32>>,
}

impl UidPool {
    pub fn new(range: RangeInclusive<u32>) -> UidPool {
        // Handed out lowest first (popped from the end).
        let free = range.clone().rev().collect();
        UidPool {
            range,
            free: Mutex::new(free),
        }
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.range.end().saturating_sub(*self.range.start()))
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    }

    fn take(&self) -> Option<u32> {
        lock(&self.free).pop()
    }

    fn give_back(&self, uid: u32) {
        lock(&self.free).push(uid);
    }

    /// Kills what is left of every uid of the range (a previous boxd's workers and what they started,
    /// which outlived it in sessions of their own); blocking. The range must belong to this boxd alone.
    pub fn sweep(&self) -> usize {
        let occupied = uids_with_processes(&self.range);
        for &uid in &occupied {
            if !kill_everything_of(uid) {
                tracing::warn!(uid, "processes of this training uid survive every kill");
            }
        }
        occupied.len()
    }
}

/// A worker's user and home, for as long as the worker lives. Dropping it kills every process of the
/// uid, removes the home and frees the uid (in the background); [`Lease::end`] does the same and waits.
pub struct Lease {
    pub identity: Option<Identity>,
    /// The worker's HOME and working directory.
    pub home: PathBuf,
    /// Present when the uid is this worker's alone: then it is reaped, and the home removed, at the end.
    own: Option<(u32, Arc<UidPool>)>,
}

impl Lease {
    /// A user and a home for a new worker, blocking (a fork to clear the uid, a directory).
    pub fn take(users: &Users, directory: &Path) -> Result<Lease, String> {
        let pool = match users {
            Users::Own => {
                return Ok(Lease {
                    identity: None,
                    home: directory.to_path_buf(),
                    own: None,
                });
            }
            Users::Shared(identity) => {
                return Ok(Lease {
                    identity: Some(identity.clone()),
                    home: directory.to_path_buf(),
                    own: None,
                });
            }
            Users::PerInstance(pool) => pool,
        };
        let uid = pool.take().ok_or_else(|| {
            format!(
                "every uid of --training-uids ({} of them) is in use by a worker: release an \
                 instance, or give a larger range",
                pool.len()
            )
        })?;
        let lease = Lease {
            identity: Some(Identity {
                name: uid.to_string(),
                uid,
                gid: uid,
                groups: vec![uid],
            }),
            home: directory.join(uid.to_string()),
            own: Some((uid, Arc::clone(pool))),
        };
        // Nothing of an earlier holder may be left to meet the new one (it was reaped at its release;
        // this also covers processes a crashed boxd left).
        if !kill_everything_of(uid) {
            return Err(format!(
                "processes of training uid {uid} survive every kill; it is not used again"
            ));
        }
        make_home(&lease.home, uid).map_err(|err| {
            format!(
                "cannot make the worker's home {}: {err}",
                lease.home.display()
            )
        })?;
        Ok(lease)
    }

    /// Kills every process of the uid, removes the home and frees the uid; blocking, bounded by
    /// [`REAP_BOUND`]. Nothing to do for a shared user.
    fn finish(own: Option<(u32, Arc<UidPool>)>, home: &Path) {
        let Some((uid, pool)) = own else {
            return;
        };
        if !kill_everything_of(uid) {
            // Not handed out again: its processes would meet the next instance.
            tracing::warn!(
                uid,
                "processes of a released training uid survive every kill; the uid is retired"
            );
            return;
        }
        if let Err(err) = std::fs::remove_dir_all(home)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(home = %home.display(), error = %err, "cannot remove a worker's home");
        }
        pool.give_back(uid);
    }

    /// [`Drop`]'s work, awaited: when this returns, nothing the worker started is left.
    pub async fn end(mut self) {
        let own = self.own.take();
        let home = std::mem::take(&mut self.home);
        let _ = tokio::task::spawn_blocking(move || Lease::finish(own, &home)).await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(own) = self.own.take() else {
            return;
        };
        let home = std::mem::take(&mut self.home);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || Lease::finish(Some(own), &home));
            }
            Err(_) => Lease::finish(Some(own), &home),
        }
    }
}

/// `home` made anew for `uid`: 0700, owned by it (a leftover of a crashed boxd is removed first).
fn make_home(home: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::remove_dir_all(home) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(home)?;
    std::os::unix::fs::lchown(home, Some(uid), Some(uid))
}

/// Kills every process of `uid` (real uid), blocking; true once none is left (zombies aside: they run
/// nothing), false when some survive [`REAP_BOUND`].
///
/// A process running as `uid` calls `kill(-1, SIGKILL)`: the kernel signals every process that uid may
/// signal (the same real or saved uid: every process of the instance, a set-uid program it ran included)
/// except the caller, in one pass; repeated until it finds none, so a process forking meanwhile is caught
/// by a later pass (`RLIMIT_NPROC` bounds how many there can be). The reaper is a fork that never execs
/// ([`child::run_forked`]).
pub fn kill_everything_of(uid: u32) -> bool {
    let deadline = Instant::now() + REAP_BOUND;
    loop {
        if uids_with_processes(&(uid..=uid)).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // SAFETY: the body makes only async-signal-safe system calls (setgroups, setgid, setuid, kill,
        // sched_yield) on values copied before the fork. Its exit code is not read: what is left of the
        // uid is, below.
        let reaper = unsafe {
            child::run_forked(move || {
                let groups = [uid];
                if libc::setgroups(1, groups.as_ptr()) == -1
                    || libc::setgid(uid) == -1
                    || libc::setuid(uid) == -1
                {
                    return Ok(2);
                }
                for _ in 0..KILL_ROUNDS {
                    if libc::kill(-1, libc::SIGKILL) == -1 {
                        // ESRCH: nothing of the uid is left to signal.
                        return Ok(0);
                    }
                    libc::sched_yield();
                }
                Ok(1)
            })
        };
        if let Err(err) = reaper {
            tracing::warn!(uid, error = %err, "cannot start the reaper of a training uid");
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        // A killed process leaves `/proc` once its parent reaps it: give the kernel a moment.
        let settle = Instant::now() + Duration::from_millis(200);
        while Instant::now() < settle && !uids_with_processes(&(uid..=uid)).is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The uids of `range` that own a live (not zombie) process, by the real uid in `/proc/<pid>/status`.
pub fn uids_with_processes(range: &RangeInclusive<u32>) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let mut uid = None;
        let mut zombie = false;
        for line in status.lines() {
            if let Some(state) = line.strip_prefix("State:") {
                zombie = state.trim_start().starts_with(['Z', 'X']);
            } else if let Some(uids) = line.strip_prefix("Uid:") {
                uid = uids
                    .split_whitespace()
                    .next()
                    .and_then(|real| real.parse::<u32>().ok());
                break;
            }
        }
        if let Some(uid) = uid
            && !zombie
            && range.contains(&uid)
            && !found.contains(&uid)
        {
            found.push(uid);
        }
    }
    found
}

/// Whether boxd can give a worker a network namespace of its own (`unshare(CLONE_NEWNET)` needs
/// `CAP_SYS_ADMIN`); the probe is a fork that tries and exits, never execs ([`child::run_forked`]).
/// Blocking (~1 ms).
pub fn probe_network_namespace() -> std::io::Result<()> {
    // SAFETY: the body makes only async-signal-safe system calls (unshare, __errno_location).
    let status = unsafe {
        child::run_forked(|| {
            if libc::unshare(libc::CLONE_NEWNET) == -1 {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(1);
                return Ok(errno.clamp(1, 255));
            }
            Ok(0)
        })
    }?;
    match status.code() {
        Some(0) => Ok(()),
        Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
        None => Err(std::io::Error::other(format!(
            "the network namespace probe ended with {status}"
        ))),
    }
}

/// What a worker's `pre_exec` applies, prepared before the fork.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// `None`: boxd's own user.
    pub identity: Option<Identity>,
    pub network_namespace: bool,
    /// `RLIMIT_AS`, bytes.
    pub memory_max: u64,
    /// `RLIMIT_CPU`, seconds of CPU time of one process.
    pub cpu_seconds: u64,
    /// `RLIMIT_NPROC`: only with a uid of the instance's own (the count is per uid).
    pub processes_max: Option<u64>,
    /// boxd's pid: the worker must die with it (`PR_SET_PDEATHSIG`, cleared by a change of user).
    pub parent: u32,
}

impl Confinement {
    pub fn new(
        identity: Option<Identity>,
        network_namespace: bool,
        memory_max: u64,
        cpu_seconds: u64,
        processes_max: Option<u64>,
    ) -> Confinement {
        Confinement {
            identity,
            network_namespace,
            memory_max,
            cpu_seconds,
            processes_max,
            parent: std::process::id(),
        }
    }

    /// Applies everything, in the forked child before exec, as root when switching: the new network
    /// namespace first (it needs root's `CAP_SYS_ADMIN`), then the limits (a user may lower its own, but
    /// a hard limit set as root is one the worker cannot raise), then the user, then `no_new_privs` (a
    /// set-uid program gives the policy nothing) and the parent-death signal again.
    ///
    /// # Safety
    /// Call only between fork and exec: it makes only async-signal-safe system calls (unshare, socket,
    /// ioctl, close, setrlimit, setgroups, setgid, setuid, prctl, getppid) on data prepared before the
    /// fork.
    pub unsafe fn apply(&self) -> std::io::Result<()> {
        let failed = || Err(std::io::Error::last_os_error());
        // SAFETY: see the function's contract; every pointer is to memory this struct owns.
        unsafe {
            if self.network_namespace {
                if libc::unshare(libc::CLONE_NEWNET) == -1 {
                    return failed();
                }
                Confinement::loopback_up();
            }
            let limits = [
                (libc::RLIMIT_AS, Some(self.memory_max)),
                (libc::RLIMIT_CPU, Some(self.cpu_seconds)),
                (libc::RLIMIT_NPROC, self.processes_max),
            ];
            for (resource, value) in limits {
                let Some(value) = value else { continue };
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return failed();
                }
            }
            if let Some(identity) = &self.identity {
                let groups = [identity.gid];
                if libc::setgroups(1, groups.as_ptr()) == -1
                    || libc::setgid(identity.gid) == -1
                    || libc::setuid(identity.uid) == -1
                {
                    return failed();
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1
                {
                    return failed();
                }
                if u32::try_from(libc::getppid()).ok() != Some(self.parent) {
                    return Err(std::io::Error::other("boxd exited while starting a worker"));
                }
            }
        }
        Ok(())
    }

    /// Best effort: the new namespace's own loopback up, for a library that talks to itself over it.
    unsafe fn loopback_up() {
        // SAFETY: socket, ioctl and close on a request struct we own; the name is NUL-terminated and
        // shorter than IFNAMSIZ.
        unsafe {
            let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if socket < 0 {
                return;
            }
            let mut request: libc::ifreq = std::mem::zeroed();
            for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
                *slot = *byte as libc::c_char;
            }
            if libc::ioctl(socket, libc::SIOCGIFFLAGS as _, &mut request) == 0 {
                request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                libc::ioctl(socket, libc::SIOCSIFFLAGS as _, &request);
            }
            libc::close(socket);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_refuse_root_reversed_and_huge_ones() {
        assert_eq!(parse_uid_range("50000-50199"), Ok(50000..=50199));
        assert_eq!(parse_uid_range(" 7 "), Ok(7..=7));
        assert!(parse_uid_range("0-10").is_err());
        assert!(parse_uid_range("10-5").is_err());
        assert!(parse_uid_range("1-4294967295").is_err());
        assert!(parse_uid_range("1-100000").is_err());
        assert!(parse_uid_range("a-b").is_err());
        assert_eq!(UidPool::new(5..=9).len(), 5);
    }

    #[test]
    fn the_pool_hands_out_each_uid_once() {
        let pool = UidPool::new(10..=11);
        assert_eq!(pool.take(), Some(10));
        assert_eq!(pool.take(), Some(11));
        assert_eq!(pool.take(), None);
        pool.give_back(10);
        assert_eq!(pool.take(), Some(10));
    }

    #[test]
    fn a_uid_without_processes_is_clear_at_once() {
        // A uid nothing runs as: nothing to kill, and no reaper is needed.
        assert!(uids_with_processes(&(3_999_999_000..=3_999_999_001)).is_empty());
        assert!(kill_everything_of(3_999_999_000));
    }
}
