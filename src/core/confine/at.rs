//! Safe wrappers over the `*at` system calls the confined operations act with: every name is one
//! component, looked up in a directory descriptor and never followed when it is a link, so a path
//! component swapped for a symlink after it was checked cannot redirect the call.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// One path component as the kernel takes it. A name with `/` or NUL, or `.`/`..`, would be a path
/// of its own rather than an entry of the directory: refused.
pub fn c_name(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a single path component", name.to_string_lossy()),
        ));
    }
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn result(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `openat(2)`; close-on-exec is always added, so no child process inherits a confined descriptor.
pub fn open_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is an open descriptor.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The directory itself again, as a new descriptor with its own flags (and, for reading, its own
/// offset).
pub fn reopen_dir(dir: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<OwnedFd> {
    open_at(dir, c".", flags | libc::O_DIRECTORY, 0)
}

/// `lstat` of `name` in `dir` (of `dir` itself when `name` is `None`), as std's [`Metadata`]: the
/// entry is opened `O_PATH | O_NOFOLLOW` (which neither follows a link nor opens a device) and
/// `fstat`ed.
pub fn metadata_at(dir: BorrowedFd<'_>, name: Option<&CStr>) -> io::Result<Metadata> {
    let fd = match name {
        Some(name) => open_at(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?,
        None => dir.try_clone_to_owned()?,
    };
    File::from(fd).metadata()
}

/// `lstat` of `name` in `dir` as the kernel's `stat`: one `fstatat`, the link itself if it is one.
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `stat` is a valid place to write, `dir` is open.
    result(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(stat)
}

/// The type bits of `name` in `dir`, without following a link; cheaper than [`metadata_at`].
pub fn file_type_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::mode_t> {
    lstat_at(dir, name).map(|stat| stat.st_mode & libc::S_IFMT)
}

/// The type bits of what `fd` is.
pub fn fd_file_type(fd: BorrowedFd<'_>) -> io::Result<libc::mode_t> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid place to write; `fd` is open (O_PATH descriptors may be fstat'ed).
    result(unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) })?;
    Ok(stat.st_mode & libc::S_IFMT)
}

pub fn mkdir_at(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
    result(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `unlinkat(2)`: `flags` is 0 for a file or link (never followed), `AT_REMOVEDIR` for an empty
/// directory.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
    result(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2(2)`; neither name is followed (a link is renamed, or replaced, as itself).
pub fn rename_at(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and outlive the call; both descriptors are open.
    result(unsafe {
        libc::renameat2(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// What a directory entry is, from `d_type` (or `lstat` where the filesystem leaves it unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    Other,
}

pub struct DirEntry {
    pub name: OsString,
    pub kind: Kind,
}

/// The entries of a directory (without `.` and `..`), in the order the filesystem gives them.
pub fn read_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<DirEntry>> {
    let mut listed = Vec::new();
    for_each_entry(dir, |name, d_type| {
        let kind = match d_type {
            libc::DT_DIR => Some(Kind::Dir),
            libc::DT_LNK => Some(Kind::Symlink),
            libc::DT_UNKNOWN => None,
            _ => Some(Kind::Other),
        };
        listed.push((OsString::from_vec(name.to_bytes().to_vec()), kind));
    })?;
    Ok(listed
        .into_iter()
        .map(|(name, kind)| {
            let kind = kind.unwrap_or_else(|| {
                CString::new(name.as_bytes())
                    .ok()
                    .and_then(|c| file_type_at(dir, &c).ok())
                    .map_or(Kind::Other, kind_of_mode)
            });
            DirEntry { name, kind }
        })
        .collect())
}

/// The names of a directory's entries (without `.` and `..`), in the order the filesystem gives them:
/// each a single component, as `readdir` gives it, ready for the `*at` calls.
pub fn read_dir_names(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for_each_entry(dir, |name, _| names.push(name.to_owned()))?;
    Ok(names)
}

fn kind_of_mode(mode: libc::mode_t) -> Kind {
    match mode {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// Calls `visit` with each entry's name and `d_type` (`DT_UNKNOWN` where the filesystem does not fill
/// it), `.` and `..` left out.
fn for_each_entry(dir: BorrowedFd<'_>, visit: impl FnMut(&CStr, u8)) -> io::Result<()> {
    // A descriptor of its own: `closedir` closes it, and its offset is nobody else's.
    let fd = reopen_dir(dir, libc::O_RDONLY)?.into_raw_fd();
    // SAFETY: `fd` is an open directory descriptor; on success the stream owns it.
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let err = io::Error::last_os_error();
        // SAFETY: the stream did not take `fd`: it is still ours to close.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Err(err);
    }
    let read = read_stream(stream, visit);
    // SAFETY: `stream` came from `fdopendir` and is closed once, here.
    unsafe { libc::closedir(stream) };
    read
}

fn read_stream(stream: *mut libc::DIR, mut visit: impl FnMut(&CStr, u8)) -> io::Result<()> {
    loop {
        // `readdir` tells the end from an error only through errno.
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is an open directory stream used by this thread only.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(0) | None => Ok(()),
                Some(_) => Err(err),
            };
        }
        // SAFETY: `readdir` returned a valid entry whose name is NUL-terminated; it stays valid
        // until the next `readdir` on this stream, and `visit` only borrows it until then.
        let (name, d_type) = unsafe { (CStr::from_ptr((*entry).d_name.as_ptr()), (*entry).d_type) };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        visit(name, d_type);
    }
}
