//! Children a previous boxd left behind (it was killed, or died of OOM: no destructor ran) are found and
//! stopped when the next one starts. Every child inherits a marker naming its boxd instance (the
//! workspace and port), because it is set in boxd's own environment before any child exists; the next
//! boxd of the same instance kills the process groups of whatever still carries it.

use std::path::Path;

use super::group::signal_group;

/// The environment variable every child of boxd carries.
pub const MARKER: &str = "BOXD_INSTANCE";

/// Stable across restarts of the same instance, distinct between instances on one machine.
pub fn instance_key(workspace: &Path, port: u16) -> String {
    // FNV-1a: tiny, stable across builds (unlike std's hasher), and collisions are harmless here.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let identity = format!("{}:{port}", workspace.display());
    for byte in identity.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Makes every future child carry `key`. Call it from `main` before any thread exists.
pub fn mark_children(key: &str) {
    // SAFETY: single-threaded at this point (see `withhold_from_children`).
    unsafe { std::env::set_var(MARKER, key) };
}

/// Kills the process groups of every process (but this one) carrying `key`; returns how many
/// processes were found. Scans `/proc`: call it off the async runtime.
pub fn stop_leftovers(key: &str) -> usize {
    stop_leftovers_started_before(key, None)
}

/// As [`stop_leftovers`], sparing processes that started at or after `bound` (clock ticks since boot,
/// as `/proc/PID/stat` counts them): the reaper of a killed boxd must not touch the children of a boxd
/// of the same instance that started since.
pub fn stop_leftovers_started_before(key: &str, bound: Option<u64>) -> usize {
    let needle = format!("{MARKER}={key}");
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut found = 0;
    for pid in entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
    {
        if !carries(pid, needle.as_bytes()) {
            continue;
        }
        if let Some(bound) = bound
            && start_ticks(pid).is_none_or(|start| start >= bound)
        {
            continue;
        }
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        found += 1;
        // SAFETY: getpgid and getpgrp only read process group ids.
        let (group, ours) = unsafe { (libc::getpgid(pid), libc::getpgrp()) };
        if group > 1 && group != ours {
            signal_group(group, libc::SIGKILL);
        }
        // SAFETY: kill only sends a signal; it touches no memory of ours.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    found
}

/// Whether the environment `pid` started with holds `entry` (`NAME=value`). A zombie's reads empty.
fn carries(pid: u32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|&byte| byte == 0)
            .any(|variable| variable == entry)
    })
}

/// Whether the environment `pid` started with names any boxd instance (`BOXD_INSTANCE=...`).
pub fn carries_any_marker(pid: u32) -> bool {
    let prefix = format!("{MARKER}=");
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|&byte| byte == 0)
            .any(|variable| variable.starts_with(prefix.as_bytes()))
    })
}

/// When `pid` started, in clock ticks since boot (field 22 of `/proc/PID/stat`).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_workspace_and_port_and_are_stable() {
        let a = instance_key(Path::new("/workspace"), 8000);
        assert_eq!(a, instance_key(Path::new("/workspace"), 8000));
        assert_ne!(a, instance_key(Path::new("/workspace"), 8001));
        assert_ne!(a, instance_key(Path::new("/other"), 8000));
    }
}
