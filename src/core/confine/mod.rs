//! Confinement of user-given paths to a set of roots (the workspace first, then any `--allow-dir`),
//! resolved for real: `..`, absolute paths, sibling prefixes (`/workspace2`) and symlinks that lead outside
//! are refused. Containment is checked by path components on the symlink-free result, never by string
//! prefix. The one type behind both the `/workspace/*` routes and the filesystem tools.
//!
//! Every component but the last is always followed (and must stay inside). The last one is followed for
//! what reads or writes *through* the path ([`Last::Follow`]), and taken as the entry itself, with
//! `lstat`, for what acts on the name (delete, move, exists: [`Last::Entry`]): so deleting `link -> real/`
//! removes the link, and a link that points outside (or nowhere) can still be deleted or moved.
//!
//! The check is by name; what acts on a checked path holds it by descriptors ([`Anchor`], from
//! [`Confinement::anchor`]), so a directory on the way swapped for a link after the check cannot
//! redirect the work.

mod allowed;
mod anchor;
mod at;
pub use allowed::AllowedDirs;
pub use anchor::{Anchor, Dir};
pub use at::Kind;

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::core::error::{ApiError, ApiResult};

/// Linux's own limit on symlinks followed in one lookup (ELOOP).
const MAX_SYMLINK_HOPS: usize = 40;
/// Checks of one path redone because what was checked changed before it could be held: only a
/// directory swapped for a link (and back) again and again outlasts them.
const MAX_ANCHOR_ATTEMPTS: usize = 8;

/// What to do with the final component of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// Follow a final symlink: the path names what the link points to (read, write, list, mkdir).
    Follow,
    /// The final component is the directory entry itself, link or not (delete, move, exists).
    Entry,
}

/// One directory paths may lead into.
#[derive(Debug, Clone)]
pub struct Root {
    /// Absolute, lexically clean, as configured: what paths are reported relative to.
    pub shown: PathBuf,
    /// The same directory with symlinks resolved: what containment is checked against.
    pub real: PathBuf,
}

impl Root {
    /// Blocking. The directory must exist.
    pub fn new(dir: &Path) -> io::Result<Root> {
        let absolute = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()?.join(dir)
        };
        let shown = normalize_lexically(&absolute);
        let real = std::fs::canonicalize(&shown)
            .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", shown.display())))?;
        if !real.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", shown.display()),
            ));
        }
        Ok(Root { shown, real })
    }
}

/// The confinement: a non-empty list of roots, the first being the one relative paths start from.
#[derive(Debug, Clone)]
pub struct Confinement {
    roots: Vec<Root>,
}

/// A path that passed the check.
#[derive(Debug, Clone)]
pub struct Confined {
    /// What the caller wrote, made absolute and lexically clean: for messages.
    pub absolute: PathBuf,
    /// The same path under its root's configured (shown) form: reported back to the caller.
    pub shown: PathBuf,
    /// Inside a root, possibly not existing yet: the one to operate on. Symlink-free, except that under
    /// [`Last::Entry`] the final component is the entry itself and may be a link.
    pub real: PathBuf,
}

/// Why a path was refused. Workspace routes map it to an [`ApiError`]; the filesystem tools word it as
/// the reference server does ([`ConfineError::tool_message`]).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("path contains a NUL byte")]
    NulByte,
    #[error("{} is outside the allowed directories", absolute.display())]
    Outside {
        /// As given, for the workspace routes' message.
        input: String,
        absolute: PathBuf,
        roots: Vec<PathBuf>,
    },
    /// A lookup failed (a loop of links, a permission error on a component).
    #[error("{input}: {source}")]
    Io {
        input: String,
        absolute: PathBuf,
        source: io::Error,
    },
    /// Neither the path nor its parent directory exists (see [`Confinement::require_parent`]).
    #[error("Parent directory does not exist: {}", parent.display())]
    NoParent { parent: PathBuf },
    /// A directory on the way kept being replaced by a link between the check and the open.
    #[error("{} kept changing while it was being resolved (a directory on the way was replaced by a link); try again", absolute.display())]
    Changed { input: String, absolute: PathBuf },
}

impl ConfineError {
    /// The reference server's wording (server-filesystem 2025.3.28), for the filesystem tools.
    pub fn tool_message(&self) -> String {
        match self {
            ConfineError::NulByte
            | ConfineError::NoParent { .. }
            | ConfineError::Changed { .. } => self.to_string(),
            ConfineError::Outside {
                absolute, roots, ..
            } => {
                let roots: Vec<String> = roots
                    .iter()
                    .map(|root| root.display().to_string())
                    .collect();
                format!(
                    "Access denied - path outside allowed directories: {} not in {}",
                    absolute.display(),
                    roots.join(", ")
                )
            }
            ConfineError::Io {
                absolute, source, ..
            } => format!("{source}: {}", absolute.display()),
        }
    }
}

impl From<ConfineError> for ApiError {
    fn from(err: ConfineError) -> ApiError {
        match err {
            ConfineError::NulByte => ApiError::BadRequest(err.to_string()),
            ConfineError::Outside { input, roots, .. } => {
                let roots: Vec<String> = roots
                    .iter()
                    .map(|root| root.display().to_string())
                    .collect();
                ApiError::Forbidden(format!(
                    "Permission error. Access restricted to {} directory: {input} is outside it",
                    roots.join(", ")
                ))
            }
            ConfineError::Io { input, source, .. } => ApiError::from_io(&source, &input),
            ConfineError::NoParent { .. } => ApiError::NotFound(err.to_string()),
            ConfineError::Changed { .. } => ApiError::Conflict(err.to_string()),
        }
    }
}

impl Confinement {
    pub fn new(roots: Vec<Root>) -> io::Result<Confinement> {
        if roots.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one allowed directory is needed",
            ));
        }
        Ok(Confinement { roots })
    }

    pub fn roots(&self) -> &[Root] {
        &self.roots
    }

    /// The first root: relative paths are resolved against it.
    pub fn base(&self) -> &Root {
        &self.roots[0]
    }

    pub fn is_root(&self, real: &Path) -> bool {
        self.roots.iter().any(|root| root.real == real)
    }

    fn contains(&self, real: &Path) -> bool {
        self.roots.iter().any(|root| real.starts_with(&root.real))
    }

    fn outside(&self, input: &str, absolute: &Path) -> ConfineError {
        ConfineError::Outside {
            input: input.to_owned(),
            absolute: absolute.to_path_buf(),
            roots: self.roots.iter().map(|root| root.shown.clone()).collect(),
        }
    }

    /// Blocking. [`Confinement::confine`], then the checked location held by descriptors (see
    /// [`Anchor`]): what acts on the path acts on these, never on the name again. A directory on the
    /// way that turned into a link since the check makes it check again (a few times).
    pub fn anchor(
        &self,
        input: &str,
        path: &Path,
        last: Last,
    ) -> Result<(Confined, Anchor), ConfineError> {
        let mut confined = self.confine(input, path, last)?;
        for _ in 0..MAX_ANCHOR_ATTEMPTS {
            // The deepest root holding it: the fewest components to open.
            let Some((root, relative)) = self
                .roots
                .iter()
                .filter_map(|root| Some((root, confined.real.strip_prefix(&root.real).ok()?)))
                .max_by_key(|(root, _)| root.real.components().count())
            else {
                return Err(self.outside(input, &confined.absolute));
            };
            match anchor::anchor(&root.real, relative, last == Last::Follow) {
                Ok(held) => return Ok((confined, held)),
                Err(anchor::Anchoring::Changed) => {
                    tracing::debug!(
                        input,
                        "a checked path changed before it was held; checking again"
                    );
                }
                Err(anchor::Anchoring::Io(source)) => {
                    return Err(ConfineError::Io {
                        input: input.to_owned(),
                        absolute: confined.absolute,
                        source,
                    });
                }
            }
            confined = self.confine(input, path, last)?;
        }
        tracing::warn!(input, "a path kept changing while it was being resolved");
        Err(ConfineError::Changed {
            input: input.to_owned(),
            absolute: confined.absolute,
        })
    }

    /// Blocking: it reads link metadata along the way. `input` is what the caller wrote (for messages and
    /// the NUL check); `path` is the path it stands for (the same, or with `~` expanded).
    pub fn confine(&self, input: &str, path: &Path, last: Last) -> Result<Confined, ConfineError> {
        if input.contains('\0') {
            return Err(ConfineError::NulByte);
        }
        let absolute = normalize_lexically(&self.base().shown.join(path));
        let outside = || self.outside(input, &absolute);
        let Some((root, relative)) = self.roots.iter().find_map(|root| {
            absolute
                .strip_prefix(&root.shown)
                .or_else(|_| absolute.strip_prefix(&root.real))
                .ok()
                .map(|relative| (root, relative.to_path_buf()))
        }) else {
            return Err(outside());
        };
        let lookup_error = |source: io::Error| ConfineError::Io {
            input: input.to_owned(),
            absolute: absolute.clone(),
            source,
        };
        let real = match (last, relative.file_name(), relative.parent()) {
            (Last::Entry, Some(name), Some(parent)) => {
                let parent = resolve_symlinks(&root.real, parent).map_err(lookup_error)?;
                if !self.contains(&parent) {
                    return Err(outside());
                }
                parent.join(name)
            }
            _ => {
                let real = resolve_symlinks(&root.real, &relative).map_err(lookup_error)?;
                if !self.contains(&real) {
                    return Err(outside());
                }
                real
            }
        };
        let shown = if relative.as_os_str().is_empty() {
            root.shown.clone()
        } else {
            root.shown.join(&relative)
        };
        Ok(Confined {
            absolute,
            shown,
            real,
        })
    }

    /// The reference's rule for every tool but `create_directory`: the entry exists, or at least its
    /// parent directory does (the held parent exists whenever the entry does).
    pub fn require_parent(&self, confined: &Confined, held: &Anchor) -> Result<(), ConfineError> {
        if held.has_parent() {
            return Ok(());
        }
        Err(ConfineError::NoParent {
            parent: confined
                .absolute
                .parent()
                .unwrap_or(Path::new("/"))
                .to_path_buf(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Workspace {
    confinement: Confinement,
}

/// A path inside the workspace, in the two forms the routes need.
#[derive(Debug, Clone)]
pub struct WorkspacePath {
    /// Absolute path as the user addressed it (under the configured root): reported back in entry info.
    pub shown: PathBuf,
    /// Under the real root, possibly not existing yet: the one to operate on. Symlink-free from
    /// [`Workspace::resolve`]; from [`Workspace::resolve_entry`] the final component may be a link.
    pub real: PathBuf,
}

impl From<Confined> for WorkspacePath {
    fn from(confined: Confined) -> WorkspacePath {
        WorkspacePath {
            shown: confined.shown,
            real: confined.real,
        }
    }
}

impl Workspace {
    /// Creates the directory if it is missing.
    pub fn open(root: &Path) -> io::Result<Workspace> {
        std::fs::create_dir_all(root)?;
        Ok(Workspace {
            confinement: Confinement::new(vec![Root::new(root)?])?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.confinement.base().shown
    }

    pub fn real_root(&self) -> &Path {
        &self.confinement.base().real
    }

    /// Blocking: it reads link metadata along the way. Call it from a blocking context. A final symlink is
    /// followed. Only a path, for what names a place (a watch, a working directory) rather than acts on
    /// it: what acts on a path holds it with [`Workspace::locate`].
    pub fn resolve(&self, input: &str) -> ApiResult<WorkspacePath> {
        Ok(self
            .confinement
            .confine(input, Path::new(input), Last::Follow)?
            .into())
    }

    /// Blocking. As [`Workspace::resolve`], and held: what acts on the path acts on the [`Anchor`]
    /// (a final symlink followed: for what reads or writes through the path).
    pub fn locate(&self, input: &str) -> ApiResult<(WorkspacePath, Anchor)> {
        self.locate_as(input, Last::Follow)
    }

    /// Blocking. As [`Workspace::locate`], but a final symlink is the entry itself, wherever it points:
    /// for delete, move and exists.
    pub fn locate_entry(&self, input: &str) -> ApiResult<(WorkspacePath, Anchor)> {
        self.locate_as(input, Last::Entry)
    }

    /// Blocking. As [`Workspace::locate`], with the refusal itself rather than its HTTP answer: for
    /// tools that word refusals as the server they replace does.
    pub fn hold(&self, input: &str) -> Result<(WorkspacePath, Anchor), ConfineError> {
        let (confined, held) = self
            .confinement
            .anchor(input, Path::new(input), Last::Follow)?;
        Ok((confined.into(), held))
    }

    fn locate_as(&self, input: &str, last: Last) -> ApiResult<(WorkspacePath, Anchor)> {
        let (confined, held) = self.confinement.anchor(input, Path::new(input), last)?;
        Ok((confined.into(), held))
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

    fn forbidden<T>(result: ApiResult<T>) -> bool {
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
    fn a_final_link_is_the_entry_itself_and_only_its_parent_is_followed() {
        let f = fixture();
        let ws = f.base.join("ws");
        symlink(f.base.join("secret.txt"), ws.join("file-out")).unwrap();
        symlink(&f.base, ws.join("dir-out")).unwrap();
        symlink("sub", ws.join("dir-in")).unwrap();
        symlink("nowhere", ws.join("sub/dangling")).unwrap();
        assert_eq!(
            f.workspace.locate_entry("file-out").unwrap().0.real,
            ws.join("file-out")
        );
        assert_eq!(
            f.workspace.locate_entry("dir-in").unwrap().0.real,
            ws.join("dir-in")
        );
        assert_eq!(
            f.workspace.locate_entry("dir-in/dangling").unwrap().0.real,
            ws.join("sub/dangling")
        );
        assert_eq!(f.workspace.locate_entry("").unwrap().0.real, ws);
        assert!(forbidden(f.workspace.locate_entry("dir-out/secret.txt")));
        assert!(forbidden(f.workspace.locate_entry("../secret.txt")));
        assert!(forbidden(f.workspace.resolve("file-out")));
    }

    #[test]
    fn several_roots_and_the_reference_wording() {
        let f = fixture();
        let confinement = Confinement::new(vec![
            Root::new(&f.base.join("ws")).unwrap(),
            Root::new(&f.base.join("ws2")).unwrap(),
        ])
        .unwrap();
        let other = f.base.join("ws2/x");
        let confined = confinement.confine("x", &other, Last::Follow).unwrap();
        assert_eq!(confined.real, other);
        let err = confinement
            .confine("../secret.txt", Path::new("../secret.txt"), Last::Entry)
            .unwrap_err();
        assert_eq!(
            err.tool_message(),
            format!(
                "Access denied - path outside allowed directories: {} not in {}, {}",
                f.base.join("secret.txt").display(),
                f.base.join("ws").display(),
                f.base.join("ws2").display()
            )
        );
        assert!(matches!(ApiError::from(err), ApiError::Forbidden(_)));
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
