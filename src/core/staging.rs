//! Atomic file writes. The body streams into an unnamed file (`O_TMPFILE`) in the target's directory, which
//! is given a name only once the whole body arrived: linked in under the target's own name when there is
//! none yet, else under a temporary name renamed over the target. So no partial file is ever visible (to
//! `/watch`, to a concurrent commit), a failed or aborted upload leaves the old content intact, and a
//! crash (even SIGKILL) leaves nothing behind, because an unnamed file vanishes with its descriptor.
//!
//! Filesystems without `O_TMPFILE` (and systems without `/proc`, which the link goes through) fall back
//! to a named `.boxd-upload-*.tmp` file beside the target, removed on failure.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::core::error::{ApiError, ApiResult};

const WRITE_BUFFER: usize = 1024 * 1024;
/// Chunks in flight between the request body and the writer thread: bounds memory per upload.
const WRITE_QUEUE_CHUNKS: usize = 64;
/// Attempts at a fresh random temporary name before giving up (each collision is 2^-64 likely).
const NAME_ATTEMPTS: usize = 8;

/// Content written but not yet in place.
pub struct StagedFile {
    file: File,
    /// The name it has while staged, when it could not be created unnamed: removed unless persisted.
    named: Option<PathBuf>,
    /// Permission bits set by the writer ([`StagedFile::set_mode`]): kept instead of a replaced file's.
    mode_set: bool,
}

impl StagedFile {
    /// Blocking. An empty staged file in `dir` (which must exist), unnamed where the filesystem allows.
    fn create(dir: &Path) -> std::io::Result<StagedFile> {
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        match unnamed {
            Ok(file) => Ok(StagedFile {
                file,
                named: None,
                mode_set: false,
            }),
            Err(err) if tmpfile_unsupported(&err) => {
                tracing::debug!(dir = %dir.display(), %err, "no O_TMPFILE here; staging under a name");
                StagedFile::create_named(dir)
            }
            Err(err) => Err(err),
        }
    }

    fn create_named(dir: &Path) -> std::io::Result<StagedFile> {
        let (file, path) = create_named(dir)?;
        Ok(StagedFile {
            file,
            named: Some(path),
            mode_set: false,
        })
    }

    /// Blocking. Gives the file these permission bits (not masked by the umask), also when it
    /// replaces a file with others.
    pub fn set_mode(&mut self, mode: u32) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        self.file
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
        self.mode_set = true;
        Ok(())
    }

    /// Blocking. Puts the content at `target` (whose parent must exist) in one step, keeping the mode of
    /// a file it replaces unless [`StagedFile::set_mode`] chose one.
    pub fn persist(mut self, target: &Path) -> std::io::Result<()> {
        if !self.mode_set
            && let Ok(existing) = std::fs::metadata(target)
            && existing.is_file()
        {
            let _ = self.file.set_permissions(existing.permissions());
        }
        let dir = target.parent().unwrap_or(Path::new("/"));
        let temporary = match self.named.take() {
            Some(path) if path.parent() == Some(dir) => path,
            Some(path) => {
                let _ = std::fs::remove_file(&path);
                self.copy_to_named(dir)?
            }
            None => match link_unnamed(&self.file, target) {
                Ok(()) => return Ok(()),
                Err(err) if err.raw_os_error() == Some(libc::EEXIST) => {
                    self.link_under_temporary_name(dir)?
                }
                Err(err) => {
                    tracing::debug!(%err, "cannot link the staged file in; copying it");
                    self.copy_to_named(dir)?
                }
            },
        };
        let Err(err) = std::fs::rename(&temporary, target) else {
            return Ok(());
        };
        let _ = std::fs::remove_file(&temporary);
        if err.kind() == std::io::ErrorKind::CrossesDevices {
            // The target is a mount point of its own (a bind-mounted file): only writable in place.
            return overwrite_in_place(&mut self.file, target);
        }
        Err(err)
    }

    /// The unnamed file under a fresh temporary name in `dir`.
    fn link_under_temporary_name(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let mut last = None;
        for _ in 0..NAME_ATTEMPTS {
            let path = staging_name(dir);
            match link_unnamed(&self.file, &path) {
                Ok(()) => return Ok(path),
                Err(err) if err.raw_os_error() == Some(libc::EEXIST) => last = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST)))
    }

    /// A named copy in `dir`: for when the staged file lives on another filesystem than the target, or
    /// cannot be linked in.
    fn copy_to_named(&mut self, dir: &Path) -> std::io::Result<PathBuf> {
        let (mut copy, path) = create_named(dir)?;
        let copied = (|| {
            self.file.rewind()?;
            std::io::copy(&mut self.file, &mut copy)?;
            copy.set_permissions(self.file.metadata()?.permissions())
        })();
        match copied {
            Ok(()) => Ok(path),
            Err(err) => {
                let _ = std::fs::remove_file(&path);
                Err(err)
            }
        }
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if let Some(path) = self.named.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Kernels and filesystems without `O_TMPFILE` say so in one of these ways.
fn tmpfile_unsupported(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOSYS)
    )
}

const STAGING_PREFIX: &str = ".boxd-upload-";
const STAGING_SUFFIX: &str = ".tmp";

fn staging_name(dir: &Path) -> PathBuf {
    let mut random = [0u8; 8];
    let _ = getrandom::fill(&mut random);
    dir.join(format!(
        "{STAGING_PREFIX}{}{STAGING_SUFFIX}",
        hex::encode(random)
    ))
}

/// An upload's name while it is being put in place: listings, the filesystem tools, `/watch` and git
/// leave such files out, as they are not the user's.
pub fn is_staging_name(name: &std::ffi::OsStr) -> bool {
    let name = name.as_bytes();
    name.starts_with(STAGING_PREFIX.as_bytes()) && name.ends_with(STAGING_SUFFIX.as_bytes())
}

fn create_named(dir: &Path) -> std::io::Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        let path = staging_name(dir);
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST)))
}

/// Gives an `O_TMPFILE` file the name `at`; fails with EEXIST if the name is taken (never replaces).
/// `AT_EMPTY_PATH` would need CAP_DAC_READ_SEARCH; the `/proc` link works for anyone.
fn link_unnamed(file: &File, at: &Path) -> std::io::Result<()> {
    let source = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let destination = std::ffi::CString::new(at.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths that outlive the call; the descriptor is open.
    let result = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source.as_ptr(),
            libc::AT_FDCWD,
            destination.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Not atomic, but never shows an empty file: the old bytes are overwritten, then the rest cut off.
fn overwrite_in_place(staged: &mut File, target: &Path) -> std::io::Result<()> {
    let mut out = std::fs::OpenOptions::new().write(true).open(target)?;
    staged.rewind()?;
    let length = std::io::copy(staged, &mut out)?;
    out.set_len(length)?;
    out.flush()
}

/// Blocking. Writes `content` into a new staged file in `dir` (which must exist).
pub fn stage_bytes(dir: &Path, content: &[u8]) -> std::io::Result<StagedFile> {
    let mut staged = StagedFile::create(dir)?;
    staged.file.write_all(content)?;
    Ok(staged)
}

/// Streams `body` into a new staged file in `dir` (which must exist). A blocking writer thread takes the
/// body's chunks as they arrive (no copies), so network reads and disk writes overlap.
pub async fn stage<S, E>(dir: &Path, body: S, what: &str) -> ApiResult<StagedFile>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::fmt::Display,
{
    let staged = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || StagedFile::create(&dir))
            .await?
            .map_err(|err| ApiError::from_io(&err, what))?
    };
    let (chunks, mut received) = tokio::sync::mpsc::channel::<Bytes>(WRITE_QUEUE_CHUNKS);
    let writer = tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::with_capacity(WRITE_BUFFER, &staged.file);
        while let Some(chunk) = received.blocking_recv() {
            out.write_all(&chunk)?;
        }
        out.flush()?;
        drop(out);
        Ok::<_, std::io::Error>(staged)
    });
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|err| ApiError::BadRequest(format!("upload of {what} interrupted: {err}")))?;
        if chunks.send(chunk).await.is_err() {
            break; // the writer stopped on an error, reported below
        }
    }
    drop(chunks);
    writer.await?.map_err(|err| ApiError::from_io(&err, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn staged_content_is_invisible_until_persisted_and_replaces_keeping_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t.txt");
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let staged = stage_bytes(dir.path(), b"new").unwrap();
        assert_eq!(names(dir.path()), ["t.txt"], "staging must not be visible");
        staged.persist(&target).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(names(dir.path()), ["t.txt"]);

        let fresh = dir.path().join("fresh.txt");
        stage_bytes(dir.path(), b"x")
            .unwrap()
            .persist(&fresh)
            .unwrap();
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "x");
        assert_eq!(names(dir.path()), ["fresh.txt", "t.txt"]);
    }

    #[test]
    fn staged_in_one_directory_and_placed_in_another() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let target = dir.path().join("sub/placed");
        stage_bytes(dir.path(), b"moved")
            .unwrap()
            .persist(&target)
            .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "moved");
        assert_eq!(names(dir.path()), ["sub"]);
    }

    #[test]
    fn the_named_fallback_persists_here_or_elsewhere_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("t"), "old").unwrap();
        let mut staged = StagedFile::create_named(dir.path()).unwrap();
        staged.file.write_all(b"new").unwrap();
        assert_eq!(names(dir.path()).len(), 3, "the fallback is named");
        staged.persist(&dir.path().join("t")).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("t")).unwrap(),
            "new"
        );
        let mut staged = StagedFile::create_named(dir.path()).unwrap();
        staged.file.write_all(b"there").unwrap();
        staged.persist(&dir.path().join("sub/u")).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/u")).unwrap(),
            "there"
        );
        assert_eq!(names(dir.path()), ["sub", "t"]);
        assert_eq!(names(&dir.path().join("sub")), ["u"]);
        drop(StagedFile::create_named(dir.path()).unwrap());
        assert_eq!(names(dir.path()), ["sub", "t"]);
    }

    #[test]
    fn dropped_without_persisting_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        drop(stage_bytes(dir.path(), b"gone").unwrap());
        assert!(names(dir.path()).is_empty());
    }
}
