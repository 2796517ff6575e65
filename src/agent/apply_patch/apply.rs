//! Applying parsed hunks to the workspace, as Codex's `apply_hunks_to_files` does: in order, each file
//! written whole; a failing operation stops the patch and (by default) what came before it stays.
//! With `atomic`, every operation is computed first against a view of the workspace that includes the
//! earlier ones, the new contents are staged beside their targets, and only then renamed into place.
//! Paths are confined to the workspace by `core::confine` (no absolute paths, no `..` or symlink out).

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::PathBuf;

use crate::core::confine::{Anchor, Workspace};
use crate::core::entry::OpenError;
use crate::core::staging::{StagedFile, stage_bytes};

use super::parse::{Chunk, Hunk};

/// A file larger than this is not read for an update: the patch is refused.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Line comparisons one patch may spend placing its chunks (the fuzzy passes compare every offset).
pub const MATCH_BUDGET: u64 = 200_000_000;

/// What a successful patch did, in Codex's summary order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Affected {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
}

impl Affected {
    /// Codex's summary: `Success. Updated the following files:` and one `A`/`M`/`D` line per file.
    pub fn summary(&self) -> String {
        let mut text = String::from("Success. Updated the following files:\n");
        for (mark, paths) in [
            ("A", &self.added),
            ("M", &self.modified),
            ("D", &self.deleted),
        ] {
            for path in paths {
                text.push_str(&format!("{mark} {path}\n"));
            }
        }
        text
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }
}

/// Why a patch stopped, and what it had done by then (nothing with `atomic`).
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub done: Affected,
}

impl Failure {
    /// The `isError` text: the failure, and what stays changed.
    pub fn report(&self) -> String {
        if self.done.is_empty() {
            return self.message.clone();
        }
        let done = self.done.summary();
        let done = done
            .strip_prefix("Success. Updated the following files:\n")
            .unwrap_or(&done);
        format!(
            "{}\nThese changes made before the failure stay:\n{done}",
            self.message
        )
    }
}

/// One change to one path, computed before it is made.
enum Change {
    Write { path: String, content: String },
    Remove { path: String },
}

/// Blocking. Applies `hunks` in order, each path relative to the workspace.
pub fn apply(workspace: &Workspace, hunks: &[Hunk], atomic: bool) -> Result<Affected, Failure> {
    let fail = |message: String, done: Affected| Failure { message, done };
    if hunks.is_empty() {
        return Err(fail(
            "No files were modified.".to_owned(),
            Affected::default(),
        ));
    }
    let mut view = View {
        workspace,
        pending: HashMap::new(),
        budget: MATCH_BUDGET,
    };
    let mut affected = Affected::default();
    let mut staged_changes = Vec::new();
    for hunk in hunks {
        let changes = match view.changes_of(hunk) {
            Ok(changes) => changes,
            Err(message) => {
                let done = if atomic {
                    Affected::default()
                } else {
                    affected
                };
                return Err(fail(message, done));
            }
        };
        if atomic {
            for change in &changes {
                view.note(change);
            }
            staged_changes.extend(changes);
        } else {
            for change in &changes {
                if let Err(message) = make(workspace, change) {
                    return Err(fail(message, affected));
                }
            }
        }
        match hunk {
            Hunk::Add { path, .. } => affected.added.push(path.clone()),
            Hunk::Delete { path } => affected.deleted.push(path.clone()),
            Hunk::Update { path, move_to, .. } => affected
                .modified
                .push(move_to.as_ref().unwrap_or(path).clone()),
        }
    }
    if atomic {
        commit(workspace, staged_changes).map_err(|message| fail(message, Affected::default()))?;
    }
    Ok(affected)
}

/// The workspace as the patch has changed it so far (only kept with `atomic`, where nothing is
/// written before the end).
struct View<'a> {
    workspace: &'a Workspace,
    /// By real path: the new content, or `None` for removed.
    pending: HashMap<PathBuf, Option<String>>,
    budget: u64,
}

impl View<'_> {
    fn note(&mut self, change: &Change) {
        let (path, content, follow) = match change {
            Change::Write { path, content } => (path, Some(content.clone()), true),
            Change::Remove { path } => (path, None, false),
        };
        if let Ok((located, _)) = locate(self.workspace, path, follow) {
            self.pending.insert(located, content);
        }
    }

    fn changes_of(&mut self, hunk: &Hunk) -> Result<Vec<Change>, String> {
        match hunk {
            Hunk::Add { path, contents } => {
                locate(self.workspace, path, true)?;
                Ok(vec![Change::Write {
                    path: path.clone(),
                    content: contents.clone(),
                }])
            }
            Hunk::Delete { path } => {
                self.check_removable(path)
                    .map_err(|err| format!("Failed to delete file {path}: {err}"))?;
                Ok(vec![Change::Remove { path: path.clone() }])
            }
            Hunk::Update {
                path,
                move_to,
                chunks,
            } => {
                let original = self
                    .read(path)
                    .map_err(|err| format!("Failed to read file to update {path}: {err}"))?;
                let content = new_contents(&original, path, chunks, &mut self.budget)?;
                Ok(match move_to {
                    Some(destination) => {
                        locate(self.workspace, destination, true)?;
                        vec![
                            Change::Write {
                                path: destination.clone(),
                                content,
                            },
                            Change::Remove { path: path.clone() },
                        ]
                    }
                    None => vec![Change::Write {
                        path: path.clone(),
                        content,
                    }],
                })
            }
        }
    }

    fn read(&self, path: &str) -> Result<String, String> {
        let (real, held) = locate(self.workspace, path, true)?;
        if let Some(pending) = self.pending.get(&real) {
            return pending
                .clone()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound).to_string());
        }
        let mut file = held.open_for_reading().map_err(|err| match err {
            OpenError::NotRegular(message) => message,
            OpenError::Io(err) => err.to_string(),
        })?;
        let size = file.metadata().map_err(|err| err.to_string())?.len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "it is {size} bytes; apply_patch updates files of at most {MAX_FILE_BYTES} bytes"
            ));
        }
        let mut bytes = Vec::new();
        file.by_ref()
            .take(MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|err| err.to_string())?;
        String::from_utf8(bytes).map_err(|_| "stream did not contain valid UTF-8".to_owned())
    }

    fn check_removable(&self, path: &str) -> Result<(), String> {
        let (real, held) = locate(self.workspace, path, false)?;
        match self.pending.get(&real) {
            Some(Some(_)) => Ok(()),
            Some(None) => Err(io::Error::from_raw_os_error(libc::ENOENT).to_string()),
            None => removable(&held).map_err(|err| err.to_string()),
        }
    }
}

/// Codex removes with `remove_file`: a directory is refused, whatever it holds.
fn removable(held: &Anchor) -> io::Result<()> {
    if held.is_root() || held.metadata()?.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(())
}

/// The path held inside the workspace: relative paths only, confined (a final symlink followed for
/// what reads or writes through it, the entry itself for a removal).
fn locate(workspace: &Workspace, path: &str, follow: bool) -> Result<(PathBuf, Anchor), String> {
    if path.is_empty() {
        return Err("a path is empty".to_owned());
    }
    if path.starts_with('/') {
        return Err(format!(
            "{path}: paths are relative to the workspace; absolute paths are refused"
        ));
    }
    let located = if follow {
        workspace.locate(path)
    } else {
        workspace.locate_entry(path)
    };
    located
        .map(|(checked, held)| (checked.real, held))
        .map_err(|err| format!("{path}: {err}"))
}

/// Makes one change now (the default, non-atomic mode), with Codex's messages.
fn make(workspace: &Workspace, change: &Change) -> Result<(), String> {
    match change {
        Change::Write { path, content } => {
            let staged = stage(workspace, path, content)?;
            staged.persist()
        }
        Change::Remove { path } => remove(workspace, path),
    }
}

fn remove(workspace: &Workspace, path: &str) -> Result<(), String> {
    let (_, held) = locate(workspace, path, false)?;
    removable(&held)
        .and_then(|()| held.remove_one())
        .map_err(|err| format!("Failed to delete file {path}: {err}"))
}

/// New contents written beside their target, not yet in place.
struct Staged {
    path: String,
    file: StagedFile,
    /// Holds the target's directory, which the staged file's names go through.
    held: Anchor,
}

impl Staged {
    fn persist(self) -> Result<(), String> {
        let failed = |err: io::Error| format!("Failed to write file {}: {err}", self.path);
        let target = self.held.entry_path().map_err(failed)?;
        self.file.persist(&target).map_err(failed)
    }
}

fn stage(workspace: &Workspace, path: &str, content: &str) -> Result<Staged, String> {
    let (_, mut held) = locate(workspace, path, true)?;
    held.create_parents()
        .map_err(|err| format!("Failed to create parent directories for {path}: {err}"))?;
    let failed = |err: io::Error| format!("Failed to write file {path}: {err}");
    if held.is_root() || held.metadata().is_ok_and(|meta| meta.is_dir()) {
        return Err(failed(io::Error::from_raw_os_error(libc::EISDIR)));
    }
    let dir = held.parent_path().map_err(failed)?;
    let file = stage_bytes(&dir, content.as_bytes()).map_err(failed)?;
    Ok(Staged {
        path: path.to_owned(),
        file,
        held,
    })
}

/// `atomic`: every new content staged first (a failure drops them all, unseen), then renamed into
/// place and the removals made, in the patch's order.
fn commit(workspace: &Workspace, changes: Vec<Change>) -> Result<(), String> {
    enum Ready {
        Write(Staged),
        Remove(String),
    }
    let mut ready = Vec::with_capacity(changes.len());
    for change in changes {
        ready.push(match change {
            Change::Write { path, content } => Ready::Write(stage(workspace, &path, &content)?),
            Change::Remove { path } => Ready::Remove(path),
        });
    }
    for step in ready {
        match step {
            Ready::Write(staged) => staged.persist()?,
            Ready::Remove(path) => remove(workspace, &path)?,
        }
    }
    Ok(())
}

/// The file's new text: Codex's `derive_new_contents_from_chunks` (lines split on `\n`, the chunks
/// placed in order, a final newline always).
fn new_contents(
    original: &str,
    path: &str,
    chunks: &[Chunk],
    budget: &mut u64,
) -> Result<String, String> {
    let mut lines: Vec<String> = original.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let replacements = replacements(&lines, path, chunks, budget)?;
    for (start, old_len, new_lines) in replacements.iter().rev() {
        let end = start.saturating_add(*old_len).min(lines.len());
        let start = (*start).min(end);
        lines.splice(start..end, new_lines.iter().cloned());
    }
    if !lines.last().is_some_and(String::is_empty) {
        lines.push(String::new());
    }
    Ok(lines.join("\n"))
}

type Replacement = (usize, usize, Vec<String>);

fn replacements(
    lines: &[String],
    path: &str,
    chunks: &[Chunk],
    budget: &mut u64,
) -> Result<Vec<Replacement>, String> {
    let mut found_all = Vec::new();
    let mut line_index = 0usize;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            match seek(
                lines,
                std::slice::from_ref(context),
                line_index,
                false,
                budget,
            )? {
                Some(at) => line_index = at.saturating_add(1),
                None => return Err(format!("Failed to find context '{context}' in {path}")),
            }
        }
        if chunk.old_lines.is_empty() {
            let at = if lines.last().is_some_and(String::is_empty) {
                lines.len().saturating_sub(1)
            } else {
                lines.len()
            };
            found_all.push((at, 0, chunk.new_lines.clone()));
            continue;
        }
        let mut pattern: &[String] = &chunk.old_lines;
        let mut new_slice: &[String] = &chunk.new_lines;
        let mut found = seek(lines, pattern, line_index, chunk.at_end_of_file, budget)?;
        if found.is_none() && pattern.last().is_some_and(String::is_empty) {
            // The trailing empty line stands for the file's final newline, which `lines` lacks.
            pattern = &pattern[..pattern.len() - 1];
            if new_slice.last().is_some_and(String::is_empty) {
                new_slice = &new_slice[..new_slice.len() - 1];
            }
            found = seek(lines, pattern, line_index, chunk.at_end_of_file, budget)?;
        }
        match found {
            Some(at) => {
                found_all.push((at, pattern.len(), new_slice.to_vec()));
                line_index = at.saturating_add(pattern.len());
            }
            None => {
                return Err(format!(
                    "Failed to find expected lines in {path}:\n{}",
                    chunk.old_lines.join("\n")
                ));
            }
        }
    }
    found_all.sort_by_key(|(at, _, _)| *at);
    Ok(found_all)
}

/// Codex's `seek_sequence`: where `pattern` starts in `lines` at or after `start` (at the end first
/// when `eof`), matched exactly, then ignoring trailing whitespace, then surrounding whitespace, then
/// with typographic punctuation read as ASCII.
fn seek(
    lines: &[String],
    pattern: &[String],
    start: usize,
    eof: bool,
    budget: &mut u64,
) -> Result<Option<usize>, String> {
    if pattern.is_empty() {
        return Ok(Some(start));
    }
    if pattern.len() > lines.len() {
        return Ok(None);
    }
    let last_start = lines.len() - pattern.len();
    let from = if eof { last_start } else { start };
    let passes: [&SameLine; 4] = [
        &|a, b| a == b,
        &|a, b| a.trim_end() == b.trim_end(),
        &|a, b| a.trim() == b.trim(),
        &|a, b| normalise(a) == normalise(b),
    ];
    for same in passes {
        for at in from..=last_start {
            let cost = u64::try_from(pattern.len()).unwrap_or(u64::MAX);
            *budget = budget.checked_sub(cost).ok_or_else(|| {
                format!(
                    "placing the patch's chunks takes more than {MATCH_BUDGET} line comparisons; split the patch"
                )
            })?;
            let window = lines.get(at..at.saturating_add(pattern.len()));
            if window.is_some_and(|window| {
                window
                    .iter()
                    .zip(pattern)
                    .all(|(line, wanted)| same(line, wanted))
            }) {
                return Ok(Some(at));
            }
        }
    }
    Ok(None)
}

/// Whether a file's line matches a pattern's, in one of [`seek`]'s passes.
type SameLine = dyn Fn(&str, &str) -> bool;

fn normalise(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
            | '\u{2212}' => '-',
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}' | '\u{2003}' | '\u{2004}' | '\u{2005}' | '\u{2006}'
            | '\u{2007}' | '\u{2008}' | '\u{2009}' | '\u{200A}' | '\u{202F}' | '\u{205F}'
            | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}
