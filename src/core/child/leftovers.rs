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
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ
            .split(|&byte| byte == 0)
            .any(|entry| entry == needle.as_bytes())
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
