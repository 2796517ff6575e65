//! A child of boxd that never execs, for work that must happen as another user or in another namespace
//! than boxd's own: a probe (can a child make this namespace?) or a reaper (`kill(-1)` as a worker's
//! uid). The child runs a closure of boxd's own code between fork and exec and ends with `_exit`, so
//! no program is run and nothing else of boxd goes on in the copy.

use std::process::{Command, ExitStatus, Stdio};

/// Forks, runs `body` in the child and waits for it, blocking (a fork and a wait, ~1 ms). The child
/// exits with the code `body` returns; when `body` fails, the child ends at once and its error is
/// what this returns, as for a refused `pre_exec`. The child's stdio is `/dev/null`.
///
/// # Safety
/// `body` runs between fork and exec in a copy of a multithreaded process: it may make only
/// async-signal-safe calls (no allocation, no lock) on data prepared before the fork.
pub unsafe fn run_forked<F>(mut body: F) -> std::io::Result<ExitStatus>
where
    F: FnMut() -> std::io::Result<libc::c_int> + Send + Sync + 'static,
{
    use std::os::unix::process::CommandExt;
    // std's `Command` makes the fork and the wait, and brings an error of the child back through its
    // pipe; "/" is never executed: `body`, then `_exit`, end the child first.
    let mut child = Command::new("/");
    child
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: `body` keeps the caller's contract; `_exit` is async-signal-safe.
    unsafe {
        child.pre_exec(move || {
            let code = body()?;
            libc::_exit(code)
        });
    }
    child.status()
}

#[cfg(test)]
mod tests {
    use super::run_forked;

    #[test]
    fn the_body_s_code_is_the_exit_status_and_its_error_the_answer() {
        // SAFETY: the bodies make no call at all.
        let status = unsafe { run_forked(|| Ok(7)) }.expect("a fork");
        assert_eq!(status.code(), Some(7));
        let refused = unsafe { run_forked(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))) };
        assert_eq!(
            refused.map_err(|err| err.raw_os_error()).err(),
            Some(Some(libc::EPERM))
        );
    }
}
