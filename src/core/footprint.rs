//! What each part of a sandbox holds in memory (`GET /memory`): boxd, its guard, the `boxd init` that
//! started it, and the processes each family names as its own (the kernel, Chromium, the desktop's
//! programs, hosted servers, live processes, training workers), read from `/proc`.
//!
//! PSS (proportional set size) is the figure to add up: a page shared by N processes counts 1/N in
//! each, so the sum over processes is what they hold together (the binary boxd, its guard and init
//! share; Chromium's processes share most of their code). RSS counts every shared page in full in each
//! process; it is given per process group too, but its sums overstate.
//!
//! A family names its processes the way it can (see [`Held`]); a process is counted once, for the first
//! claim that names it, most precise kind first ([`Held`]'s order), then in family order. What runs
//! below boxd and no family names (one-shot commands) is `unattributed`. Everything is bounded: the
//! `/proc` entries read, the processes measured and the time spent; a reading that hit a bound says
//! `partial`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use serde::Serialize;

/// `/proc` entries read in one reading, at most.
pub const MAX_SCANNED: usize = 1 << 16;
/// Processes measured in one reading, at most (each is one read of its `smaps_rollup`).
pub const MAX_MEASURED: usize = 4096;
/// Time one reading may take; processes not measured by then are left out, and the answer says so.
pub const MEASURE_BUDGET: Duration = Duration::from_secs(2);

/// How a family names processes it holds. The order is the precedence of claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// This process and everything below it.
    Tree(u32),
    /// Each child of boxd started as `program` with arguments starting with `args` (the whole
    /// arguments, in order), and everything below it: for a family whose children are not kept where
    /// it could name them by pid. `program` matches the child's first argument exactly or by file
    /// name (`python3` matches `/usr/bin/python3`).
    Children { program: String, args: Vec<String> },
    /// Every process running as one of these users, and everything below it.
    User(RangeInclusive<u32>),
    /// Every process whose name (`/proc/PID/comm`, at most 15 bytes) is this, wherever it runs, and
    /// everything below it: programs started beside boxd (the desktop's, by `boxd init`).
    Named(String),
}

impl Held {
    fn rank(&self) -> u8 {
        match self {
            Held::Tree(_) => 0,
            Held::Children { .. } => 1,
            Held::User(_) => 2,
            Held::Named(_) => 3,
        }
    }
}

/// What a group of processes holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Processes measured.
    pub processes: usize,
    /// Their proportional set sizes added up (see the module's note).
    pub pss_bytes: u64,
    /// Their resident set sizes added up (shared pages counted in each).
    pub rss_bytes: u64,
    /// Processes whose PSS could not be read (`smaps_rollup` is closed to boxd: a non-dumpable process
    /// without `CAP_SYS_PTRACE`): their RSS stands in, an upper bound.
    pub pss_estimated: usize,
}

impl Usage {
    fn add(&mut self, memory: Memory) {
        self.processes = self.processes.saturating_add(1);
        self.pss_bytes = self.pss_bytes.saturating_add(memory.pss);
        self.rss_bytes = self.rss_bytes.saturating_add(memory.rss);
        if memory.estimated {
            self.pss_estimated = self.pss_estimated.saturating_add(1);
        }
    }

    fn merge(&mut self, other: &Usage) {
        self.processes = self.processes.saturating_add(other.processes);
        self.pss_bytes = self.pss_bytes.saturating_add(other.pss_bytes);
        self.rss_bytes = self.rss_bytes.saturating_add(other.rss_bytes);
        self.pss_estimated = self.pss_estimated.saturating_add(other.pss_estimated);
    }
}

/// One process of boxd's own (boxd, its guard, init), with its pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OwnProcess {
    pub pid: u32,
    #[serde(flatten)]
    pub usage: Usage,
}

/// A reading (the body of `GET /memory`).
#[derive(Debug, Clone, Serialize)]
pub struct Footprint {
    pub boxd: OwnProcess,
    /// The guard that stops what a killed boxd's children leave (none under `boxd init`).
    pub guard: Option<OwnProcess>,
    /// `boxd init`, when it is boxd's parent (the images).
    pub init: Option<OwnProcess>,
    /// Every enabled family, by name, with what it names (zero processes when none runs).
    pub families: BTreeMap<String, Usage>,
    /// Processes below boxd that no family names (one-shot commands, their leftovers).
    pub unattributed: Usage,
    /// Everything above added up.
    pub total: Usage,
    /// A bound (entries read, processes measured, time) cut the reading short: figures are low.
    pub partial: bool,
}

/// One process as the scan saw it.
struct Entry {
    parent: u32,
    name: String,
}

struct Scan {
    entries: HashMap<u32, Entry>,
    children: HashMap<u32, Vec<u32>>,
    truncated: bool,
}

fn scan() -> Scan {
    let mut scan = Scan {
        entries: HashMap::new(),
        children: HashMap::new(),
        truncated: false,
    };
    let Ok(listing) = std::fs::read_dir("/proc") else {
        return scan;
    };
    for (index, item) in listing.flatten().enumerate() {
        if index >= MAX_SCANNED {
            scan.truncated = true;
            break;
        }
        let Some(pid) = item
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        // A process that ended since it was listed is simply not there.
        let Some(entry) = read_stat(pid) else {
            continue;
        };
        scan.children.entry(entry.parent).or_default().push(pid);
        scan.entries.insert(pid, entry);
    }
    scan
}

/// `/proc/PID/stat`: `pid (name) state parent ...`; the name may hold spaces and parentheses.
fn read_stat(pid: u32) -> Option<Entry> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let (_, name) = head.split_once('(')?;
    let parent = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some(Entry {
        parent,
        name: name.to_owned(),
    })
}

/// The arguments of `pid` (`/proc/PID/cmdline`); empty for a kernel thread or a process gone.
fn arguments(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|byte| *byte == 0)
                .filter(|argument| !argument.is_empty())
                .map(|argument| String::from_utf8_lossy(argument).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn same_program(started: &str, program: &str) -> bool {
    let file_name = |path: &str| path.rsplit('/').next().unwrap_or(path).to_owned();
    started == program || file_name(started) == file_name(program)
}

/// The real user `pid` runs as (the owner of its `/proc` directory: root's for a non-dumpable process).
fn user_of(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|meta| meta.uid())
}

#[derive(Debug, Clone, Copy, Default)]
struct Memory {
    pss: u64,
    rss: u64,
    estimated: bool,
}

/// `Pss` and `Rss` of `/proc/PID/smaps_rollup`; where it is closed, the resident pages of
/// `/proc/PID/statm` (readable by all) for both; `None` once the process is gone (or a kernel thread).
fn measure_process(pid: u32, page: u64) -> Option<Memory> {
    if let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
        let field = |name: &str| {
            rollup
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map(|kib| kib.saturating_mul(1024))
        };
        if let (Some(rss), Some(pss)) = (field("Rss:"), field("Pss:")) {
            return Some(Memory {
                pss,
                rss,
                estimated: false,
            });
        }
    }
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // A kernel thread: no memory of its own, not a process to count.
    if pages == 0 && arguments(pid).is_empty() {
        return None;
    }
    let rss = pages.saturating_mul(page);
    Some(Memory {
        pss: rss,
        rss,
        estimated: true,
    })
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|page| *page > 0)
        .unwrap_or(4096)
}

/// Reads what boxd (this process), `guard`, boxd's parent when it is `boxd init`, and each of `owners`
/// (a family's name with what it names) hold. Blocking: call it off the async runtime.
pub fn measure(owners: &[(&'static str, Vec<Held>)], guard: Option<u32>) -> Footprint {
    let started = Instant::now();
    let scan = scan();
    let boxd = std::process::id();
    let page = page_size();
    let mut partial = scan.truncated;

    let parent = scan.entries.get(&boxd).map(|entry| entry.parent);
    let init = parent.filter(|parent| {
        *parent > 0
            && scan
                .entries
                .get(parent)
                .is_some_and(|entry| entry.name == "boxd")
    });
    let guard = guard.filter(|pid| scan.entries.contains_key(pid));
    // Counted as themselves, never as a family's.
    let mut claimed: HashSet<u32> = [Some(boxd), guard, init].into_iter().flatten().collect();
    let mut taken: Vec<Vec<u32>> = vec![Vec::new(); owners.len()];
    let mut budget = MAX_MEASURED.saturating_sub(claimed.len());

    // Every claim with its family, most precise kind first, then in family order.
    let mut claims: Vec<(usize, &Held)> = owners
        .iter()
        .enumerate()
        .flat_map(|(index, (_, held))| held.iter().map(move |held| (index, held)))
        .collect();
    claims.sort_by_key(|(index, held)| (held.rank(), *index));

    let boxd_children = scan.children.get(&boxd).cloned().unwrap_or_default();
    let mut child_arguments: HashMap<u32, Vec<String>> = HashMap::new();
    for (index, held) in claims {
        let roots: Vec<u32> = match held {
            Held::Tree(pid) => vec![*pid],
            Held::Children { program, args } => boxd_children
                .iter()
                .copied()
                .filter(|pid| {
                    let started = child_arguments
                        .entry(*pid)
                        .or_insert_with(|| arguments(*pid));
                    started.split_first().is_some_and(|(first, rest)| {
                        same_program(first, program) && rest.starts_with(args)
                    })
                })
                .collect(),
            Held::User(users) => scan
                .entries
                .keys()
                .copied()
                .filter(|pid| !claimed.contains(pid))
                .filter(|pid| user_of(*pid).is_some_and(|uid| users.contains(&uid)))
                .collect(),
            Held::Named(name) => scan
                .entries
                .iter()
                .filter(|(_, entry)| entry.name == *name)
                .map(|(pid, _)| *pid)
                .collect(),
        };
        let mut pending = roots;
        while let Some(pid) = pending.pop() {
            if !scan.entries.contains_key(&pid) || !claimed.insert(pid) {
                continue;
            }
            if budget == 0 {
                partial = true;
                break;
            }
            budget -= 1;
            taken[index].push(pid);
            pending.extend(scan.children.get(&pid).into_iter().flatten().copied());
        }
    }

    // Below boxd, named by nobody.
    let mut unattributed = Vec::new();
    let mut pending = boxd_children;
    let mut seen = HashSet::new();
    while let Some(pid) = pending.pop() {
        if !seen.insert(pid) {
            continue;
        }
        pending.extend(scan.children.get(&pid).into_iter().flatten().copied());
        if claimed.contains(&pid) {
            continue;
        }
        if budget == 0 {
            partial = true;
            break;
        }
        budget -= 1;
        unattributed.push(pid);
    }

    let mut read = |pids: &[u32]| {
        let mut usage = Usage::default();
        for pid in pids {
            if started.elapsed() >= MEASURE_BUDGET {
                partial = true;
                break;
            }
            if let Some(memory) = measure_process(*pid, page) {
                usage.add(memory);
            }
        }
        usage
    };
    let mut own = |pid: Option<u32>| {
        pid.map(|pid| OwnProcess {
            pid,
            usage: read(&[pid]),
        })
    };
    let (boxd, guard, init) = (own(Some(boxd)), own(guard), own(init));
    let boxd = boxd.unwrap_or(OwnProcess {
        pid: std::process::id(),
        usage: Usage::default(),
    });
    let families: BTreeMap<String, Usage> = owners
        .iter()
        .zip(&taken)
        .map(|((name, _), pids)| ((*name).to_owned(), read(pids)))
        .collect();
    let unattributed = read(&unattributed);

    let mut total = Usage::default();
    for process in [Some(&boxd), guard.as_ref(), init.as_ref()]
        .into_iter()
        .flatten()
    {
        total.merge(&process.usage);
    }
    for usage in families.values().chain([&unattributed]) {
        total.merge(usage);
    }
    Footprint {
        boxd,
        guard,
        init,
        families,
        unattributed,
        total,
        partial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    struct Killed(std::process::Child);

    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper(seconds: &str) -> Killed {
        Killed(
            std::process::Command::new("sleep")
                .arg(seconds)
                .process_group(0)
                .spawn()
                .expect("sleep starts"),
        )
    }

    /// Each child is counted once, for the most precise claim: the tree named by pid, the other by its
    /// command line; what nobody names is unattributed; the total adds everything up.
    #[test]
    fn each_process_is_counted_once_for_the_most_precise_claim() {
        let first = sleeper("30.5");
        let second = sleeper("31.5");
        let third = sleeper("32.5");
        let owners = vec![
            (
                "by_line",
                vec![Held::Children {
                    program: "/bin/sleep".into(),
                    args: vec!["31.5".into()],
                }],
            ),
            ("by_pid", vec![Held::Tree(first.0.id())]),
            (
                "late",
                vec![Held::Children {
                    program: "sleep".into(),
                    args: vec!["30.5".into()],
                }],
            ),
            ("nothing", Vec::new()),
        ];
        let footprint = measure(&owners, None);
        let families = &footprint.families;
        assert_eq!(families["by_pid"].processes, 1, "{footprint:?}");
        assert_eq!(families["by_line"].processes, 1, "{footprint:?}");
        assert_eq!(families["late"].processes, 0, "{footprint:?}");
        assert_eq!(families["nothing"], Usage::default());
        assert!(families["by_pid"].rss_bytes > 0, "{footprint:?}");
        assert!(families["by_pid"].pss_bytes > 0, "{footprint:?}");
        // The third sleeper, and whatever else this test binary runs meanwhile.
        assert!(footprint.unattributed.processes >= 1, "{footprint:?}");
        let boxd = footprint.boxd;
        assert_eq!(boxd.pid, std::process::id());
        assert!(
            boxd.usage.pss_bytes > 0 && boxd.usage.pss_estimated == 0,
            "{boxd:?}"
        );
        let listed: usize = families
            .values()
            .map(|usage| usage.processes)
            .sum::<usize>()
            + footprint.unattributed.processes
            + 1;
        assert_eq!(footprint.total.processes, listed, "{footprint:?}");
        assert!(footprint.total.pss_bytes >= boxd.usage.pss_bytes);
        assert!(!footprint.partial);
        drop((first, second, third));
    }

    #[test]
    fn a_program_matches_by_path_or_file_name() {
        assert!(same_program("/usr/bin/python3", "python3"));
        assert!(same_program("python3", "/usr/local/bin/python3"));
        assert!(!same_program("/usr/bin/python3", "python"));
    }
}
