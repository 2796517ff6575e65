//! Process-group signalling shared by everything that runs children in their own group (shell commands,
//! the IPython kernel, hosted MCP servers, live processes), so one signal reaches a command and everything
//! it started.

/// Sends `signal` to every process in group `pgid`; false when the group has no member left (ESRCH).
pub fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    unsafe { libc::killpg(pgid, signal) == 0 }
}

/// Sends `signal` to every process of session `sid` and returns how many it reached. A terminal's
/// session is wider than its leader's group: an interactive shell puts each job (`cmd &`) in a group of
/// its own. Scans `/proc`, so call it off the async runtime.
pub fn signal_session(sid: i32, signal: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        // SAFETY: getsid and kill only read or signal another process; no memory of ours is touched.
        .filter(|&pid| pid > 0 && unsafe { libc::getsid(pid) } == sid)
        .filter(|&pid| unsafe { libc::kill(pid, signal) } == 0)
        .count()
}
