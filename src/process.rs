//! Process-group signalling shared by everything that runs children in their own group (shell commands,
//! the IPython kernel, hosted MCP servers), so one signal reaches a command and everything it started.

/// Sends `signal` to every process in group `pgid`. A group that is already gone (ESRCH) is fine.
pub fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    unsafe {
        libc::killpg(pgid, signal);
    }
}
