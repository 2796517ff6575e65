//! The directories the filesystem tools may touch: the workspace's own [`Confinement`] over several roots,
//! with the reference server's wording for refusals.
//!
//! The reference server (server-filesystem 2025.3.28) checks containment with a string prefix and, when a
//! symlink leads outside, falls back to accepting the link itself (CVE-2025-53109/53110). Here containment
//! is by path components, on the symlink-free path, for every existing component; only the missing tail of
//! a path is taken as given, and only `move_file` takes a final link as itself.

use std::io;
use std::path::{Path, PathBuf};

use super::{Anchor, Confined, Confinement, Last, Root};

#[derive(Debug, Clone)]
pub struct AllowedDirs {
    confinement: Confinement,
}

/// A tool path that passed the confinement check.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Inside an allowed directory (its missing tail, if any, taken as given). Symlink-free, except for
    /// the final component of an entry check.
    pub real: PathBuf,
}

impl From<Confined> for Checked {
    fn from(confined: Confined) -> Checked {
        Checked {
            real: confined.real,
        }
    }
}

impl AllowedDirs {
    /// Every directory must exist. The first is the one relative paths are resolved against.
    pub fn new(dirs: &[PathBuf]) -> io::Result<AllowedDirs> {
        let roots = dirs
            .iter()
            .map(|dir| Root::new(dir))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(AllowedDirs {
            confinement: Confinement::new(roots)?,
        })
    }

    pub fn shown(&self) -> impl Iterator<Item = &Path> {
        self.confinement
            .roots()
            .iter()
            .map(|root| root.shown.as_path())
    }

    pub fn is_allowed_root(&self, real: &Path) -> bool {
        self.confinement.is_root(real)
    }

    /// Blocking (it reads link metadata). Accepts `~`, absolute paths and paths relative to the
    /// workspace; refuses anything whose real location is outside every allowed directory. Only the
    /// confinement's own tests use the check alone: a tool holds what it checked ([`Self::open`]).
    #[cfg(test)]
    pub fn check(&self, input: &str) -> Result<Checked, String> {
        self.confinement
            .confine(input, &expand_home(input), Last::Follow)
            .map(Checked::from)
            .map_err(|err| err.tool_message())
    }

    /// As the check above, and held by descriptors ([`Anchor`]): what the tool does, it does on these.
    pub fn open(&self, input: &str) -> Result<(Checked, Anchor), String> {
        self.open_as(input, Last::Follow, false)
    }

    /// As `open`, and the path must exist or at least its parent must: the reference's rule for every
    /// tool but `create_directory`.
    pub fn open_with_parent(&self, input: &str) -> Result<(Checked, Anchor), String> {
        self.open_as(input, Last::Follow, true)
    }

    /// As `open_with_parent`, but a final symlink is the link itself, wherever it points: for
    /// `move_file`, which renames the entry it names.
    pub fn open_entry_with_parent(&self, input: &str) -> Result<(Checked, Anchor), String> {
        self.open_as(input, Last::Entry, true)
    }

    fn open_as(&self, input: &str, last: Last, parent: bool) -> Result<(Checked, Anchor), String> {
        let (confined, held) = self
            .confinement
            .anchor(input, &expand_home(input), last)
            .map_err(|err| err.tool_message())?;
        if parent {
            self.confinement
                .require_parent(&confined, &held)
                .map_err(|err| err.tool_message())?;
        }
        Ok((confined.into(), held))
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

    fn denied<T>(result: Result<T, String>) -> bool {
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
        assert!(denied(f.allowed.open_with_parent("dangling")));
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
    fn an_entry_check_takes_a_final_link_as_itself() {
        let f = fixture();
        symlink(f.base.join("ws2/secret.txt"), f.base.join("ws/link")).unwrap();
        symlink(f.base.join("ws2/new"), f.base.join("ws/dangling")).unwrap();
        assert_eq!(
            f.allowed.open_entry_with_parent("link").unwrap().0.real,
            f.base.join("ws/link")
        );
        assert_eq!(
            f.allowed.open_entry_with_parent("dangling").unwrap().0.real,
            f.base.join("ws/dangling")
        );
        symlink(f.base.join("ws2"), f.base.join("ws/dirlink")).unwrap();
        assert!(denied(
            f.allowed.open_entry_with_parent("dirlink/secret.txt")
        ));
    }

    #[test]
    fn a_missing_parent_is_named() {
        let f = fixture();
        let message = f.allowed.open_with_parent("no/such/file").unwrap_err();
        assert_eq!(
            message,
            format!(
                "Parent directory does not exist: {}",
                f.base.join("ws/no/such").display()
            )
        );
        assert!(f.allowed.check("no/such/file").is_ok());
        assert!(f.allowed.open("no/such/file").is_ok());
    }
}
