//! `glob {pattern, path?}`: the reference answers with Python 3.11's `Path.glob` (the selectors of
//! `pathlib`, whose order and rules this follows: `**` enters directories but not links to them, a
//! wildcard component follows links, `*` matches hidden names), then keeps the matches whose real
//! path is under the search root and lists the newest 200.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::paths::resolve;
use super::{Answer, Block, WALK_DEADLINE};
use crate::core::confine::{Workspace, resolve_symlinks};

/// Matches shown (the reference's `GLOB_RESULT_LIMIT`).
pub const GLOB_RESULT_LIMIT: usize = 200;
/// Matches gathered before sorting (`WALK_MAX_ENTRIES`).
pub const WALK_MAX_ENTRIES: usize = 50_000;

/// Blocking.
pub fn glob(workspace: &Workspace, pattern: &str, path: Option<&str>) -> Answer {
    if pattern.starts_with('/') {
        return Err(
            "glob: absolute pattern not permitted; pass a relative pattern (and optionally path)"
                .to_owned(),
        );
    }
    if pattern.split('/').any(|part| part == "..") {
        return Err("glob: '..' is not permitted in the pattern".to_owned());
    }
    let root = match path.filter(|path| !path.is_empty()) {
        Some(path) => {
            resolve(workspace, path)
                .map_err(|err| format!("glob: {err}"))?
                .path
                .real
        }
        None => workspace.real_root().to_path_buf(),
    };
    if pattern.is_empty() {
        return Err("glob: Unacceptable pattern: ''".to_owned());
    }
    let mut parts: Vec<&str> = pattern
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if pattern.ends_with('/') {
        parts.push("");
    }
    if parts.is_empty() {
        // `pathlib` indexes the first part of an empty pattern: the reference reports the exception.
        return Err("IndexError('tuple index out of range')".to_owned());
    }
    if parts
        .iter()
        .any(|part| *part != "**" && part.contains("**"))
    {
        return Err("glob: Invalid pattern: '**' can only be an entire path component".to_owned());
    }
    let mut walk = Walk {
        found: Vec::new(),
        deadline: Instant::now() + WALK_DEADLINE,
    };
    if root.is_dir() {
        walk.select(&parts, &root);
    }
    let mut matches: Vec<(f64, PathBuf)> = walk
        .found
        .into_iter()
        // As the reference's `_canonicalize`: every link followed, a dangling one too.
        .filter(|found| {
            resolve_symlinks(Path::new("/"), found).is_ok_and(|real| real.starts_with(&root))
        })
        .map(|found| (mtime(&found), found))
        .collect();
    if matches.is_empty() {
        return Ok(Block::text("no matches".to_owned()));
    }
    // Stable, as Python's `sort(reverse=True)`: equal times keep the walk's order.
    matches.sort_by(|a, b| b.0.total_cmp(&a.0));
    let listed: Vec<String> = matches
        .iter()
        .take(GLOB_RESULT_LIMIT)
        .map(|(_, found)| found.display().to_string())
        .collect();
    Ok(Block::text(listed.join("\n")))
}

/// Python's `st_mtime` (seconds as a double), 0 when it cannot be read.
fn mtime(path: &Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0.0, |meta| {
        meta.mtime() as f64 + meta.mtime_nsec() as f64 * 1e-9
    })
}

struct Walk {
    found: Vec<PathBuf>,
    deadline: Instant,
}

impl Walk {
    fn full(&self) -> bool {
        self.found.len() >= WALK_MAX_ENTRIES || Instant::now() >= self.deadline
    }

    /// The selector of `parts[0]` applied under `parent` (an existing directory or a match so far).
    fn select(&mut self, parts: &[&str], parent: &Path) {
        let Some((part, rest)) = parts.split_first() else {
            if !self.full() {
                self.found.push(parent.to_path_buf());
            }
            return;
        };
        if self.full() {
            return;
        }
        if part.is_empty() {
            // A trailing `/`: the directory itself.
            self.found.push(parent.to_path_buf());
        } else if *part == "**" {
            let mut starts = Vec::new();
            self.directories(parent, &mut starts);
            let before = self.found.len();
            for start in starts {
                self.select(rest, &start);
                if self.full() {
                    break;
                }
            }
            // `pathlib` yields each match of a `**` once.
            let mut seen = HashSet::new();
            let mut kept = self.found.split_off(before);
            kept.retain(|found| seen.insert(found.clone()));
            self.found.extend(kept);
        } else if is_wildcard(part) {
            let Ok(entries) = std::fs::read_dir(parent) else {
                return;
            };
            let pattern: Vec<char> = part.chars().collect();
            for entry in entries.flatten() {
                if self.full() {
                    return;
                }
                // Intermediate parts match directories only, links to them included.
                if !rest.is_empty() && !entry.path().is_dir() {
                    continue;
                }
                let name = entry.file_name();
                let name: Vec<char> = name.to_string_lossy().chars().collect();
                if fnmatch(&pattern, &name) {
                    self.select(rest, &parent.join(entry.file_name()));
                }
            }
        } else {
            let path = parent.join(part);
            let fits = if rest.is_empty() {
                path.exists()
            } else {
                path.is_dir()
            };
            if fits {
                self.select(rest, &path);
            }
        }
    }

    /// `parent` and every directory under it, depth first in listing order, never through a link.
    fn directories(&self, parent: &Path, out: &mut Vec<PathBuf>) {
        let mut stack = vec![parent.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if out.len() >= WALK_MAX_ENTRIES || Instant::now() >= self.deadline {
                return;
            }
            let children: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                        .map(|entry| entry.path())
                        .collect()
                })
                .unwrap_or_default();
            out.push(dir);
            stack.extend(children.into_iter().rev());
        }
    }
}

/// Whether `pathlib` reads a part as a pattern rather than a name.
fn is_wildcard(part: &str) -> bool {
    part.contains(['*', '?', '['])
}

/// Python's `fnmatch` of one name (case-sensitive, `*` matching any characters, dots included).
fn fnmatch(pattern: &[char], name: &[char]) -> bool {
    // Iterative with one backtrack point per `*`: linear in practice, bounded by |pattern|·|name|.
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p = p.saturating_add(1);
                continue;
            }
            Some('?') => Some(p.saturating_add(1)),
            Some('[') => match class(pattern, p) {
                Some((matches, next)) => matches(name[n]).then_some(next),
                None => (name[n] == '[').then_some(p.saturating_add(1)),
            },
            Some(&literal) => (name[n] == literal).then_some(p.saturating_add(1)),
            None => None,
        };
        match step {
            Some(next) => {
                p = next;
                n = n.saturating_add(1);
            }
            None => match star {
                Some((star_p, star_n)) => {
                    p = star_p.saturating_add(1);
                    n = star_n.saturating_add(1);
                    star = Some((star_p, n));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&ch| ch == '*'))
}

/// The bracket expression at `pattern[open]` as `fnmatch.translate` reads it: its test and where the
/// pattern goes on; `None` when it is not closed (then `[` is itself).
#[allow(clippy::type_complexity)]
fn class(pattern: &[char], open: usize) -> Option<(Box<dyn Fn(char) -> bool>, usize)> {
    let start = open.saturating_add(1);
    let mut end = start;
    if pattern.get(end) == Some(&'!') {
        end = end.saturating_add(1);
    }
    if pattern.get(end) == Some(&']') {
        end = end.saturating_add(1);
    }
    while pattern.get(end).is_some_and(|&ch| ch != ']') {
        end = end.saturating_add(1);
    }
    pattern.get(end)?;
    let body = pattern.get(start..end)?.to_vec();
    let next = end.saturating_add(1);
    if body.is_empty() {
        return Some((Box::new(|_| false), next));
    }
    if body == ['!'] {
        return Some((Box::new(|_| true), next));
    }
    let (negated, items) = match body.split_first() {
        Some(('!', rest)) => (true, rest.to_vec()),
        _ => (false, body),
    };
    let mut ranges: Vec<(char, char)> = Vec::new();
    let mut index = 0;
    while let Some(&low) = items.get(index) {
        match (
            items.get(index.saturating_add(1)),
            items.get(index.saturating_add(2)),
        ) {
            (Some('-'), Some(&high)) => {
                // A reversed range is empty, as `fnmatch` drops it.
                if low <= high {
                    ranges.push((low, high));
                }
                index = index.saturating_add(3);
            }
            _ => {
                ranges.push((low, low));
                index = index.saturating_add(1);
            }
        }
    }
    Some((
        Box::new(move |ch| ranges.iter().any(|&(low, high)| low <= ch && ch <= high) != negated),
        next,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        let pattern: Vec<char> = pattern.chars().collect();
        let name: Vec<char> = name.chars().collect();
        fnmatch(&pattern, &name)
    }

    #[test]
    fn names_match_as_python_s_fnmatch_matches_them() {
        assert!(matches("*.py", "a.py"));
        assert!(matches("*.py", ".hidden.py"));
        assert!(!matches("*.py", "a.pyc"));
        assert!(matches("a?c", "abc"));
        assert!(matches("[a-c]x", "bx"));
        assert!(!matches("[!a-c]x", "bx"));
        assert!(matches("[!a-c]x", "dx"));
        assert!(matches("[x", "[x"));
        assert!(matches("*a*b*", "xxaxxbxx"));
        assert!(!matches("*a*b", "xxaxxbxx"));
        assert!(matches("[]]", "]"));
        assert!(!matches("A.txt", "a.txt"));
    }
}
