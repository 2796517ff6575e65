//! Renders a `git2::Diff` as `git diff` prints it, one text per changed path, each capped in size.

use std::collections::BTreeMap;

use git2::{Diff, DiffFormat};

/// A single file's diff beyond this is cut with a marker: the JSON answer must stay bounded.
const MAX_FILE_DIFF_BYTES: usize = 1024 * 1024;

struct FileDiff {
    text: String,
    omitted: usize,
}

pub fn render(diff: &Diff<'_>) -> Result<BTreeMap<String, String>, git2::Error> {
    let mut files: BTreeMap<String, FileDiff> = BTreeMap::new();
    diff.print(DiffFormat::Patch, |delta, _hunk, line| {
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|path| path.to_string_lossy().into_owned())
            .unwrap_or_default();
        let entry = files.entry(path).or_insert_with(|| FileDiff {
            text: String::new(),
            omitted: 0,
        });
        let content = String::from_utf8_lossy(line.content());
        let prefix = match line.origin() {
            origin @ ('+' | '-' | ' ') => Some(origin),
            _ => None,
        };
        let added = content.len() + usize::from(prefix.is_some());
        if entry.omitted > 0 || entry.text.len() + added > MAX_FILE_DIFF_BYTES {
            entry.omitted += added;
            return true;
        }
        if let Some(prefix) = prefix {
            entry.text.push(prefix);
        }
        entry.text.push_str(&content);
        true
    })?;
    Ok(files
        .into_iter()
        .map(|(path, file)| {
            let mut text = file.text;
            if file.omitted > 0 {
                text.push_str(&format!(
                    "[boxd: diff truncated, {} bytes omitted]\n",
                    file.omitted
                ));
            }
            (path, text)
        })
        .collect())
}
