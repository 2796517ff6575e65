//! Entry info, the record every workspace route answers with. Types come from lstat: a symlink is reported
//! as `symlink` and never followed.

use std::fs::FileType;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::Serialize;

/// `S` is `String` where the record is kept, `&str` where a listing serialises it straight from a
/// buffer it reuses; one definition, so both write the same JSON.
#[derive(Debug, Serialize)]
pub struct EntryInfo<S = String> {
    pub path: S,
    pub name: S,
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

impl<'a> EntryInfo<&'a str> {
    /// The same record as [`EntryInfo::from_metadata`], from an `lstat`'s `stat`, borrowing `path` and
    /// `name` (the path's last component).
    pub fn from_stat(path: &'a str, name: &'a str, stat: &libc::stat) -> EntryInfo<&'a str> {
        let kind = match stat.st_mode & libc::S_IFMT {
            libc::S_IFLNK => "symlink",
            libc::S_IFDIR => "dir",
            libc::S_IFREG => "file",
            _ => "other",
        };
        EntryInfo {
            path,
            name,
            kind,
            // `st_size` is never negative for a regular file; std's `Metadata::len` casts it alike.
            size: (kind == "file").then_some(stat.st_size.cast_unsigned()),
            mtime_ms: millis_since_epoch(stat.st_mtime, stat.st_mtime_nsec),
        }
    }
}

/// Milliseconds from the epoch to `seconds` + `nanos` (as `stat` gives them), truncated toward zero on
/// either side of it, and 0 beyond `i64`: what `from_metadata` computes through `SystemTime`.
fn millis_since_epoch(seconds: i64, nanos: i64) -> i64 {
    // Two i64 scaled into i128 cannot overflow it.
    let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    match i64::try_from(total.unsigned_abs() / 1_000_000) {
        Ok(millis) if total < 0 => -millis,
        Ok(millis) => millis,
        Err(_) => 0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    fn lstat(path: &Path) -> libc::stat {
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `c_path` is NUL-terminated, `stat` a valid place to write.
        assert_eq!(unsafe { libc::lstat(c_path.as_ptr(), &mut stat) }, 0);
        stat
    }

    fn set_mtime(path: &Path, seconds: i64, nanos: i64) {
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        let times = [libc::timespec {
            tv_sec: seconds,
            tv_nsec: nanos,
        }; 2];
        // SAFETY: `c_path` is NUL-terminated, `times` holds two valid timespecs.
        let done = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c_path.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        assert_eq!(done, 0);
    }

    /// The listing's record (from `stat`) and every other route's (from std's `Metadata`) are the
    /// same JSON, for every kind and for times before the epoch.
    #[test]
    fn stat_and_metadata_give_the_same_entry_info() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("file"), b"12345").unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("link")).unwrap();
        let fifo = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: `fifo` is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let times = [
            (1_700_000_000, 123_456_789),
            (0, 999_999),
            (-1, 999_999_999),
            (-2, 500_000_000),
            (-1_000, 0),
            (4_000_000_000, 1),
        ];
        for name in ["file", "dir", "link", "fifo"] {
            let path = root.join(name);
            for (seconds, nanos) in times {
                set_mtime(&path, seconds, nanos);
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let kept = EntryInfo::from_metadata(&path, &meta);
                let shown = path.to_string_lossy();
                let borrowed = EntryInfo::from_stat(&shown, name, &lstat(&path));
                assert_eq!(
                    serde_json::to_string(&kept).unwrap(),
                    serde_json::to_string(&borrowed).unwrap(),
                    "{name} at {seconds}s {nanos}ns"
                );
            }
        }
    }

    #[test]
    fn millis_truncate_toward_zero_and_saturate_to_zero() {
        assert_eq!(millis_since_epoch(-2, 500_000_000), -1_500);
        assert_eq!(millis_since_epoch(-1, 999_999_999), 0);
        assert_eq!(millis_since_epoch(1, 999_999), 1_000);
        assert_eq!(millis_since_epoch(i64::MAX, 0), 0);
        assert_eq!(millis_since_epoch(i64::MIN, 0), 0);
    }
}
