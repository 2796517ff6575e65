//! Failure messages worded as Node's `fs` words them (`ENOENT: no such file or directory, open '/x'`), so
//! callers that knew the reference server's errors read the same text from boxd.

use std::io;
use std::path::Path;

/// The system call a failure came from, and the paths Node names for it.
pub enum Syscall<'a> {
    Open(&'a Path),
    /// Node names no path for read failures (`EISDIR: illegal operation on a directory, read`).
    Read,
    Scandir(&'a Path),
    Mkdir(&'a Path),
    Stat(&'a Path),
    Rename(&'a Path, &'a Path),
}

pub fn describe(err: &io::Error, syscall: Syscall<'_>) -> String {
    let Some((code, text)) = err.raw_os_error().and_then(errno_text) else {
        return err.to_string();
    };
    let call = match syscall {
        Syscall::Open(path) => format!("open '{}'", path.display()),
        Syscall::Read => "read".to_owned(),
        Syscall::Scandir(path) => format!("scandir '{}'", path.display()),
        Syscall::Mkdir(path) => format!("mkdir '{}'", path.display()),
        Syscall::Stat(path) => format!("stat '{}'", path.display()),
        Syscall::Rename(from, to) => {
            format!("rename '{}' -> '{}'", from.display(), to.display())
        }
    };
    format!("{code}: {text}, {call}")
}

/// libuv's names and wording for the errors file tools meet.
fn errno_text(errno: i32) -> Option<(&'static str, &'static str)> {
    Some(match errno {
        libc::ENOENT => ("ENOENT", "no such file or directory"),
        libc::EISDIR => ("EISDIR", "illegal operation on a directory"),
        libc::ENOTDIR => ("ENOTDIR", "not a directory"),
        libc::EEXIST => ("EEXIST", "file already exists"),
        libc::EACCES => ("EACCES", "permission denied"),
        libc::EPERM => ("EPERM", "operation not permitted"),
        libc::ENOTEMPTY => ("ENOTEMPTY", "directory not empty"),
        libc::EXDEV => ("EXDEV", "cross-device link not permitted"),
        libc::EINVAL => ("EINVAL", "invalid argument"),
        libc::ELOOP => ("ELOOP", "too many symbolic links encountered"),
        libc::ENAMETOOLONG => ("ENAMETOOLONG", "name too long"),
        libc::ENOSPC => ("ENOSPC", "no space left on device"),
        libc::EROFS => ("EROFS", "read-only file system"),
        libc::EBUSY => ("EBUSY", "resource busy or locked"),
        libc::EMFILE => ("EMFILE", "too many open files"),
        libc::EDQUOT => ("EDQUOT", "disk quota exceeded"),
        libc::EIO => ("EIO", "i/o error"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worded_as_node_words_it() {
        let missing = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            describe(&missing, Syscall::Open(Path::new("/w/x"))),
            "ENOENT: no such file or directory, open '/w/x'"
        );
        let exists = io::Error::from_raw_os_error(libc::EEXIST);
        assert_eq!(
            describe(&exists, Syscall::Rename(Path::new("/a"), Path::new("/b"))),
            "EEXIST: file already exists, rename '/a' -> '/b'"
        );
        let other = io::Error::other("disk on fire");
        assert_eq!(describe(&other, Syscall::Read), "disk on fire");
    }
}
