//! `read`, `write` and `edit`: the reference's behaviour and words (the SDK's `beta_read_tool`,
//! `beta_write_tool`, `beta_edit_tool` and `_files.py`), on places held by descriptors.

use std::io::{self, Read};

use base64::Engine;

use super::paths::{reason, resolve};
use super::{Answer, Block};
use crate::core::confine::{Anchor, Workspace};
use crate::core::entry::OpenError;
use crate::core::staging::stage_bytes;

/// The cap on a whole-file `read` and on `edit` (the reference's `DEFAULT_MAX_FILE_BYTES`).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The cap on an image's base64 form (`DEFAULT_MAX_IMAGE_BASE64_BYTES`).
const MAX_IMAGE_BASE64_BYTES: u64 = 5 * 1024 * 1024;
/// The cap on a PDF (`DEFAULT_MAX_PDF_BYTES`).
pub const MAX_PDF_BYTES: u64 = 20 * 1024 * 1024;
/// What `read` answers as a content block rather than text, by extension (`_BINARY_MEDIA_TYPES`).
const BINARY_MEDIA_TYPES: [(&str, &str); 6] = [
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("pdf", "application/pdf"),
];
/// The size of one read of a file `view_range` streams (`READ_STREAM_CHUNK_BYTES`).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Blocking. `read {file_path, view_range?}`.
pub fn read(workspace: &Workspace, file_path: &str, view_range: Option<&[i64]>) -> Answer {
    let resolved = resolve(workspace, file_path).map_err(|err| format!("read: {err}"))?;
    // An empty list is no range, as in the reference (`if view_range`).
    let view_range = view_range.filter(|range| !range.is_empty());
    let range = match view_range {
        None => None,
        Some(&[start, end]) => Some((start, end)),
        Some(_) => return Err("read: view_range must be [start_line, end_line]".to_owned()),
    };
    let fs_error = |err: &io::Error| format!("read: {file_path}: {}", reason(err));
    let held = &resolved.held;
    let meta = held.metadata().map_err(|err| fs_error(&err))?;
    if !meta.is_file() {
        return Err(format!("read: {file_path}: not a regular file"));
    }
    let size = meta.len();
    if let Some(media_type) = media_type(&resolved.path.real) {
        if range.is_some() {
            return Err("read: view_range is not supported for image/PDF files".to_owned());
        }
        return binary_block(held, file_path, size, media_type);
    }
    let not_utf8 = || {
        format!(
            "read: {file_path}: not valid UTF-8 text (binary files are only supported for image/PDF extensions)"
        )
    };
    if size > MAX_FILE_BYTES {
        let Some((start, end)) = range else {
            return Err(format!(
                "read: {file_path} is {size} bytes, exceeds {MAX_FILE_BYTES}-byte limit. Use the view_range parameter to read specific line ranges, e.g. view_range: [1, 500]."
            ));
        };
        let mut lines = LineRange::new(file_path, start, end);
        if lines.is_empty() {
            return Ok(Block::text(String::new()));
        }
        let mut file = open(held).map_err(|err| fs_error(&err))?;
        let mut chunk = vec![0; READ_CHUNK_BYTES];
        while !lines.is_collected() {
            let read = match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(read) => read,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(fs_error(&err)),
            };
            lines.collect_from(chunk.get(..read).unwrap_or_default())?;
        }
        return String::from_utf8(lines.collected)
            .map(Block::text)
            .map_err(|_| not_utf8());
    }
    let bytes = read_whole(held, MAX_FILE_BYTES).map_err(|err| fs_error(&err))?;
    let text = String::from_utf8(bytes).map_err(|_| not_utf8())?;
    let Some((start, end)) = range else {
        return Ok(Block::text(text));
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let first = usize::try_from(start.saturating_sub(1)).unwrap_or(0);
    let last = if end > 0 {
        usize::try_from(end).unwrap_or(usize::MAX)
    } else {
        lines.len()
    }
    .min(lines.len());
    let shown = lines.get(first..last).unwrap_or_default();
    Ok(Block::text(shown.join("\n")))
}

/// The lines `[start, end]` of a file read in chunks, their bytes capped (the reference's
/// `LineRangeCollector`, answer for answer).
struct LineRange<'a> {
    file_path: &'a str,
    start_line: i64,
    end_line: i64,
    start: u64,
    end: u64,
    line: u64,
    collected: Vec<u8>,
}

impl<'a> LineRange<'a> {
    fn new(file_path: &'a str, start_line: i64, end_line: i64) -> LineRange<'a> {
        LineRange {
            file_path,
            start_line,
            end_line,
            start: u64::try_from(start_line.saturating_sub(1)).unwrap_or(0),
            end: if end_line > 0 {
                end_line.unsigned_abs()
            } else {
                u64::MAX
            },
            line: 0,
            collected: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    fn is_collected(&self) -> bool {
        self.line >= self.end
    }

    fn collect_from(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut line_start = 0;
        while line_start < chunk.len() && !self.is_collected() {
            let rest = chunk.get(line_start..).unwrap_or_default();
            let newline = rest.iter().position(|&byte| byte == b'\n');
            let line_end = newline.map_or(chunk.len(), |at| line_start.saturating_add(at));
            if self.line >= self.start {
                let bytes = chunk.get(line_start..line_end).unwrap_or_default();
                self.collect(bytes, newline.is_some())?;
            }
            if newline.is_none() {
                break;
            }
            self.line = self.line.saturating_add(1);
            line_start = line_end.saturating_add(1);
        }
        Ok(())
    }

    fn collect(&mut self, bytes: &[u8], newline_terminated: bool) -> Result<(), String> {
        self.collected.extend_from_slice(bytes);
        if newline_terminated && self.line.saturating_add(1) < self.end {
            self.collected.push(b'\n');
        }
        if self.collected.len() as u64 <= MAX_FILE_BYTES {
            return Ok(());
        }
        let file_path = self.file_path;
        if self.end.saturating_sub(self.start) == 1 {
            return Err(format!(
                "read: line {} of {file_path} alone exceeds {MAX_FILE_BYTES}-byte limit. The read tool cannot return part of a line, so view_range cannot narrow this further.",
                self.start.saturating_add(1)
            ));
        }
        Err(format!(
            "read: view_range [{}, {}] of {file_path} exceeds {MAX_FILE_BYTES}-byte limit. Narrow the view_range to read a smaller portion.",
            self.start_line, self.end_line
        ))
    }
}

/// The media type `read` answers a file with as a content block, by its extension.
fn media_type(real: &std::path::Path) -> Option<&'static str> {
    let extension = real.extension()?.to_str()?.to_lowercase();
    BINARY_MEDIA_TYPES
        .iter()
        .find(|(known, _)| *known == extension)
        .map(|(_, media_type)| *media_type)
}

/// The reference's `_read_binary_block`: an image or PDF as a base64 content block, within its cap.
fn binary_block(held: &Anchor, file_path: &str, size: u64, media_type: &str) -> Answer {
    let limit = if media_type == "application/pdf" {
        MAX_PDF_BYTES
    } else {
        (MAX_IMAGE_BASE64_BYTES / 4).saturating_mul(3)
    };
    if size > limit {
        return Err(format!(
            "read: {file_path} is {size} bytes, exceeds {limit}-byte limit for image/PDF files."
        ));
    }
    let bytes =
        read_whole(held, limit).map_err(|err| format!("read: {file_path}: {}", reason(&err)))?;
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(if media_type == "application/pdf" {
        Block::Document { data }
    } else {
        Block::Image {
            media_type: media_type.to_owned(),
            data,
        }
    })
}

/// Blocking. `write {file_path, content}`.
pub fn write(workspace: &Workspace, file_path: &str, content: &str) -> Answer {
    let resolved = resolve(workspace, file_path).map_err(|err| format!("write: {err}"))?;
    // `mkdir(parents=True, exist_ok=True)` on a parent that is a file: "file already exists".
    if let Some(parent) = resolved.path.real.parent()
        && std::fs::symlink_metadata(parent).is_ok_and(|meta| !meta.is_dir())
    {
        return Err(format!("write: {file_path}: file already exists"));
    }
    store(resolved.held, content).map_err(|err| format!("write: {file_path}: {}", reason(&err)))?;
    // Python's `len(content)`: characters, whatever the message calls them.
    let count = content.chars().count();
    Ok(Block::text(format!("wrote {count} bytes to {file_path}")))
}

/// Blocking. `edit {file_path, old_string, new_string, replace_all?}`.
pub fn edit(
    workspace: &Workspace,
    file_path: &str,
    old_string: &str,
    new_string: &str,
    replace_all: bool,
) -> Answer {
    let resolved = resolve(workspace, file_path).map_err(|err| format!("edit: {err}"))?;
    let fs_error = |err: &io::Error| format!("edit: {file_path}: {}", reason(err));
    let meta = resolved.held.metadata().map_err(|err| fs_error(&err))?;
    if !meta.is_file() {
        return Err(format!("edit: {file_path}: not a regular file"));
    }
    let size = meta.len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "edit: {file_path} is {size} bytes, exceeds {MAX_FILE_BYTES}-byte limit. The edit tool loads the whole file and cannot modify a file this large."
        ));
    }
    let bytes = read_whole(&resolved.held, MAX_FILE_BYTES).map_err(|err| fs_error(&err))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        format!("edit: {file_path}: not valid UTF-8 text (cannot edit binary files)")
    })?;
    let count = text.matches(old_string).count();
    if count == 0 {
        return Err(format!("edit: old_string not found in {file_path}"));
    }
    if !replace_all && count > 1 {
        return Err(format!(
            "edit: old_string appears {count} times in {file_path} (must be unique)"
        ));
    }
    let updated = if replace_all {
        text.replace(old_string, new_string)
    } else {
        text.replacen(old_string, new_string, 1)
    };
    store(resolved.held, &updated).map_err(|err| fs_error(&err))?;
    let replaced = if replace_all { count } else { 1 };
    Ok(Block::text(format!(
        "edited {file_path} ({replaced} replacement(s))"
    )))
}

fn open(held: &Anchor) -> io::Result<std::fs::File> {
    held.open_for_reading().map_err(|err| match err {
        OpenError::Io(err) => err,
        OpenError::NotRegular(message) => io::Error::other(message),
    })
}

/// The file whole, at most `limit` bytes (it was checked to be no larger; one that grew since is cut
/// rather than read without bound).
fn read_whole(held: &Anchor, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open(held)?.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes the file whole (staged beside it, renamed into place, so a failure leaves the old content),
/// making missing parent directories as the reference's `mkdir(parents=True)` does.
fn store(mut held: Anchor, content: &str) -> io::Result<()> {
    if held.is_root() || held.metadata().is_ok_and(|meta| meta.is_dir()) {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    held.create_parents()?;
    let dir = held.parent_path()?;
    let staged = stage_bytes(&dir, content.as_bytes())?;
    staged.persist(&held.entry_path()?)
}
