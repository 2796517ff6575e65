//! A checked path held by descriptors. The check ([`super::Confinement::confine`]) finds the real,
//! symlink-free location of a path by name; between it and the work, a process in the sandbox may swap
//! any directory on the way for a symlink that leads out. So the checked location is opened from its
//! root's descriptor refusing every link on the way (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or a component walk with `O_NOFOLLOW` and a type check
//! per step where `openat2` is not available), and the work is done by `*at` calls on that directory
//! descriptor and the entry's name in it. A component that became a link after the check makes the
//! open fail, and the caller checks again; once opened, swapping names cannot redirect the work.
//!
//! `RESOLVE_IN_ROOT` is not used: it would read a link's absolute target or `..` as relative to the
//! root instead of refusing it, where confinement refuses links that lead out (with its own message)
//! and follows links from one allowed root into another.

use std::ffi::{CStr, CString, OsStr};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::at::{self, Kind};
use crate::core::entry::{OpenError, special_kind};

/// Set once `openat2` turned out to be missing (kernels before 5.6) or filtered (seccomp profiles of
/// some container engines answer `EPERM` or `ENOSYS`): from then on, the component walk.
static OPENAT2_UNAVAILABLE: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
thread_local! {
    /// Tests force the component walk on their own thread, to exercise it where `openat2` works.
    static FORCE_WALK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn openat2_usable() -> bool {
    #[cfg(test)]
    if FORCE_WALK.with(std::cell::Cell::get) {
        return false;
    }
    !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed)
}

/// `struct open_how` of openat2(2), as `<linux/openat2.h>` lays it out. libc declares it
/// `#[non_exhaustive]`, so it cannot be built outside libc but zeroed; the kernel reads these three
/// fields (and takes the size, so a larger future struct is no concern here).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Why a checked path could not be held.
#[derive(Debug)]
pub(super) enum Anchoring {
    /// A component the check saw as a directory (or as missing) is now a link: check again.
    Changed,
    Io(io::Error),
}

impl From<io::Error> for Anchoring {
    fn from(err: io::Error) -> Anchoring {
        Anchoring::Io(err)
    }
}

/// A confined path, held: the directory its entry is in, opened without following any link, and the
/// entry's name there. Where directories on the way did not exist when it was checked, the deepest one
/// that did is held with the rest of the way still to create ([`Anchor::create_parents`]).
#[derive(Debug)]
pub struct Anchor {
    /// The parent directory, or its deepest existing ancestor (`O_PATH`).
    dir: OwnedFd,
    /// The directories from `dir` down to the parent that did not exist (or were not directories).
    missing: Vec<CString>,
    /// Why `missing` is not empty: `ENOENT`, or `ENOTDIR` when one of them is not a directory.
    missing_errno: i32,
    /// The entry's name in its parent; `None` when the path is a root itself.
    name: Option<CString>,
    /// The parent's checked path: only for [`Anchor::parent_path`] on systems without `/proc`.
    parent_real: PathBuf,
}

/// A directory held open, to list and walk down without following links.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// An entry's name as `readdir` gave it: a single component (never `.`, `..` or one with a `/`) by
/// construction, so the `*at` calls can take it without another check or copy.
#[derive(Debug)]
pub struct EntryName(CString);

impl EntryName {
    pub fn as_bytes(&self) -> &[u8] {
        self.0.to_bytes()
    }
}

/// Opens `root` and, beneath it, the parent of `relative` (plain names only: the checked, symlink-free
/// location). With `follow_last`, the final name was checked as a non-link (the check followed it),
/// and is refused if it is one now.
pub(super) fn anchor(root: &Path, relative: &Path, follow_last: bool) -> Result<Anchor, Anchoring> {
    let mut names = Vec::new();
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Err(Anchoring::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", relative.display()),
            )));
        };
        names.push(at::c_name(name)?);
    }
    // The root is the operator's, not the sandbox's: opened by its configured real path.
    let root_fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)?
        .into();
    let Some((name, parents)) = names.split_last() else {
        return Ok(Anchor {
            dir: root_fd,
            missing: Vec::new(),
            missing_errno: 0,
            name: None,
            parent_real: root.to_path_buf(),
        });
    };
    let (dir, missing, missing_errno) = if parents.is_empty() {
        (root_fd, Vec::new(), 0)
    } else {
        open_beneath(root_fd.as_fd(), parents)?
    };
    if follow_last
        && missing.is_empty()
        && at::file_type_at(dir.as_fd(), name).is_ok_and(|kind| kind == libc::S_IFLNK)
    {
        return Err(Anchoring::Changed);
    }
    Ok(Anchor {
        dir,
        missing,
        missing_errno,
        name: Some(name.clone()),
        parent_real: relative
            .parent()
            .map_or_else(|| root.to_path_buf(), |parent| root.join(parent)),
    })
}

type Opened = (OwnedFd, Vec<CString>, i32);

/// The directory `parents` names beneath `root`, or its deepest existing ancestor and what is missing.
fn open_beneath(root: BorrowedFd<'_>, parents: &[CString]) -> Result<Opened, Anchoring> {
    if openat2_usable() {
        let mut joined = Vec::new();
        for name in parents {
            if !joined.is_empty() {
                joined.push(b'/');
            }
            joined.extend_from_slice(name.to_bytes());
        }
        let joined = CString::new(joined).map_err(io::Error::other)?;
        match openat2(root, &joined) {
            Ok(fd) => return Ok((fd, Vec::new(), 0)),
            Err(err) => match err.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL) => {
                    if !OPENAT2_UNAVAILABLE.swap(true, Ordering::Relaxed) {
                        tracing::info!(%err, "openat2 is not available; confining paths with a checked component walk");
                    }
                }
                // A link on the way (ELOOP), an escape (EXDEV), or a rename elsewhere that made the
                // kernel give up on `..` safety (EAGAIN): what was checked is not what is there.
                Some(libc::ELOOP | libc::EXDEV | libc::EAGAIN) => return Err(Anchoring::Changed),
                // Part of the way is missing (or not a directory): the walk finds how far it goes.
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                _ => return Err(Anchoring::Io(err)),
            },
        }
    }
    walk_beneath(root, parents)
}

fn openat2(dir: BorrowedFd<'_>, path: &CStr) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: u64::try_from(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .map_err(io::Error::other)?,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    loop {
        // SAFETY: `path` is NUL-terminated, `how` is a valid `open_how` of the size passed, both
        // outlive the call; `dir` is open.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            let fd = libc::c_int::try_from(fd).map_err(io::Error::other)?;
            // SAFETY: a fresh descriptor nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The fallback of `openat2`: one component at a time, each opened `O_PATH | O_NOFOLLOW` in the one
/// before and checked to be a directory, so no link is ever followed.
pub(super) fn walk_beneath(root: BorrowedFd<'_>, parents: &[CString]) -> Result<Opened, Anchoring> {
    let mut dir = root.try_clone_to_owned()?;
    for (at, name) in parents.iter().enumerate() {
        let missing = || {
            parents
                .get(at..)
                .map(<[CString]>::to_vec)
                .unwrap_or_default()
        };
        let child = match at::open_at(dir.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(child) => child,
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {
                return Ok((dir, missing(), libc::ENOENT));
            }
            Err(err) => return Err(Anchoring::Io(err)),
        };
        match at::fd_file_type(child.as_fd())? {
            libc::S_IFDIR => dir = child,
            libc::S_IFLNK => return Err(Anchoring::Changed),
            _ => return Ok((dir, missing(), libc::ENOTDIR)),
        }
    }
    Ok((dir, Vec::new(), 0))
}

/// A link where the check left none: the entry changed after it was checked.
fn changed_to_link() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it was replaced by a symbolic link while in use",
    )
}

impl Anchor {
    /// Whether the path is one of the roots itself.
    pub fn is_root(&self) -> bool {
        self.name.is_none()
    }

    /// The entry's parent directory, if it exists.
    fn parent(&self) -> io::Result<BorrowedFd<'_>> {
        if self.missing.is_empty() {
            Ok(self.dir.as_fd())
        } else {
            Err(io::Error::from_raw_os_error(self.missing_errno))
        }
    }

    /// Whether the entry's parent directory exists.
    pub fn has_parent(&self) -> bool {
        self.missing.is_empty()
    }

    /// `lstat` of the entry: a link is described as itself.
    pub fn metadata(&self) -> io::Result<Metadata> {
        at::metadata_at(self.parent()?, self.name.as_deref())
    }

    pub fn exists(&self) -> bool {
        match (self.parent(), &self.name) {
            (Ok(_), None) => true,
            (Ok(dir), Some(name)) => at::file_type_at(dir, name).is_ok(),
            (Err(_), _) => false,
        }
    }

    /// Opens the entry for reading, refusing FIFOs, sockets and devices (looked at first and never
    /// opened, and the open is non-blocking, so one swapped in after the look cannot hang the caller
    /// either) and links (the check followed any there was).
    pub fn open_for_reading(&self) -> Result<File, OpenError> {
        let dir = self.parent().map_err(OpenError::Io)?;
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW;
        let fd = match &self.name {
            Some(name) => {
                let file_type = at::metadata_at(dir, Some(name))
                    .map_err(OpenError::Io)?
                    .file_type();
                if file_type.is_symlink() {
                    return Err(OpenError::Io(changed_to_link()));
                }
                refuse_special(file_type)?;
                at::open_at(dir, name, flags, 0).map_err(|err| OpenError::Io(link_error(err)))?
            }
            None => at::reopen_dir(dir, libc::O_RDONLY).map_err(OpenError::Io)?,
        };
        let file = File::from(fd);
        refuse_special(file.metadata().map_err(OpenError::Io)?.file_type())?;
        Ok(file)
    }

    /// The entry as a directory to list. `ENOTDIR` if it is something else.
    pub fn open_dir(&self) -> io::Result<Dir> {
        let dir = self.parent()?;
        let fd = match &self.name {
            Some(name) => match at::file_type_at(dir, name)? {
                libc::S_IFDIR => at::open_at(
                    dir,
                    name,
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                    0,
                )
                .map_err(link_error)?,
                libc::S_IFLNK => return Err(changed_to_link()),
                _ => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            },
            None => dir.try_clone_to_owned()?,
        };
        Ok(Dir { fd })
    }

    /// Creates the missing directories down to the entry's parent, each made with `mkdirat` and
    /// entered without following a link (one made concurrently as a link is refused).
    pub fn create_parents(&mut self) -> io::Result<()> {
        while let Some(name) = self.missing.first() {
            self.dir = make_dir_and_enter(self.dir.as_fd(), name)?;
            self.missing.remove(0);
        }
        Ok(())
    }

    /// `mkdir -p`: the missing parents, then the entry. `Ok(false)` if it already was a directory.
    pub fn create_dir_all(&mut self) -> io::Result<bool> {
        self.create_parents()?;
        let Some(name) = &self.name else {
            return Ok(false);
        };
        match at::mkdir_at(self.dir.as_fd(), name, 0o777) {
            Ok(()) => Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) => {
                match at::file_type_at(self.dir.as_fd(), name)? {
                    libc::S_IFDIR => Ok(false),
                    libc::S_IFLNK => Err(changed_to_link()),
                    _ => Err(err),
                }
            }
            Err(err) => Err(err),
        }
    }

    /// The parent directory and the name a removal acts on (a root has none).
    fn removable(&self) -> io::Result<(BorrowedFd<'_>, &std::ffi::CStr)> {
        let dir = self.parent()?;
        let name = self
            .name
            .as_deref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a root is not removed"))?;
        Ok((dir, name))
    }

    /// Removes the entry: a link or file itself, a directory with everything in it (walked by
    /// descriptor, never through a link).
    pub fn remove(&self) -> io::Result<()> {
        let (dir, name) = self.removable()?;
        if at::file_type_at(dir, name)? == libc::S_IFDIR {
            remove_tree(dir, name)
        } else {
            at::unlink_at(dir, name, 0)
        }
    }

    /// Removes the entry only if that takes no more: a link or file itself, a directory only if it is
    /// empty (`ENOTEMPTY` otherwise), like `rm` without `-r`.
    pub fn remove_one(&self) -> io::Result<()> {
        let (dir, name) = self.removable()?;
        if at::file_type_at(dir, name)? == libc::S_IFDIR {
            at::unlink_at(dir, name, libc::AT_REMOVEDIR)
        } else {
            at::unlink_at(dir, name, 0)
        }
    }

    /// Removes everything in the entry, a directory (a root too), and keeps the directory itself: for
    /// a root that is a mount point.
    pub fn clear(&self) -> io::Result<()> {
        let dir = self.open_dir()?;
        for entry in at::read_dir(dir.fd.as_fd())? {
            let name = CString::new(entry.name.into_vec()).map_err(io::Error::other)?;
            remove_tree(dir.fd.as_fd(), &name)?;
        }
        Ok(())
    }

    /// Renames the entry (a link as itself) to `to`, whose parent must exist. `no_replace`: fail with
    /// `EEXIST` rather than replace, atomically where the filesystem supports it.
    pub fn rename_to(&self, to: &Anchor, no_replace: bool) -> io::Result<()> {
        let not_root = || io::Error::new(io::ErrorKind::InvalidInput, "a root is not renamed");
        let (from_dir, from) = (self.parent()?, self.name.as_deref().ok_or_else(not_root)?);
        // A root is a directory that exists: what renaming onto it would meet.
        let onto_root = || io::Error::from_raw_os_error(libc::EEXIST);
        let (to_dir, to_name) = (to.parent()?, to.name.as_deref().ok_or_else(onto_root)?);
        if !no_replace {
            return at::rename_at(from_dir, from, to_dir, to_name, 0);
        }
        match at::rename_at(from_dir, from, to_dir, to_name, libc::RENAME_NOREPLACE) {
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                // Filesystems without RENAME_NOREPLACE: check, then rename (a narrow race, on names
                // inside the held directories only).
                if at::file_type_at(to_dir, to_name).is_ok() {
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                at::rename_at(from_dir, from, to_dir, to_name, 0)
            }
            other => other,
        }
    }

    /// The parent directory as a path for path-taking code (the staged writes of
    /// `core::staging`): `/proc/self/fd/N`, which the kernel resolves to this very directory, so a
    /// swap of the names on the way does not redirect it. Valid while this anchor lives. Without
    /// `/proc` (never so in a container), the checked path, and the race is open again: said once.
    pub fn parent_path(&self) -> io::Result<PathBuf> {
        let dir = self.parent()?;
        if proc_fd_available() {
            return Ok(PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())));
        }
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!("no /proc/self/fd: staged writes go by checked path, not by descriptor");
        }
        Ok(self.parent_real.clone())
    }

    /// The entry as such a path: its name in [`Anchor::parent_path`]. A final link there is not
    /// followed by what replaces the entry (rename, link), which is what it is for.
    pub fn entry_path(&self) -> io::Result<PathBuf> {
        let name = self
            .name
            .as_deref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a root is not replaced"))?;
        Ok(self.parent_path()?.join(OsStr::from_bytes(name.to_bytes())))
    }
}

fn proc_fd_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

fn link_error(err: io::Error) -> io::Error {
    if err.raw_os_error() == Some(libc::ELOOP) {
        changed_to_link()
    } else {
        err
    }
}

/// `core::entry`'s refusal of what is neither a file, a directory nor a link, in its words.
fn refuse_special(file_type: std::fs::FileType) -> Result<(), OpenError> {
    match special_kind(&file_type) {
        Some(kind) => Err(OpenError::NotRegular(format!(
            "is {kind}, not a regular file; only regular files are read"
        ))),
        None => Ok(()),
    }
}

fn make_dir_and_enter(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    match at::mkdir_at(dir, name, 0o777) {
        Ok(()) => {}
        Err(err) if err.raw_os_error() == Some(libc::EEXIST) => {}
        Err(err) => return Err(err),
    }
    let child = at::open_at(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    match at::fd_file_type(child.as_fd())? {
        libc::S_IFDIR => Ok(child),
        libc::S_IFLNK => Err(changed_to_link()),
        _ => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
    }
}

/// `rm -r` of `name` in `dir`, by descriptors: a directory is entered with `O_NOFOLLOW`, so a link
/// swapped in anywhere below is removed as a link, never followed. Entries that vanish meanwhile are
/// no error.
fn remove_tree(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let child = match at::open_at(
        dir,
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    ) {
        Ok(child) => child,
        Err(err) if matches!(err.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
            return ignore_vanished(at::unlink_at(dir, name, 0));
        }
        Err(err) => return ignore_vanished(Err(err)),
    };
    for entry in at::read_dir(child.as_fd())? {
        let entry_name = CString::new(entry.name.into_vec()).map_err(io::Error::other)?;
        if entry.kind == Kind::Dir {
            remove_tree(child.as_fd(), &entry_name)?;
        } else {
            match at::unlink_at(child.as_fd(), &entry_name, 0) {
                Err(err) if err.raw_os_error() == Some(libc::EISDIR) => {
                    remove_tree(child.as_fd(), &entry_name)?;
                }
                other => ignore_vanished(other)?,
            }
        }
    }
    ignore_vanished(at::unlink_at(dir, name, libc::AT_REMOVEDIR))
}

fn ignore_vanished(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl Dir {
    /// A directory by path, following links.
    #[cfg(test)]
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)?
            .into();
        Ok(Dir { fd })
    }

    /// Its entries, unsorted, `.` and `..` left out.
    pub fn entries(&self) -> io::Result<Vec<at::DirEntry>> {
        at::read_dir(self.fd.as_fd())
    }

    /// A subdirectory, entered only if it is a directory itself (never through a link).
    pub fn open_child(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = at::open_at(
            self.fd.as_fd(),
            &at::c_name(name)?,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(link_error)?;
        Ok(Dir { fd })
    }

    /// An entry opened for reading if it is a regular file: never through a link, and a FIFO or a
    /// device swapped in is refused, not opened (so the read cannot block).
    pub fn open_file(&self, name: &OsStr) -> Result<File, OpenError> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW;
        let fd = at::open_at(
            self.fd.as_fd(),
            &at::c_name(name).map_err(OpenError::Io)?,
            flags,
            0,
        )
        .map_err(|err| OpenError::Io(link_error(err)))?;
        let file = File::from(fd);
        let file_type = file.metadata().map_err(OpenError::Io)?.file_type();
        refuse_special(file_type)?;
        if file_type.is_dir() {
            return Err(OpenError::Io(io::Error::from_raw_os_error(libc::EISDIR)));
        }
        Ok(file)
    }

    /// `lstat` of an entry.
    pub fn child_metadata(&self, name: &OsStr) -> io::Result<Metadata> {
        at::metadata_at(self.fd.as_fd(), Some(&at::c_name(name)?))
    }

    /// Its entries' names, unsorted, `.` and `..` left out: for walks that `lstat` every entry anyway
    /// ([`Dir::child_stat`]), with no per-entry type lookup.
    pub fn entry_names(&self) -> io::Result<Vec<EntryName>> {
        Ok(at::read_dir_names(self.fd.as_fd())?
            .into_iter()
            .map(EntryName)
            .collect())
    }

    /// `lstat` of an entry as the kernel's `stat`: one `fstatat` relative to the held descriptor (a
    /// link is described as itself), where [`Dir::child_metadata`] opens the entry to `fstat` it.
    pub fn child_stat(&self, name: &EntryName) -> io::Result<libc::stat> {
        at::lstat_at(self.fd.as_fd(), &name.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ws, outside) = (base.join("ws"), base.join("outside"));
        std::fs::create_dir_all(ws.join("a/deeper")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("a/secret.txt"), "inside").unwrap();
        std::fs::write(ws.join("file.txt"), "file").unwrap();
        std::fs::write(outside.join("secret.txt"), "OUTSIDE").unwrap();
        std::fs::write(outside.join("victim.txt"), "OUTSIDE").unwrap();
        symlink(&outside, ws.join("out")).unwrap();
        symlink("a", ws.join("in")).unwrap();
        Fixture {
            _dir: dir,
            ws,
            outside,
        }
    }

    /// Runs `test` once with `openat2` (where the kernel has it) and once with the component walk.
    fn both_ways(test: impl Fn()) {
        for walk in [false, true] {
            FORCE_WALK.with(|force| force.set(walk));
            test();
        }
        FORCE_WALK.with(|force| force.set(false));
    }

    fn read(held: &Anchor) -> String {
        let mut text = String::new();
        let mut file = held.open_for_reading().unwrap();
        std::io::Read::read_to_string(&mut file, &mut text).unwrap();
        text
    }

    #[test]
    fn openat2_refuses_a_link_on_the_way() {
        let f = fixture();
        let root = Dir::open(&f.ws).unwrap();
        match openat2(root.fd.as_fd(), c"a/deeper") {
            Ok(_) => {}
            // This kernel or its seccomp profile has no openat2: the walk is what runs here.
            Err(err) if matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => return,
            Err(err) => panic!("{err}"),
        }
        for through_link in [c"out", c"in/deeper", c"../ws/a"] {
            assert!(
                openat2(root.fd.as_fd(), through_link).is_err(),
                "{through_link:?}"
            );
        }
    }

    #[test]
    fn held_paths_act_inside_and_links_on_the_way_are_changes() {
        both_ways(|| {
            let f = fixture();
            let held = anchor(&f.ws, Path::new("a/secret.txt"), true).unwrap();
            assert_eq!(read(&held), "inside");
            let root = anchor(&f.ws, Path::new(""), true).unwrap();
            assert!(root.is_root() && root.exists());
            assert_eq!(
                root.open_dir().unwrap().entries().unwrap().len(),
                4,
                "a, file.txt, out, in"
            );
            // A checked path never has a link on the way: one there now means it changed.
            for through_link in ["out/secret.txt", "in/secret.txt", "in"] {
                assert!(
                    matches!(
                        anchor(&f.ws, Path::new(through_link), true),
                        Err(Anchoring::Changed)
                    ),
                    "{through_link}"
                );
            }
            // As an entry, a final link is itself.
            let link = anchor(&f.ws, Path::new("out"), false).unwrap();
            assert!(link.metadata().unwrap().file_type().is_symlink());
        });
    }

    #[test]
    fn a_missing_way_is_created_by_descriptor_and_a_file_on_it_refused() {
        both_ways(|| {
            let f = fixture();
            let mut held = anchor(&f.ws, Path::new("a/new/deeper/x.txt"), true).unwrap();
            assert!(!held.has_parent() && !held.exists());
            assert_eq!(held.metadata().unwrap_err().kind(), io::ErrorKind::NotFound);
            held.create_parents().unwrap();
            assert!(held.has_parent());
            assert!(f.ws.join("a/new/deeper").is_dir());
            let mut dir = anchor(&f.ws, Path::new("a/made/here"), true).unwrap();
            assert!(dir.create_dir_all().unwrap());
            assert!(!dir.create_dir_all().unwrap());
            assert!(f.ws.join("a/made/here").is_dir());

            let mut through_file = anchor(&f.ws, Path::new("file.txt/x/y"), true).unwrap();
            assert_eq!(
                through_file.metadata().unwrap_err().raw_os_error(),
                Some(libc::ENOTDIR)
            );
            assert_eq!(
                through_file.create_parents().unwrap_err().raw_os_error(),
                Some(libc::ENOTDIR)
            );
        });
    }

    #[test]
    fn removing_a_tree_removes_links_in_it_and_never_follows_them() {
        both_ways(|| {
            let f = fixture();
            std::fs::create_dir_all(f.ws.join("tree/sub")).unwrap();
            std::fs::write(f.ws.join("tree/sub/f"), "x").unwrap();
            symlink(&f.outside, f.ws.join("tree/sub/out")).unwrap();
            symlink(f.outside.join("secret.txt"), f.ws.join("tree/out-file")).unwrap();
            anchor(&f.ws, Path::new("tree"), false)
                .unwrap()
                .remove()
                .unwrap();
            assert!(!f.ws.join("tree").exists());
            assert_eq!(
                std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
                "OUTSIDE"
            );
            assert!(f.outside.join("victim.txt").exists());
        });
    }

    #[test]
    fn renames_move_entries_themselves_and_can_refuse_to_replace() {
        both_ways(|| {
            let f = fixture();
            let link = anchor(&f.ws, Path::new("out"), false).unwrap();
            let mut to = anchor(&f.ws, Path::new("a/new/out-moved"), false).unwrap();
            to.create_parents().unwrap();
            link.rename_to(&to, true).unwrap();
            assert!(f.ws.join("a/new/out-moved").is_symlink());
            let file = anchor(&f.ws, Path::new("file.txt"), false).unwrap();
            let taken = anchor(&f.ws, Path::new("a/secret.txt"), false).unwrap();
            assert_eq!(
                file.rename_to(&taken, true).unwrap_err().raw_os_error(),
                Some(libc::EEXIST)
            );
            file.rename_to(&taken, false).unwrap();
            assert_eq!(
                std::fs::read_to_string(f.ws.join("a/secret.txt")).unwrap(),
                "file"
            );
        });
    }

    /// Swaps two names atomically, over and over, until told to stop.
    fn swapper(
        a: PathBuf,
        b: PathBuf,
        stop: std::sync::Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let a_c = CString::new(a.as_os_str().as_bytes()).unwrap();
            let b_c = CString::new(b.as_os_str().as_bytes()).unwrap();
            let started = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed().as_secs() < 10 {
                // SAFETY: both are valid NUL-terminated paths that outlive the call.
                let swapped = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a_c.as_ptr(),
                        libc::AT_FDCWD,
                        b_c.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(swapped, 0, "{}", io::Error::last_os_error());
            }
        })
    }

    #[test]
    fn a_directory_swapped_for_a_link_out_is_never_followed() {
        both_ways(|| {
            let f = fixture();
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let swapping = swapper(
                f.ws.join("a"),
                f.ws.join("out"),
                std::sync::Arc::clone(&stop),
            );
            let (mut held_reads, mut changes) = (0, 0);
            for _ in 0..2_000 {
                match anchor(&f.ws, Path::new("a/secret.txt"), true) {
                    Ok(held) => {
                        if let Ok(mut file) = held.open_for_reading() {
                            let mut text = String::new();
                            std::io::Read::read_to_string(&mut file, &mut text).unwrap();
                            assert_eq!(text, "inside");
                            held_reads += 1;
                        }
                    }
                    Err(Anchoring::Changed) => changes += 1,
                    Err(Anchoring::Io(err)) => panic!("{err}"),
                }
                if let Ok(mut held) = anchor(&f.ws, Path::new("a/made/x"), true) {
                    let _ = held.create_dir_all();
                }
                if let Ok(held) = anchor(&f.ws, Path::new("a/victim.txt"), false) {
                    let _ = held.remove();
                }
            }
            stop.store(true, Ordering::Relaxed);
            swapping.join().unwrap();
            let mut outside: Vec<_> = std::fs::read_dir(&f.outside)
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            outside.sort();
            assert_eq!(outside, ["secret.txt", "victim.txt"]);
            assert!(
                held_reads > 0 && changes > 0,
                "{held_reads} reads, {changes} changes"
            );
        });
    }
}
