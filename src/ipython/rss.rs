//! The resident memory of the kernel and of every process below it (what its cells started), read
//! from `/proc`: what `--kernel-max-rss` caps.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Processes counted in one tree, at most: a cell that forks without bound cannot make a reading
/// unbounded (past it, the count is low, never high).
const MAX_PROCESSES: usize = 4096;
/// `/proc` entries read, at most, where the children must be found from every process's parent.
const MAX_SCANNED: usize = 1 << 16;

/// Resident bytes of `root` and its descendants; None when `root` is gone (a zombie has no RSS).
pub fn tree_rss(root: u32) -> Option<u64> {
    let mut total = resident_bytes(root)?;
    let by_parent = (!children_files()).then(children_by_parent);
    let children_of = |pid: u32| match &by_parent {
        Some(map) => map.get(&pid).cloned().unwrap_or_default(),
        None => listed_children(pid),
    };
    let mut below = children_of(root);
    let mut counted = 1usize;
    while let Some(pid) = below.pop() {
        if counted >= MAX_PROCESSES {
            break;
        }
        counted += 1;
        // A process that ended since it was listed holds nothing any more.
        total = total.saturating_add(resident_bytes(pid).unwrap_or(0));
        below.extend(children_of(pid));
    }
    Some(total)
}

/// `VmRSS` of `/proc/PID/status`, in bytes (the file gives kB).
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?;
    let kib: u64 = value.trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// Whether this kernel lists each thread's children (`CONFIG_PROC_CHILDREN`, on in common kernels).
fn children_files() -> bool {
    static LISTED: OnceLock<bool> = OnceLock::new();
    *LISTED.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// The children of every thread of `pid`, as `/proc/PID/task/TID/children` lists them.
fn listed_children(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    threads
        .flatten()
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every process's children, from the parent each one's `/proc/PID/stat` names.
fn children_by_parent() -> HashMap<u32, Vec<u32>> {
    let mut by_parent: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return by_parent;
    };
    for entry in entries.flatten().take(MAX_SCANNED) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: the fields follow its last `)`.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, fields)| fields.split_whitespace().nth(1))
            .and_then(|parent| parent.parse::<u32>().ok());
        if let Some(parent) = parent {
            by_parent.entry(parent).or_default().push(pid);
        }
    }
    by_parent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_counts_its_children_and_both_ways_of_finding_them_agree() {
        let mut shell = match std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
        {
            Ok(shell) => shell,
            Err(err) => panic!("sh: {err}"),
        };
        let root = shell.id();
        let mut listed = Vec::new();
        for _ in 0..500 {
            listed = listed_children(root);
            if !listed.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let alone = resident_bytes(root).unwrap_or(0);
        let tree = tree_rss(root).unwrap_or(0);
        let scanned = children_by_parent().remove(&root).unwrap_or_default();
        for pid in listed.iter().chain([&root]) {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = shell.wait();
        assert_eq!(listed.len(), 1, "the shell's one child: {listed:?}");
        assert_eq!(scanned, listed);
        assert!(alone > 0);
        assert!(
            tree > alone,
            "the tree ({tree}) counts the child beyond {alone}"
        );
        assert_eq!(tree_rss(u32::MAX), None);
    }
}
