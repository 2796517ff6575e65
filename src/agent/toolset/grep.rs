//! `grep {pattern, path?}`: the reference's own search (its fallback when no `rg` is installed, as in
//! boxd's images): `os.walk` order, `.git` and `node_modules` and every link left out, files whose
//! first 512 bytes hold a NUL skipped, lines over 2 000 bytes skipped, 100 KiB of output. The walk
//! holds directories by descriptor and opens files without following links.

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use fancy_regex::Regex;

use super::paths::resolve;
use super::{Answer, Block, WALK_DEADLINE};
use crate::core::confine::{Dir, Kind, Workspace};

/// Output kept (the reference's `GREP_OUTPUT_LIMIT`).
pub const GREP_OUTPUT_LIMIT: usize = 100 * 1024;
/// Lines longer than this, in bytes with their line break, are not searched (`GREP_MAX_LINE_LENGTH`).
pub const GREP_MAX_LINE_LENGTH: usize = 2000;
/// Files searched at most (`WALK_MAX_ENTRIES`).
const WALK_MAX_FILES: usize = 50_000;
/// Bytes looked at for a NUL, the sign of a binary file.
const BINARY_SNIFF_BYTES: usize = 512;
/// How deep the walk goes: deeper directories are left out.
const MAX_DEPTH: usize = 512;

/// Blocking.
pub fn grep(workspace: &Workspace, pattern: &str, path: Option<&str>) -> Answer {
    let (search, held) = match path.filter(|path| !path.is_empty()) {
        Some(path) => {
            let resolved = resolve(workspace, path).map_err(|err| format!("grep: {err}"))?;
            (resolved.path.real, Some(resolved.held))
        }
        None => (workspace.real_root().to_path_buf(), None),
    };
    let rx = Regex::new(pattern).map_err(|err| format!("grep: invalid regex: {err}"))?;
    let mut search_state = Search {
        rx,
        hits: Vec::new(),
        budget: GREP_OUTPUT_LIMIT,
        stopped: false,
        deadline: Instant::now() + WALK_DEADLINE,
    };
    let root_dir = match &held {
        Some(held) => {
            let is_file = held.metadata().is_ok_and(|meta| meta.is_file());
            if is_file {
                if let Ok(file) = held.open_for_reading() {
                    search_state.scan(file, &search.display().to_string())?;
                }
                return Ok(search_state.answer());
            }
            held.open_dir().ok()
        }
        None => workspace_dir(workspace),
    };
    if let Some(dir) = root_dir {
        search_state.walk(dir, &search)?;
    }
    Ok(search_state.answer())
}

fn workspace_dir(workspace: &Workspace) -> Option<Dir> {
    workspace.hold("").ok()?.1.open_dir().ok()
}

struct Search {
    rx: Regex,
    hits: Vec<String>,
    budget: usize,
    stopped: bool,
    deadline: Instant,
}

impl Search {
    fn answer(self) -> Block {
        if self.hits.is_empty() {
            Block::text("no matches".to_owned())
        } else {
            Block::text(self.hits.join("\n"))
        }
    }

    fn check_deadline(&self) -> Result<(), String> {
        if Instant::now() >= self.deadline {
            return Err(format!(
                "grep: timed out after {}s",
                WALK_DEADLINE.as_secs()
            ));
        }
        Ok(())
    }

    /// `os.walk` top-down: a directory's files in listing order, then each subdirectory in turn.
    fn walk(&mut self, root: Dir, shown: &Path) -> Result<(), String> {
        let mut stack = vec![(root, shown.display().to_string(), 0usize)];
        let mut seen = 0usize;
        while let Some((dir, shown, depth)) = stack.pop() {
            let Ok(entries) = dir.entries() else {
                continue;
            };
            let mut subdirs = Vec::new();
            for entry in entries {
                let name = entry.name.to_string_lossy().into_owned();
                match entry.kind {
                    Kind::Symlink => {}
                    Kind::Dir => {
                        if name != ".git" && name != "node_modules" && depth < MAX_DEPTH {
                            subdirs.push(entry.name);
                        }
                    }
                    Kind::Other => {
                        self.check_deadline()?;
                        let Ok(file) = dir.open_file(&entry.name) else {
                            continue;
                        };
                        seen = seen.saturating_add(1);
                        if seen > WALK_MAX_FILES {
                            return Ok(());
                        }
                        self.scan(file, &format!("{shown}/{name}"))?;
                        if self.stopped {
                            return Ok(());
                        }
                    }
                }
            }
            for name in subdirs.into_iter().rev() {
                if let Ok(sub) = dir.open_child(&name) {
                    let sub_shown = format!("{shown}/{}", name.to_string_lossy());
                    stack.push((sub, sub_shown, depth.saturating_add(1)));
                }
            }
        }
        Ok(())
    }

    /// One file's matching lines, `PATH:LINE:TEXT`.
    fn scan(&mut self, file: std::fs::File, shown: &str) -> Result<(), String> {
        let mut lines = Lines {
            file,
            buffer: Vec::new(),
            start: 0,
            eof: false,
        };
        if lines.fill_to(BINARY_SNIFF_BYTES).is_err()
            || lines
                .buffer
                .iter()
                .take(BINARY_SNIFF_BYTES)
                .any(|&byte| byte == 0)
        {
            return Ok(());
        }
        let mut number = 0u64;
        loop {
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) | Err(_) => return Ok(()),
            };
            number = number.saturating_add(1);
            if let Line::Text(bytes) = line {
                let text = String::from_utf8_lossy(&bytes);
                let text = text.trim_end_matches(['\r', '\n']);
                // Past its backtracking bound a pattern has not matched (Python's `re` would go on).
                if self.rx.is_match(text).unwrap_or(false) {
                    self.push(format!("{shown}:{number}:{text}"));
                    if self.stopped {
                        return Ok(());
                    }
                }
            }
            if number.is_multiple_of(1024) {
                self.check_deadline()?;
            }
        }
    }

    fn push(&mut self, hit: String) {
        let cost = hit.chars().count().saturating_add(1);
        if cost > self.budget {
            self.hits
                .push(format!("[output truncated at {GREP_OUTPUT_LIMIT} bytes]"));
            self.stopped = true;
            return;
        }
        self.budget -= cost;
        self.hits.push(hit);
    }
}

/// A file's lines as Python's binary line iteration gives them, except that a line over
/// [`GREP_MAX_LINE_LENGTH`] bytes is never held whole.
struct Lines {
    file: std::fs::File,
    buffer: Vec<u8>,
    start: usize,
    eof: bool,
}

enum Line {
    Text(Vec<u8>),
    TooLong,
}

/// What one read asks for.
const READ_BYTES: usize = 64 * 1024;

impl Lines {
    /// Reads until the buffer holds `bytes` bytes past `start`, or the file ends.
    fn fill_to(&mut self, bytes: usize) -> std::io::Result<()> {
        while !self.eof && self.buffer.len().saturating_sub(self.start) < bytes {
            self.read_more()?;
        }
        Ok(())
    }

    fn read_more(&mut self) -> std::io::Result<()> {
        self.buffer.drain(..self.start);
        self.start = 0;
        let had = self.buffer.len();
        self.buffer.resize(had.saturating_add(READ_BYTES), 0);
        let read = loop {
            match self
                .file
                .read(self.buffer.get_mut(had..).unwrap_or_default())
            {
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        let read = read.inspect_err(|_| self.buffer.truncate(had))?;
        self.buffer.truncate(had.saturating_add(read));
        self.eof = read == 0;
        Ok(())
    }

    fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut skipping = false;
        loop {
            let pending = self.buffer.get(self.start..).unwrap_or_default();
            if let Some(at) = pending.iter().position(|&byte| byte == b'\n') {
                let end = self.start.saturating_add(at).saturating_add(1);
                let line = self
                    .buffer
                    .get(self.start..end)
                    .unwrap_or_default()
                    .to_vec();
                self.start = end;
                if skipping || line.len() > GREP_MAX_LINE_LENGTH {
                    return Ok(Some(Line::TooLong));
                }
                return Ok(Some(Line::Text(line)));
            }
            if pending.len() > GREP_MAX_LINE_LENGTH {
                skipping = true;
                self.start = self.buffer.len();
            }
            if self.eof {
                let line = self.buffer.get(self.start..).unwrap_or_default().to_vec();
                self.start = self.buffer.len();
                return Ok(match (skipping, line.is_empty()) {
                    (true, _) => Some(Line::TooLong),
                    (false, true) => None,
                    (false, false) if line.len() > GREP_MAX_LINE_LENGTH => Some(Line::TooLong),
                    (false, false) => Some(Line::Text(line)),
                });
            }
            self.read_more()?;
        }
    }
}
