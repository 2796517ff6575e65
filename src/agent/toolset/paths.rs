//! The reference's path policy and its words (`resolve_path`, `_fs_reason` in the SDK's
//! `agent_toolset.py`): a path is resolved against the workspace, `..` collapsed and every symlink
//! followed, and refused when it lands outside. The check is boxd's own (`core::confine`, which then
//! holds the place by descriptors); only the messages are the reference's.

use std::io;

use crate::core::confine::{Anchor, ConfineError, Workspace, WorkspacePath};

/// A path the policy let through, held.
pub struct Resolved {
    pub path: WorkspacePath,
    pub held: Anchor,
}

/// Blocking. `input` resolved as the reference's `resolve_path` does, or its refusal (to be put after
/// the tool's name, `read: ...`).
pub fn resolve(workspace: &Workspace, input: &str) -> Result<Resolved, String> {
    match workspace.hold(input) {
        Ok((path, held)) => Ok(Resolved { path, held }),
        Err(ConfineError::Outside { .. }) => Err(format!(
            "path {} is outside the session's working directory",
            python_repr(input)
        )),
        Err(ConfineError::NulByte) => Err("embedded null byte".to_owned()),
        Err(ConfineError::Io { source, .. }) => {
            Err(format!("path {}: {}", python_repr(input), reason(&source)))
        }
        Err(err @ (ConfineError::NoParent { .. } | ConfineError::Changed { .. })) => {
            Err(format!("path {}: {err}", python_repr(input)))
        }
    }
}

/// The reference's `_fs_reason`: a filesystem error in a few fixed words, never a host path.
pub fn reason(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT) => return "no such file or directory".to_owned(),
        Some(libc::ENOTDIR) => return "not a directory".to_owned(),
        Some(libc::EISDIR) => return "is a directory".to_owned(),
        Some(libc::EACCES | libc::EPERM) => return "permission denied".to_owned(),
        Some(libc::EEXIST) => return "file already exists".to_owned(),
        Some(libc::ELOOP) => return "too many levels of symbolic links".to_owned(),
        Some(code) => return strerror(code),
        None => {}
    }
    match err.kind() {
        io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        io::ErrorKind::NotADirectory => "not a directory".to_owned(),
        io::ErrorKind::IsADirectory => "is a directory".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        io::ErrorKind::AlreadyExists => "file already exists".to_owned(),
        _ => err.to_string().to_lowercase(),
    }
}

/// `strerror(code)` in lower case, as Python's `OSError.strerror.lower()`.
fn strerror(code: i32) -> String {
    let text = io::Error::from_raw_os_error(code).to_string();
    let text = text
        .rsplit_once(" (os error ")
        .map_or(text.as_str(), |(words, _)| words);
    text.to_lowercase()
}

/// Python's `repr()` of a string, as the reference's `{p!r}` shows a path: single quotes unless the
/// text holds one and no double quote; backslashes, the quote and control characters escaped.
pub fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len().saturating_add(2));
    out.push(quote);
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if ch == quote => {
                out.push('\\');
                out.push(ch);
            }
            _ if u32::from(ch) < 0x20 || ch == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", u32::from(ch)));
            }
            _ if ch.is_control() => {
                let code = u32::from(ch);
                if code <= 0xff {
                    out.push_str(&format!("\\x{code:02x}"));
                } else {
                    out.push_str(&format!("\\u{code:04x}"));
                }
            }
            _ => out.push(ch),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_shown_as_python_s_repr_shows_it() {
        assert_eq!(python_repr("../x"), "'../x'");
        assert_eq!(python_repr("it's"), "\"it's\"");
        assert_eq!(python_repr("a'\"b"), "'a\\'\"b'");
        assert_eq!(python_repr("a\\b\nc\u{1}"), "'a\\\\b\\nc\\x01'");
    }

    #[test]
    fn errors_read_as_the_reference_words_them() {
        let gone = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(reason(&gone), "no such file or directory");
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(reason(&full), "no space left on device");
    }
}
