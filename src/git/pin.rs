//! Opens the workspace repository so that nothing inside it can point git's reads or writes outside the
//! workspace. `.git/config` and everything else under `.git` is writable through the workspace routes and
//! the filesystem tools, so whatever git would follow from there (a `gitdir:` file, `core.worktree`,
//! config includes, `core.excludesFile`, alternates, `commondir`, symlinks) is attacker-chosen input.
//!
//! Policy: git works on the workspace's own `.git` directory and on the workspace as its work tree, always.
//! `core.worktree` is overridden rather than refused: its value changes nothing for boxd (the routes are
//! defined on the workspace), a repository that names its own directory there keeps working, and the
//! override holds even if the config changes between a check and libgit2's read of it. Everything else
//! that would make libgit2 read another file is refused with 403, naming the setting, because libgit2 has
//! no switch to ignore it. Global, XDG and system config are never read (`configure_library`).
//!
//! The checks run before libgit2 opens anything (so a FIFO named by an include is never opened) and are
//! repeated on what libgit2 actually resolved; a swap between the two is the same check-then-use race the
//! workspace routes document.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, Repository, RepositoryOpenFlags};

use crate::core::error::{ApiError, ApiResult};

/// A repository config beyond this is refused rather than scanned: git writes a few hundred bytes.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// Directory entries looked at per directory when checking symlinks; a `.git` level has a few hundred.
const MAX_ENTRIES_CHECKED: usize = 10_000;

fn refuse(reason: impl std::fmt::Display) -> ApiError {
    ApiError::Forbidden(format!(
        "the workspace repository is refused: {reason}; boxd runs git only on the workspace's own .git \
         directory and never reads or writes outside the workspace"
    ))
}

/// Blocking. The repository of `workdir` (its real, canonical root), created when there is none.
pub fn open(workdir: &Path) -> ApiResult<Repository> {
    let dotgit = workdir.join(".git");
    match std::fs::symlink_metadata(&dotgit) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(workdir = %workdir.display(), "workspace is not a git repository; initialising one");
            initialise(workdir)?;
        }
        Err(err) => return Err(ApiError::from_io(&err, ".git")),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(refuse(".git is a symbolic link"));
        }
        Ok(meta) if meta.is_file() => {
            return Err(refuse(
                ".git is a file (a `gitdir:` pointer to a repository elsewhere, as a linked worktree or a \
                 submodule has)",
            ));
        }
        Ok(meta) if !meta.is_dir() => return Err(refuse(".git is not a directory")),
        Ok(_) => {}
    }
    check_git_dir(workdir, &dotgit)?;
    let repo = match open_git_dir(&dotgit) {
        Err(err) if err.code() == ErrorCode::NotFound => {
            // An empty or partial `.git` directory: `git init` completes it, as the watcher always did.
            initialise(workdir)?;
            open_git_dir(&dotgit)
        }
        other => other,
    }
    .map_err(|err| {
        ApiError::Conflict(format!(
            "cannot open the workspace repository: {}",
            err.message()
        ))
    })?;
    check_resolved(&dotgit, &repo)?;
    repo.set_workdir(workdir, false)?;
    check_config(&repo)?;
    Ok(repo)
}

fn initialise(workdir: &Path) -> ApiResult<()> {
    Repository::init(workdir).map(drop).map_err(|err| {
        ApiError::Conflict(format!(
            "cannot initialise a repository in the workspace: {}",
            err.message()
        ))
    })
}

/// Opens the directory itself (no search upwards, no `.git` appended, so a `.git` file is never read) and
/// as bare, so libgit2 does not read `core.worktree`; the caller then sets the work tree.
fn open_git_dir(dotgit: &Path) -> Result<Repository, git2::Error> {
    Repository::open_ext(
        dotgit,
        RepositoryOpenFlags::NO_SEARCH | RepositoryOpenFlags::NO_DOTGIT | RepositoryOpenFlags::BARE,
        std::iter::empty::<&OsStr>(),
    )
}

/// What libgit2 would follow out of `.git` before it reads any of it.
fn check_git_dir(workdir: &Path, dotgit: &Path) -> ApiResult<()> {
    if exists_no_follow(&dotgit.join("commondir"))? {
        return Err(refuse(
            ".git/commondir exists: it points git at another repository's directory",
        ));
    }
    if exists_no_follow(&dotgit.join("objects/info/alternates"))? {
        return Err(refuse(
            ".git/objects/info/alternates exists: git would read objects from other repositories",
        ));
    }
    for dir in ["", "info", "objects", "objects/info", "refs"] {
        check_symlinks(workdir, &dotgit.join(dir), dir)?;
    }
    for name in ["config", "config.worktree"] {
        let text = read_config_file(&dotgit.join(name), name)?;
        if let Some(section) = text.as_deref().and_then(include_section) {
            return Err(refuse(format!(
                ".git/{name} has an [{section}] section, which would make git read another file; \
                 remove it"
            )));
        }
    }
    Ok(())
}

fn exists_no_follow(path: &Path) -> ApiResult<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(ApiError::from_io(&err, &path.display().to_string())),
    }
}

/// Refuses a symlink directly in `dir` whose target is outside the workspace (or dangling: it could be
/// created outside later).
fn check_symlinks(workdir: &Path, dir: &Path, label: &str) -> ApiResult<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(ApiError::from_io(&err, &format!(".git/{label}"))),
    };
    for entry in entries.take(MAX_ENTRIES_CHECKED) {
        let Ok(entry) = entry else { continue };
        let is_symlink = entry
            .file_type()
            .map(|kind| kind.is_symlink())
            .unwrap_or(false);
        if !is_symlink {
            continue;
        }
        let inside = std::fs::canonicalize(entry.path())
            .map(|target| target.starts_with(workdir))
            .unwrap_or(false);
        if !inside {
            let name = Path::new(label).join(entry.file_name());
            return Err(refuse(format!(
                ".git/{} is a symbolic link leading outside the workspace",
                name.display()
            )));
        }
    }
    Ok(())
}

/// The text of a config file, without following a symlink or blocking on a FIFO; `None` when absent.
fn read_config_file(path: &Path, name: &str) -> ApiResult<Option<String>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(format!(".git/{name} is a symbolic link")));
        }
        Err(err) => return Err(ApiError::from_io(&err, &format!(".git/{name}"))),
    };
    let meta = file
        .metadata()
        .map_err(|err| ApiError::from_io(&err, &format!(".git/{name}")))?;
    if !meta.is_file() {
        return Err(refuse(format!(".git/{name} is not a regular file")));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| ApiError::from_io(&err, &format!(".git/{name}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(refuse(format!(
            ".git/{name} is larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The first `[include]` or `[includeIf ...]` section header in a git config text. Deliberately broader
/// than git's grammar (any line that starts a section of that name, whatever follows): a false alarm is a
/// clear 403, a miss would be a read outside.
fn include_section(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix('[')?.trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let lower = name.to_ascii_lowercase();
        (lower == "include" || lower == "includeif").then_some(name)
    })
}

/// What libgit2 resolved must be the workspace's own `.git` (`workdir` is canonical, so a `.git` that is
/// a symlink, or was swapped for one after `check_git_dir`, resolves elsewhere).
fn check_resolved(dotgit: &Path, repo: &Repository) -> ApiResult<()> {
    let real = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
    for (what, path) in [
        ("git directory", repo.path()),
        ("common directory", repo.commondir()),
    ] {
        if real(path) != dotgit {
            return Err(refuse(format!(
                "its {what} resolves to {} instead of {}",
                path.display(),
                dotgit.display()
            )));
        }
    }
    Ok(())
}

/// Config keys that make libgit2 read a file named by the value. `core.hooksPath` is not among them:
/// libgit2 runs no hooks. Includes are caught here too when a config changed after `check_git_dir`.
fn check_config(repo: &Repository) -> ApiResult<()> {
    let config = repo.config()?;
    let mut entries = config.entries(None)?;
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.name().unwrap_or_default().to_ascii_lowercase();
        if entry.include_depth() > 0
            || name.starts_with("include.")
            || name.starts_with("includeif.")
        {
            return Err(refuse(format!(
                "its config includes another file ({name}); remove the include"
            )));
        }
        if name == "core.excludesfile" || name == "core.attributesfile" {
            return Err(refuse(format!(
                "its config sets {name}, a file git would read from anywhere; unset it and use \
                 .gitignore / .gitattributes or .git/info/exclude instead"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::include_section;

    #[test]
    fn include_sections_are_found_in_every_spelling() {
        for text in [
            "[include]\n\tpath = /x\n",
            "[core]\n\tbare = false\n  [Include] path = /x\n",
            "[includeIf \"gitdir:/\"]\n\tpath = /x\n",
            "[ INCLUDEIF\"onbranch:main\"]\n",
            "[include.sub]\n",
        ] {
            assert!(include_section(text).is_some(), "{text}");
        }
        for text in [
            "[core]\n\tworktree = /x\n",
            "[includes]\n",
            "[user]\n\tname = [include]\n",
        ] {
            assert!(include_section(text).is_none(), "{text}");
        }
    }
}
