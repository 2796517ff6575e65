//! Paths as agent-sandbox's clients send them, made workspace paths for `core::confine`.
//!
//! Both reference servers re-root what they are given: sandboxd joins the path to its root (so
//! `/etc/x` is `<root>/etc/x`) after taking off the root itself when the path starts with it, and the
//! python-runtime strips leading slashes. The SDK leans on it: it sends `/workspace/x` (sandboxd's
//! default root) meaning `<root>/x`, and `%2F`-joined relative paths otherwise. So: a path under the
//! configured root is taken as it is; `/workspace` and what is under it stand for the root wherever the
//! root is (tests, `make run`); any other absolute path is re-rooted. What is left, `..` and symlinks
//! that lead outside, is refused by `core::confine` like on every route (403).

use std::path::{Component, Path};

/// sandboxd's default root, which the SDK and the KEP's examples write into paths and `cwd`s.
const SANDBOXD_ROOT: &str = "/workspace";

/// `input` as a workspace path for [`crate::core::confine::Workspace`]: relative to the root, or
/// absolute inside it.
pub fn workspace_path(root: &Path, input: &str) -> String {
    let path = Path::new(input);
    if !path.is_absolute() {
        return input.to_owned();
    }
    if path.starts_with(root) {
        return input.to_owned();
    }
    let rest = path.strip_prefix(SANDBOXD_ROOT).unwrap_or(path);
    let relative: Vec<String> = rest
        .components()
        .filter_map(|component| match component {
            Component::RootDir | Component::Prefix(_) => None,
            other => Some(other.as_os_str().to_string_lossy().into_owned()),
        })
        .collect();
    relative.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_alias_relative_and_re_rooted_paths() {
        let root = Path::new("/srv/ws");
        assert_eq!(workspace_path(root, "a/b.txt"), "a/b.txt");
        assert_eq!(workspace_path(root, "/srv/ws/a"), "/srv/ws/a");
        assert_eq!(workspace_path(root, "/workspace/a/b"), "a/b");
        assert_eq!(workspace_path(root, "/workspace"), "");
        assert_eq!(workspace_path(root, "/etc/passwd"), "etc/passwd");
        assert_eq!(workspace_path(root, "/workspace2/x"), "workspace2/x");
        // `..` is left for the confinement to refuse.
        assert_eq!(workspace_path(root, "../x"), "../x");
        assert_eq!(workspace_path(root, "/workspace/../x"), "../x");
        let workspace = Path::new("/workspace");
        assert_eq!(workspace_path(workspace, "/workspace/a"), "/workspace/a");
    }
}
