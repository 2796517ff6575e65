//! Entry info, the record every workspace route answers with. Types come from lstat: a symlink is reported
//! as `symlink` and never followed.

use std::fs::FileType;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct EntryInfo {
    pub path: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: Option<u64>,
    pub mtime_ms: i64,
}

impl EntryInfo {
    pub fn from_metadata(shown: &Path, meta: &std::fs::Metadata) -> EntryInfo {
        let file_type = meta.file_type();
        let kind = if file_type.is_symlink() {
            "symlink"
        } else if file_type.is_dir() {
            "dir"
        } else if file_type.is_file() {
            "file"
        } else {
            "other"
        };
        let mtime_ms = meta
            .modified()
            .ok()
            .and_then(|time| match time.duration_since(UNIX_EPOCH) {
                Ok(after) => i64::try_from(after.as_millis()).ok(),
                Err(before) => i64::try_from(before.duration().as_millis())
                    .ok()
                    .map(|ms| -ms),
            })
            .unwrap_or(0);
        EntryInfo {
            path: shown.to_string_lossy().into_owned(),
            name: shown
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            kind,
            size: (kind == "file").then_some(meta.len()),
            mtime_ms,
        }
    }
}

/// Why a file was not opened for reading.
#[derive(Debug)]
pub enum OpenError {
    /// A FIFO, socket or device: reading it could block forever or have side effects.
    NotRegular(String),
    Io(std::io::Error),
}

/// What a file type is when it is neither a regular file, a directory nor a link.
pub fn special_kind(file_type: &FileType) -> Option<&'static str> {
    if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else {
        None
    }
}
