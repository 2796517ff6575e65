//! Confinement of user-given paths to the workspace, resolved for real: `..`, absolute paths, sibling
//! prefixes (`/workspace2`) and symlinks that lead outside are refused. Containment is checked by path
//! components on the symlink-free result, never by string prefix.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::{ApiError, ApiResult};

/// Linux's own limit on symlinks followed in one lookup (ELOOP).
const MAX_SYMLINK_HOPS: usize = 40;

#[derive(Debug, Clone)]
pub struct Workspace {
    /// Absolute, lexically clean root as configured: what paths are reported relative to.
    root: PathBuf,
    /// The same directory with symlinks resolved: what containment is checked against.
    real_root: PathBuf,
}

/// A path inside the workspace, in the two forms the routes need.
#[derive(Debug, Clone)]
pub struct WorkspacePath {
    /// Absolute path as the user addressed it (under the configured root): reported back in entry info.
    pub shown: PathBuf,
    /// Symlink-free path under the real root, possibly not existing yet: the one to operate on.
    pub real: PathBuf,
}

impl Workspace {
    /// Creates the directory if it is missing.
    pub fn open(root: &Path) -> io::Result<Workspace> {
        std::fs::create_dir_all(root)?;
        let absolute = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir()?.join(root)
        };
        let root = normalize_lexically(&absolute);
        let real_root = std::fs::canonicalize(&root)?;
        Ok(Workspace { root, real_root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn real_root(&self) -> &Path {
        &self.real_root
    }

    pub fn is_root(&self, path: &WorkspacePath) -> bool {
        path.real == self.real_root
    }

    /// Blocking: it reads link metadata along the way. Call it from a blocking context.
    pub fn resolve(&self, input: &str) -> ApiResult<WorkspacePath> {
        if input.contains('\0') {
            return Err(ApiError::BadRequest("path contains a NUL byte".into()));
        }
        let requested = Path::new(input);
        let lexical = normalize_lexically(&if requested.is_absolute() {
            requested.to_path_buf()
        } else {
            self.root.join(requested)
        });
        let relative = lexical
            .strip_prefix(&self.root)
            .or_else(|_| lexical.strip_prefix(&self.real_root))
            .map_err(|_| self.escape_error(input))?
            .to_path_buf();
        let real = resolve_symlinks(&self.real_root, &relative)
            .map_err(|err| ApiError::from_io(&err, input))?;
        if !real.starts_with(&self.real_root) {
            return Err(self.escape_error(input));
        }
        let shown = if relative.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(&relative)
        };
        Ok(WorkspacePath { shown, real })
    }

    fn escape_error(&self, input: &str) -> ApiError {
        ApiError::Forbidden(format!(
            "Permission error. Access restricted to {} directory: {input} is outside it",
            self.root.display()
        ))
    }
}

/// Folds `.` and `..` without touching the filesystem; `..` at `/` stays at `/`.
pub(crate) fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `realpath` that tolerates a missing tail: components that exist are resolved (following symlinks,
/// wherever they point), the first missing one and everything after it are appended as given.
pub(crate) fn resolve_symlinks(base: &Path, relative: &Path) -> io::Result<PathBuf> {
    let mut resolved = base.to_path_buf();
    let mut pending: Vec<PathBuf> = relative
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut hops = 0;
    let mut missing = false;
    while let Some(component) = pending.pop() {
        match Path::new(&component).components().next() {
            Some(Component::RootDir) => {
                resolved = PathBuf::from("/");
                continue;
            }
            Some(Component::ParentDir) => {
                resolved.pop();
                continue;
            }
            Some(Component::Normal(_)) => {}
            _ => continue,
        }
        let candidate = resolved.join(&component);
        if missing {
            resolved = candidate;
            continue;
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "too many levels of symbolic links",
                    ));
                }
                let target = std::fs::read_link(&candidate)?;
                pending.extend(
                    target
                        .components()
                        .rev()
                        .map(|c| PathBuf::from(c.as_os_str())),
                );
            }
            Ok(_) => resolved = candidate,
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::NotADirectory =>
            {
                missing = true;
                resolved = candidate;
            }
            Err(err) => return Err(err),
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        workspace: Workspace,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("ws/sub")).unwrap();
        std::fs::create_dir_all(base.join("ws2")).unwrap();
        std::fs::write(base.join("secret.txt"), "secret").unwrap();
        let workspace = Workspace::open(&base.join("ws")).unwrap();
        Fixture {
            _dir: dir,
            base,
            workspace,
        }
    }

    fn forbidden(result: ApiResult<WorkspacePath>) -> bool {
        matches!(result, Err(ApiError::Forbidden(_)))
    }

    #[test]
    fn relative_and_absolute_inside_are_accepted() {
        let f = fixture();
        let ws = f.base.join("ws");
        assert_eq!(
            f.workspace.resolve("sub/a.txt").unwrap().real,
            ws.join("sub/a.txt")
        );
        let absolute = ws.join("sub/./x/../b.txt");
        assert_eq!(
            f.workspace
                .resolve(absolute.to_str().unwrap())
                .unwrap()
                .real,
            ws.join("sub/b.txt")
        );
        assert_eq!(f.workspace.resolve("").unwrap().real, ws);
    }

    #[test]
    fn dot_dot_absolute_and_sibling_prefix_are_refused() {
        let f = fixture();
        assert!(forbidden(f.workspace.resolve("../secret.txt")));
        assert!(forbidden(f.workspace.resolve("sub/../../secret.txt")));
        assert!(forbidden(f.workspace.resolve("/etc/passwd")));
        let sibling = f.base.join("ws2/x");
        assert!(forbidden(f.workspace.resolve(sibling.to_str().unwrap())));
    }

    #[test]
    fn symlinks_out_are_refused_and_symlinks_in_are_followed() {
        let f = fixture();
        let ws = f.base.join("ws");
        symlink(f.base.join("secret.txt"), ws.join("file-out")).unwrap();
        symlink(&f.base, ws.join("dir-out")).unwrap();
        symlink("sub", ws.join("dir-in")).unwrap();
        symlink("../../ws/../secret.txt", ws.join("sub/relative-out")).unwrap();
        assert!(forbidden(f.workspace.resolve("file-out")));
        assert!(forbidden(f.workspace.resolve("dir-out/secret.txt")));
        assert!(forbidden(f.workspace.resolve("dir-out/new-file")));
        assert!(forbidden(f.workspace.resolve("sub/relative-out")));
        assert_eq!(
            f.workspace.resolve("dir-in/new").unwrap().real,
            ws.join("sub/new")
        );
        assert_eq!(
            f.workspace.resolve("dir-in/new").unwrap().shown,
            f.workspace.root().join("dir-in/new")
        );
    }

    #[test]
    fn symlink_loops_are_a_client_error() {
        let f = fixture();
        let ws = f.base.join("ws");
        symlink("loop-b", ws.join("loop-a")).unwrap();
        symlink("loop-a", ws.join("loop-b")).unwrap();
        assert!(matches!(
            f.workspace.resolve("loop-a"),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn nul_byte_is_a_client_error() {
        let f = fixture();
        assert!(matches!(
            f.workspace.resolve("a\0b"),
            Err(ApiError::BadRequest(_))
        ));
    }
}
