//! The spawn of the hot path (shell commands): every rule of [`command`](super::command) without the
//! cost of its `pre_exec`, which makes std `fork()` and so copy boxd's page tables. Measured here:
//! 2.3 ms per spawn with 40 MB of heap (1.1 ms with 10 MB), against 0.7 ms for a spawn that shares the
//! parent's memory until `exec`. So the child is started as glibc's `posix_spawn` starts one (`clone`
//! with `CLONE_VM | CLONE_VFORK`: boxd's thread waits until the child has exec'd or failed), and makes
//! the same calls the `pre_exec` closure makes (process group, `PR_SET_PDEATHSIG`, `oom_score_adj`).
//! Its exit is awaited on a pidfd. Where pidfds are missing (Linux < 5.3, some sandboxed kernels) the
//! spawn falls back to [`command`](super::command).

use std::ffi::{CString, OsStr, OsString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::spawn::{CHILD_OOM_SCORE_ADJ, Grouping, child_environment_layers, command};

/// The child's stack until it execs: it only makes a dozen system calls.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A child with its stdin on `/dev/null` and its stdout and stderr on pipes, leading its own process
/// group.
pub struct PipedChild {
    pid: u32,
    exit: Exit,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

enum Exit {
    Pidfd {
        pidfd: Option<AsyncFd<OwnedFd>>,
        status: Option<ExitStatus>,
    },
    /// The fallback spawn's child, reaped by tokio.
    Tokio(tokio::process::Child),
}

impl PipedChild {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// The exit status; cancel-safe, so it can sit in a `select!` loop.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let pid = self.pid;
        match &mut self.exit {
            Exit::Tokio(child) => child.wait().await,
            Exit::Pidfd { pidfd, status } => {
                if let Some(status) = status {
                    return Ok(*status);
                }
                let Some(exit) = pidfd.as_ref() else {
                    return Err(std::io::Error::other("the child's pidfd is gone"));
                };
                loop {
                    let mut ready = exit.readable().await?;
                    if let Some(exited) = reap(pid, libc::WNOHANG)? {
                        *status = Some(exited);
                        return Ok(exited);
                    }
                    ready.clear_ready();
                }
            }
        }
    }
}

impl Drop for PipedChild {
    fn drop(&mut self) {
        let Exit::Pidfd { pidfd, status } = &mut self.exit else {
            return;
        };
        if status.is_some() {
            return;
        }
        let pid = self.pid;
        if let Ok(Some(_)) = reap(pid, libc::WNOHANG) {
            return;
        }
        // Whoever dropped this has its group killed (ChildGroup) or let it run on; either way it is
        // reaped when it exits, so no zombie stays behind.
        let Some(exit) = pidfd.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    loop {
                        let Ok(mut ready) = exit.readable().await else {
                            return;
                        };
                        if !matches!(reap(pid, libc::WNOHANG), Ok(None)) {
                            return;
                        }
                        ready.clear_ready();
                    }
                });
            }
            Err(_) => tracing::warn!(pid, "a child dropped outside the runtime is left unreaped"),
        }
    }
}

/// Starts `program` with `args` in `cwd`, with boxd's environment plus the families' (as
/// [`command`](super::command) gives it) and in a process group of its own.
pub fn spawn_piped(program: &str, args: &[&str], cwd: &Path) -> std::io::Result<PipedChild> {
    spawn_piped_with_env(program, args, cwd, &[])
}

/// As [`spawn_piped`], with `extra` over the environment, and a `program` without a slash looked up
/// on the child's `PATH` (as `execvp` does; the child may not allocate, so it is looked up here).
pub fn spawn_piped_with_env(
    program: &str,
    args: &[&str],
    cwd: &Path,
    extra: &[(String, String)],
) -> std::io::Result<PipedChild> {
    if !pidfds_work() {
        return spawn_forked(program, args, cwd, extra);
    }
    let variables = environment(extra);
    let executable = find_program(program, &variables, cwd);
    let program_c = CString::new(executable.as_os_str().as_bytes())?;
    let argv_c = std::iter::once(program)
        .chain(args.iter().copied())
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()?;
    let argv = null_terminated(&argv_c);
    let envp_c = environment_block(variables)?;
    let envp = null_terminated(&envp_c);
    let cwd_c = CString::new(cwd.as_os_str().as_bytes())?;
    let (stdout_read, stdout_write) = pipe_pair()?;
    let (stderr_read, stderr_write) = pipe_pair()?;
    let stdin = std::fs::File::open("/dev/null")?;
    let oom_score = CHILD_OOM_SCORE_ADJ.to_string();

    let request = ChildRequest {
        program: program_c.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd_c.as_ptr(),
        stdio: [
            stdin.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        oom_score: oom_score.as_ptr(),
        oom_score_len: oom_score.len(),
        error: AtomicI32::new(0),
    };
    let pid = clone_and_exec(&request)?;
    let failed = request.error.load(Ordering::Acquire);
    if failed != 0 {
        // It has exited already (the parent resumes only after the child's exec or exit).
        let _ = reap(pid as u32, 0);
        return Err(std::io::Error::from_raw_os_error(failed));
    }
    let pid = pid as u32;
    drop((stdin, stdout_write, stderr_write));
    let pidfd = match open_pidfd(pid) {
        Ok(pidfd) => pidfd,
        Err(err) => {
            // SAFETY: the child is ours and not reaped, so the pid names it.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = reap(pid, 0);
            return Err(err);
        }
    };
    Ok(PipedChild {
        pid,
        exit: Exit::Pidfd {
            pidfd: Some(pidfd),
            status: None,
        },
        stdout: Some(pipe::Receiver::from_owned_fd(stdout_read)?),
        stderr: Some(pipe::Receiver::from_owned_fd(stderr_read)?),
    })
}

/// What the child needs, prepared before the clone: between clone and exec the child may not allocate
/// or take a lock (it shares boxd's memory, and another thread may hold the allocator's lock).
struct ChildRequest {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    stdio: [c_int; 3],
    parent: libc::pid_t,
    oom_score: *const u8,
    oom_score_len: usize,
    /// The errno of the step that failed, 0 when the child exec'd.
    error: AtomicI32,
}

fn clone_and_exec(request: &ChildRequest) -> std::io::Result<libc::pid_t> {
    let mut stack: Vec<u128> = Vec::with_capacity(CHILD_STACK_BYTES / size_of::<u128>());
    // SAFETY: the pointer is one past the end of the allocation the Vec holds (stacks grow down); the
    // memory stays allocated until the clone returns, which is after the child exec'd or exited.
    let stack_top = unsafe { stack.as_mut_ptr().add(stack.capacity()) }.cast::<c_void>();
    // SAFETY: sigfillset/pthread_sigmask only fill and swap signal masks we own. Every signal is blocked
    // across the clone so no handler of boxd's runs in the child (it shares boxd's memory); the child
    // resets the handlers and its mask before exec.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    }
    // SAFETY: `child_main` only makes async-signal-safe calls on `request`, which outlives the child's
    // use of it: with CLONE_VFORK this thread resumes only once the child exec'd or exited.
    let pid = unsafe {
        libc::clone(
            child_main,
            stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(request).cast_mut().cast::<c_void>(),
        )
    };
    let clone_error = std::io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    drop(stack);
    if pid == -1 {
        return Err(clone_error);
    }
    Ok(pid)
}

/// The child, from clone to exec. Only async-signal-safe calls; on failure it records errno and exits
/// 127, as a shell does for a command it cannot run.
extern "C" fn child_main(argument: *mut c_void) -> c_int {
    // SAFETY: `argument` is the `ChildRequest` `clone_and_exec` passed, alive until this child execs.
    let request = unsafe { &*argument.cast::<ChildRequest>() };
    // SAFETY: each call below is async-signal-safe and takes only pointers prepared by the parent.
    unsafe {
        reset_signals();
        let failed = prepare(request);
        let errno = if failed {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL)
        } else {
            libc::execve(request.program, request.argv, request.envp);
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOEXEC)
        };
        request.error.store(errno, Ordering::Release);
        libc::_exit(127)
    }
}

/// Handlers back to the default (boxd's would run in the child), SIGPIPE too (Rust ignores it; the
/// command should not), and nothing blocked.
unsafe fn reset_signals() {
    // SAFETY: sigaction and sigprocmask on this process's own dispositions and mask.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        for signal in 1..=libc::SIGRTMAX() {
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled =
                current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// Group, death signal, OOM score, stdio and directory; true when a step failed (errno says which).
unsafe fn prepare(request: &ChildRequest) -> bool {
    // SAFETY: system calls on this (child) process with descriptors and strings the parent prepared.
    unsafe {
        if libc::setpgid(0, 0) == -1 {
            return true;
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
            return true;
        }
        // boxd died between the clone and the prctl: the signal was never going to come.
        if libc::getppid() != request.parent {
            *libc::__errno_location() = libc::ESRCH;
            return true;
        }
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, request.oom_score.cast(), request.oom_score_len);
            libc::close(fd);
        }
        for (target, &source) in request.stdio.iter().enumerate() {
            let target = target as c_int;
            if source == target {
                // dup2 onto itself keeps close-on-exec set; clear it so the child keeps the stream.
                if libc::fcntl(source, libc::F_SETFD, 0) == -1 {
                    return true;
                }
            } else if libc::dup2(source, target) == -1 {
                return true;
            }
        }
        libc::chdir(request.cwd) == -1
    }
}

/// The same child through std's spawn, where pidfds are missing.
fn spawn_forked(
    program: &str,
    args: &[&str],
    cwd: &Path,
    extra: &[(String, String)],
) -> std::io::Result<PipedChild> {
    let mut child = command(program, Grouping::OwnGroup)
        .args(args)
        .envs(extra.iter().map(|(key, value)| (key, value)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the child was reaped at once"))?;
    let stdout = match child.stdout.take() {
        Some(out) => Some(pipe::Receiver::from_owned_fd(out.into_owned_fd()?)?),
        None => None,
    };
    let stderr = match child.stderr.take() {
        Some(err) => Some(pipe::Receiver::from_owned_fd(err.into_owned_fd()?)?),
        None => None,
    };
    Ok(PipedChild {
        pid,
        exit: Exit::Tokio(child),
        stdout,
        stderr,
    })
}

/// `waitpid` for one child: `Some` once it has exited (and is reaped).
fn reap(pid: u32, flags: c_int) -> std::io::Result<Option<ExitStatus>> {
    let mut raw_status: c_int = 0;
    // SAFETY: waitpid writes the status into a local.
    let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut raw_status, flags) };
    match reaped {
        -1 => Err(std::io::Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(ExitStatus::from_raw(raw_status))),
    }
}

fn open_pidfd(pid: u32) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::PIDFD_NONBLOCK) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = c_int::try_from(raw).map_err(|_| std::io::Error::other("pidfd out of range"))?;
    // SAFETY: the descriptor was just returned to us and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an OwnedFd keeps its one descriptor open for as long as it lives, which is as long as the
    // AsyncFd that owns it.
    unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
        .map_err(std::io::Error::from)
}

fn pidfds_work() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        // SAFETY: pidfd_open on our own pid; the descriptor is closed at once.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if raw < 0 {
            tracing::info!("pidfds are missing; shell commands are spawned with fork");
            return false;
        }
        // SAFETY: closes the descriptor just opened.
        unsafe { libc::close(raw as c_int) };
        true
    })
}

/// A pipe whose ends are closed on exec (the child gets its end through dup2).
fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut ends: [c_int; 2] = [-1, -1];
    // SAFETY: pipe2 fills the two descriptors it creates.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// boxd's environment (its secrets are already out of it) with the claim's and the families' variables
/// over it, and the caller's `extra` over those.
fn environment(extra: &[(String, String)]) -> Vec<(OsString, OsString)> {
    let mut variables: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let layers = child_environment_layers().map(|(key, value)| (key.as_str(), value.as_str()));
    let extra = extra
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()));
    for (key, value) in layers.chain(extra) {
        let key = OsStr::new(key);
        match variables.iter_mut().find(|(existing, _)| existing == key) {
            Some(slot) => slot.1 = OsString::from(value),
            None => variables.push((key.to_owned(), OsString::from(value))),
        }
    }
    variables
}

/// `program` itself when it names a path, else the first executable file of that name in the
/// directories of the child's `PATH` (relative ones from `cwd`); the name as given when none has it,
/// for the exec to fail with `ENOENT`.
fn find_program(
    program: &str,
    variables: &[(OsString, OsString)],
    cwd: &Path,
) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') || program.is_empty() {
        return program.into();
    }
    let search = variables.iter().find(|(key, _)| key == "PATH").map_or_else(
        || OsString::from("/usr/local/bin:/usr/bin:/bin"),
        |(_, value)| value.clone(),
    );
    for dir in std::env::split_paths(&search) {
        let dir = if dir.as_os_str().is_empty() {
            cwd.to_path_buf()
        } else {
            cwd.join(dir)
        };
        let candidate = dir.join(program);
        if std::fs::metadata(&candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        {
            return candidate;
        }
    }
    program.into()
}

fn environment_block(variables: Vec<(OsString, OsString)>) -> std::io::Result<Vec<CString>> {
    variables
        .into_iter()
        .map(|(key, value)| {
            let mut entry = key.into_encoded_bytes();
            entry.push(b'=');
            entry.extend_from_slice(value.as_encoded_bytes());
            CString::new(entry).map_err(std::io::Error::from)
        })
        .collect()
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn run(program: &str, args: &[&str]) -> (String, String, ExitStatus) {
        let mut child = spawn_piped(program, args, Path::new("/")).expect("spawns");
        let (mut out, mut err) = (String::new(), String::new());
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let (read_out, read_err) = tokio::join!(
            stdout.read_to_string(&mut out),
            stderr.read_to_string(&mut err)
        );
        read_out.expect("stdout");
        read_err.expect("stderr");
        let status = child.wait().await.expect("exits");
        (out, err, status)
    }

    #[tokio::test]
    async fn a_piped_child_leads_its_group_in_its_directory_with_the_raised_score() {
        let (out, err, status) = run(
            "/bin/sh",
            &[
                "-c",
                r#"read -r pid _ _ _ pgrp _ < /proc/self/stat; echo "$pid $pgrp $(cat /proc/self/oom_score_adj) $PWD"; echo oops >&2; exit 3"#,
            ],
        )
        .await;
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "{out}");
        assert_eq!(fields[0], fields[1], "the child leads its own group");
        assert_eq!(fields[2], CHILD_OOM_SCORE_ADJ.to_string());
        assert_eq!(fields[3], "/");
        assert_eq!(err, "oops\n");
        assert_eq!(status.code(), Some(3));
    }

    #[tokio::test]
    async fn a_piped_child_gets_default_signals_and_an_empty_mask() {
        // SigBlk is the blocked mask, SigIgn the ignored set: Rust ignores SIGPIPE, the child must not.
        let (out, _, status) = run("/bin/cat", &["/proc/self/status"]).await;
        assert!(status.success());
        let field = |name: &str| {
            out.lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(field("SigBlk:"), "0000000000000000", "{out}");
        let ignored = u64::from_str_radix(&field("SigIgn:"), 16).expect("hex");
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE is not ignored"
        );
    }

    #[tokio::test]
    async fn a_program_that_cannot_run_is_an_error_with_its_errno() {
        let missing = spawn_piped("/nonexistent/program", &[], Path::new("/"))
            .err()
            .expect("fails");
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        let no_directory = spawn_piped("/bin/true", &[], Path::new("/nonexistent-dir"))
            .err()
            .expect("fails");
        assert_eq!(no_directory.raw_os_error(), Some(libc::ENOENT));
        let nul = spawn_piped("/bin/echo", &["a\0b"], Path::new("/"))
            .err()
            .expect("fails");
        assert_eq!(nul.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn a_bare_name_is_found_on_the_childs_path_and_extra_env_wins() {
        let extra = [
            ("GREETING".to_owned(), "hi".to_owned()),
            ("PATH".to_owned(), "/nonexistent:/bin:/usr/bin".to_owned()),
        ];
        let mut child =
            spawn_piped_with_env("sh", &["-c", "echo $GREETING"], Path::new("/"), &extra)
                .expect("spawns");
        let mut out = String::new();
        let mut stdout = child.stdout.take().expect("piped");
        stdout.read_to_string(&mut out).await.expect("stdout");
        assert!(child.wait().await.expect("exits").success());
        assert_eq!(out, "hi\n");
        let only_elsewhere = [("PATH".to_owned(), "/nonexistent".to_owned())];
        let missing = spawn_piped_with_env("sh", &[], Path::new("/"), &only_elsewhere)
            .err()
            .expect("not on that PATH");
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    }

    #[tokio::test]
    async fn a_dropped_child_is_reaped_when_it_exits() {
        let child = spawn_piped("/bin/sh", &["-c", "exit 0"], Path::new("/")).expect("spawns");
        let pid = child.id();
        drop(child);
        let mut reaped = false;
        for _ in 0..200 {
            // The reaper is a task on this (single-threaded) test runtime: yield to it.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            if !Path::new(&format!("/proc/{pid}")).exists() {
                reaped = true;
                break;
            }
        }
        assert!(reaped, "no zombie is left");
    }
}
