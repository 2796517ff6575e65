//! The directories the filesystem tools may touch, and the one check every tool path goes through.
//!
//! The reference server (server-filesystem 2025.3.28) checks containment with a string prefix and, when a
//! symlink leads outside, falls back to accepting the link itself (CVE-2025-53109/53110). Here containment
//! is by path components, on the symlink-free path, for every existing component; only the missing tail of
//! a path is taken as given.

use std::io;
use std::path::{Path, PathBuf};

use crate::workspace::{normalize_lexically, resolve_symlinks};

#[derive(Debug, Clone)]
struct AllowedDir {
    /// Absolute and lexically clean, as configured: what `list_allowed_directories` shows.
    shown: PathBuf,
    /// The same directory with symlinks resolved: what containment is checked against.
    real: PathBuf,
}

#[derive(Debug, Clone)]
pub struct AllowedDirs {
    /// The first is the workspace: relative paths are resolved against it.
    dirs: Vec<AllowedDir>,
}

/// A tool path that passed the confinement check.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Symlink-free and inside an allowed directory (its missing tail, if any, taken as given).
    pub real: PathBuf,
    /// The absolute form of what the caller wrote, for messages.
    pub absolute: PathBuf,
}

impl AllowedDirs {
    /// Every directory must exist. The first is the one relative paths are resolved against.
    pub fn new(dirs: &[PathBuf]) -> io::Result<AllowedDirs> {
        let cwd = std::env::current_dir()?;
        let mut allowed = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let shown = normalize_lexically(&cwd.join(dir));
            let real = std::fs::canonicalize(&shown)
                .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", shown.display())))?;
            if !real.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", shown.display()),
                ));
            }
            allowed.push(AllowedDir { shown, real });
        }
        if allowed.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one allowed directory is needed",
            ));
        }
        Ok(AllowedDirs { dirs: allowed })
    }

    pub fn shown(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|dir| dir.shown.as_path())
    }

    pub fn is_allowed_root(&self, real: &Path) -> bool {
        self.dirs.iter().any(|dir| dir.real == real)
    }

    /// Blocking (it reads link metadata). Accepts `~`, absolute paths and paths relative to the
    /// workspace; refuses anything whose real location is outside every allowed directory.
    pub fn check(&self, input: &str) -> Result<Checked, String> {
        if input.contains('\0') {
            return Err("path contains a NUL byte".into());
        }
        let expanded = expand_home(input);
        let absolute = normalize_lexically(&self.dirs[0].shown.join(expanded));
        let Some((dir, relative)) = self.dirs.iter().find_map(|dir| {
            absolute
                .strip_prefix(&dir.shown)
                .or_else(|_| absolute.strip_prefix(&dir.real))
                .ok()
                .map(|relative| (dir, relative))
        }) else {
            return Err(self.denied(&absolute));
        };
        let real = resolve_symlinks(&dir.real, relative)
            .map_err(|err| format!("{err}: {}", absolute.display()))?;
        if !self.dirs.iter().any(|dir| real.starts_with(&dir.real)) {
            return Err(self.denied(&absolute));
        }
        Ok(Checked { real, absolute })
    }

    /// As `check`, and the path must exist or at least its parent must: the reference's rule for every
    /// tool but `create_directory`.
    pub fn check_with_parent(&self, input: &str) -> Result<Checked, String> {
        let checked = self.check(input)?;
        if checked.real.symlink_metadata().is_ok() {
            return Ok(checked);
        }
        let parent_exists = checked.real.parent().is_some_and(Path::is_dir);
        if parent_exists {
            Ok(checked)
        } else {
            let parent = checked.absolute.parent().unwrap_or(Path::new("/"));
            Err(format!(
                "Parent directory does not exist: {}",
                parent.display()
            ))
        }
    }

    fn denied(&self, absolute: &Path) -> String {
        let dirs: Vec<String> = self
            .dirs
            .iter()
            .map(|dir| dir.shown.display().to_string())
            .collect();
        format!(
            "Access denied - path outside allowed directories: {} not in {}",
            absolute.display(),
            dirs.join(", ")
        )
    }
}

fn expand_home(input: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    match input.strip_prefix('~') {
        Some("") => home().unwrap_or_else(|| PathBuf::from(input)),
        Some(rest) if rest.starts_with('/') => match home() {
            Some(home) => home.join(rest.trim_start_matches('/')),
            None => PathBuf::from(input),
        },
        _ => PathBuf::from(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        allowed: AllowedDirs,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for sub in ["ws/sub", "ws2", "extra"] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        std::fs::write(base.join("ws2/secret.txt"), "secret").unwrap();
        let allowed = AllowedDirs::new(&[base.join("ws"), base.join("extra")]).unwrap();
        Fixture {
            _dir: dir,
            base,
            allowed,
        }
    }

    fn denied(result: Result<Checked, String>) -> bool {
        matches!(result, Err(message) if message.starts_with("Access denied - path outside allowed directories: "))
    }

    #[test]
    fn sibling_prefix_and_symlinks_out_are_denied() {
        let f = fixture();
        let sibling = f.base.join("ws2/secret.txt");
        assert!(denied(f.allowed.check(sibling.to_str().unwrap())));
        assert!(denied(f.allowed.check("../ws2/secret.txt")));
        symlink(&sibling, f.base.join("ws/link")).unwrap();
        symlink(f.base.join("ws2"), f.base.join("ws/dirlink")).unwrap();
        symlink(f.base.join("ws2/new"), f.base.join("ws/dangling")).unwrap();
        assert!(denied(f.allowed.check("link")));
        assert!(denied(f.allowed.check("dirlink/new-file")));
        assert!(denied(f.allowed.check_with_parent("dangling")));
    }

    #[test]
    fn every_allowed_directory_and_links_between_them_are_accepted() {
        let f = fixture();
        let extra = f.base.join("extra/file");
        assert_eq!(
            f.allowed.check(extra.to_str().unwrap()).unwrap().real,
            extra
        );
        symlink(f.base.join("extra"), f.base.join("ws/to-extra")).unwrap();
        assert_eq!(f.allowed.check("to-extra/file").unwrap().real, extra);
        assert_eq!(
            f.allowed.check("sub/../sub/x").unwrap().real,
            f.base.join("ws/sub/x")
        );
    }

    #[test]
    fn a_missing_parent_is_named() {
        let f = fixture();
        let message = f.allowed.check_with_parent("no/such/file").unwrap_err();
        assert_eq!(
            message,
            format!(
                "Parent directory does not exist: {}",
                f.base.join("ws/no/such").display()
            )
        );
        assert!(f.allowed.check("no/such/file").is_ok());
    }
}
