//! The tools that walk directories: `list_directory`, `directory_tree`, `search_files`. Entries are typed
//! by the link itself (a symlink to a directory is a file and is never descended into), in byte order of
//! their names, as Node's `readdir` gives them to the reference server. Directories are read and entered
//! by descriptor (`core::confine::Dir`), so a directory swapped for a link mid-walk is never followed;
//! paths are only what the answers and messages name.

use std::path::{Path, PathBuf};

use crate::core::confine::{Anchor, Dir, Kind};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;

use super::node_error::{Syscall, describe};

/// Bounds a walk over a huge tree: past it, the tool answers with an error (tree) or stops (search).
pub const MAX_WALK_ENTRIES: usize = 100_000;
pub const MAX_SEARCH_MATCHES: usize = 10_000;

pub struct DirEntry {
    pub name: String,
    /// The name as it is on disk (`name` is it made UTF-8): what the directory is entered by.
    raw: std::ffi::OsString,
    pub is_dir: bool,
}

/// The held entry as a directory to walk; `path` is what a failure names (as `scandir` would).
pub fn open_dir(path: &Path, held: &Anchor) -> Result<Dir, String> {
    held.open_dir()
        .map_err(|err| describe(&err, Syscall::Scandir(path)))
}

/// `dir`'s entries in byte order of their names; `path` is what a failure names.
pub fn read_dir_sorted(path: &Path, dir: &Dir) -> Result<Vec<DirEntry>, String> {
    let listing = dir
        .entries()
        .map_err(|err| describe(&err, Syscall::Scandir(path)))?;
    let mut entries = Vec::new();
    for entry in listing {
        if crate::core::staging::is_staging_name(&entry.name) {
            continue;
        }
        entries.push((entry.name, entry.kind == Kind::Dir));
    }
    entries.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    Ok(entries
        .into_iter()
        .map(|(raw, is_dir)| DirEntry {
            name: raw.to_string_lossy().into_owned(),
            raw,
            is_dir,
        })
        .collect())
}

pub fn list_directory(path: &Path, dir: &Dir) -> Result<String, String> {
    let lines: Vec<String> = read_dir_sorted(path, dir)?
        .into_iter()
        .map(|entry| {
            let kind = if entry.is_dir { "[DIR]" } else { "[FILE]" };
            format!("{kind} {}", entry.name)
        })
        .collect();
    Ok(lines.join("\n"))
}

#[derive(Serialize)]
pub struct TreeEntry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<TreeEntry>>,
}

/// The tree as 2-space-indented JSON, the reference's layout.
pub fn directory_tree(path: &Path, root: &Dir) -> Result<String, String> {
    let mut budget = MAX_WALK_ENTRIES;
    let tree = build_tree(path, root, &mut budget)?;
    serde_json::to_string_pretty(&tree).map_err(|err| err.to_string())
}

fn build_tree(path: &Path, dir: &Dir, budget: &mut usize) -> Result<Vec<TreeEntry>, String> {
    let entries = read_dir_sorted(path, dir)?;
    let mut tree = Vec::with_capacity(entries.len());
    for entry in entries {
        *budget = budget.checked_sub(1).ok_or_else(|| {
            format!(
                "the tree under {} has more than {MAX_WALK_ENTRIES} entries; list a smaller directory",
                path.display()
            )
        })?;
        let children = if entry.is_dir {
            let child_path = path.join(&entry.name);
            let child = dir
                .open_child(&entry.raw)
                .map_err(|err| describe(&err, Syscall::Scandir(&child_path)))?;
            Some(build_tree(&child_path, &child, budget)?)
        } else {
            None
        };
        tree.push(TreeEntry {
            name: entry.name,
            kind: if entry.is_dir { "directory" } else { "file" },
            children,
        });
    }
    Ok(tree)
}

/// Case-insensitive substring match on names, skipping what an exclude glob matches (a pattern without
/// `*` excludes any directory of that name, as the reference reads it). Full paths, one per line.
pub fn search_files(
    root: &Path,
    dir: &Dir,
    pattern: &str,
    exclude_patterns: &[String],
) -> Result<String, String> {
    search_within(root, dir, pattern, exclude_patterns, MAX_WALK_ENTRIES)
}

fn search_within(
    root: &Path,
    dir: &Dir,
    pattern: &str,
    exclude_patterns: &[String],
    max_entries: usize,
) -> Result<String, String> {
    let excludes = exclude_set(exclude_patterns)?;
    let mut search = Search {
        root,
        needle: pattern.to_lowercase(),
        excludes,
        matches: Vec::new(),
        visited: 0,
        max_entries,
        truncated: false,
    };
    // The start directory must be readable (its failure is the answer); deeper ones are skipped.
    search.visit(root, dir, read_dir_sorted(root, dir)?);
    if search.matches.is_empty() {
        // A plain "No matches found" after a cut-short walk would claim the rest of the tree was seen.
        if search.truncated {
            return Ok(format!(
                "No matches found in the first {max_entries} entries (search stopped there; narrow the path)"
            ));
        }
        return Ok("No matches found".to_owned());
    }
    let mut lines: Vec<String> = search
        .matches
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    if search.truncated {
        lines.push(format!(
            "(search stopped after {} matches or {max_entries} entries; narrow the pattern or path)",
            search.matches.len()
        ));
    }
    Ok(lines.join("\n"))
}

fn exclude_set(patterns: &[String]) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = if pattern.contains('*') {
            pattern.clone()
        } else {
            format!("**/{pattern}/**")
        };
        let glob = GlobBuilder::new(&glob)
            .literal_separator(true)
            .build()
            .map_err(|err| format!("invalid exclude pattern {pattern:?}: {err}"))?;
        set.add(glob);
    }
    set.build().map_err(|err| err.to_string())
}

struct Search<'a> {
    root: &'a Path,
    needle: String,
    excludes: GlobSet,
    matches: Vec<PathBuf>,
    visited: usize,
    max_entries: usize,
    truncated: bool,
}

impl Search<'_> {
    fn visit(&mut self, path: &Path, dir: &Dir, entries: Vec<DirEntry>) {
        for entry in entries {
            if self.truncated {
                return;
            }
            self.visited += 1;
            if self.visited > self.max_entries || self.matches.len() >= MAX_SEARCH_MATCHES {
                self.truncated = true;
                return;
            }
            let child_path = path.join(&entry.name);
            let relative = child_path.strip_prefix(self.root).unwrap_or(&child_path);
            if self.excludes.is_match(relative) {
                continue;
            }
            if entry.name.to_lowercase().contains(&self.needle) {
                self.matches.push(child_path.clone());
            }
            // Unreadable directories below the start are skipped, as the reference skips them.
            if entry.is_dir
                && let Ok(child) = dir.open_child(&entry.raw)
                && let Ok(entries) = read_dir_sorted(&child_path, &child)
            {
                self.visit(&child_path, &child, entries);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_cut_short_does_not_claim_there_is_no_match() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a1", "a2", "a3", "b-target"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let held = Dir::open(dir.path()).unwrap();
        let answer = search_within(dir.path(), &held, "target", &[], 2).unwrap();
        assert!(
            answer.starts_with("No matches found in the first 2 entries"),
            "{answer}"
        );
        let whole = search_within(dir.path(), &held, "target", &[], 10).unwrap();
        assert!(whole.ends_with("b-target"), "{whole}");
        assert_eq!(
            search_within(dir.path(), &held, "nothing", &[], 10).unwrap(),
            "No matches found"
        );
    }

    #[test]
    fn excludes_read_bare_names_as_directories_and_globs_per_segment() {
        let set = exclude_set(&["node_modules".into(), "*.log".into()]).unwrap();
        assert!(set.is_match("node_modules/x"));
        assert!(set.is_match("a/node_modules/x"));
        assert!(!set.is_match("node_modules"));
        assert!(set.is_match("a.log"));
        assert!(!set.is_match("sub/a.log"));
    }
}
