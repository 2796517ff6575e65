//! Entry info, the record every workspace route answers with. Types come from lstat: a symlink is reported
//! as `symlink` and never followed.

use std::fs::{File, FileType, Metadata};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
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
    /// Blocking. `shown` is what the client addressed, `real` is what is on disk.
    pub fn read(shown: &Path, real: &Path) -> std::io::Result<EntryInfo> {
        let meta = std::fs::symlink_metadata(real)?;
        Ok(EntryInfo::from_metadata(shown, &meta))
    }

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

fn refuse_special(meta: &Metadata) -> Result<(), OpenError> {
    match special_kind(&meta.file_type()) {
        Some(kind) => Err(OpenError::NotRegular(format!(
            "is {kind}, not a regular file; only regular files are read"
        ))),
        None => Ok(()),
    }
}

/// Blocking. Opens a file (or directory) for reading, refusing FIFOs, sockets and devices: they are
/// looked at with `stat` first and never opened, and the open itself is non-blocking, so one swapped in
/// after the check cannot hang the caller either (its `fstat` refuses it).
pub fn open_for_reading(path: &Path) -> Result<File, OpenError> {
    if let Ok(meta) = std::fs::metadata(path) {
        refuse_special(&meta)?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(OpenError::Io)?;
    refuse_special(&file.metadata().map_err(OpenError::Io)?)?;
    Ok(file)
}
