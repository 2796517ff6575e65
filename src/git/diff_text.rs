//! Renders a `git2::Diff` as `git diff` prints it, one text per changed path, capped per file and in total.

use std::collections::BTreeMap;

use git2::{Diff, ErrorClass, ErrorCode, Patch};

/// libgit2's error for a work-tree file that is gone when its content is read (ENOENT / ENOTDIR on
/// open), or whose size changed between the stat and the read (a file rewritten in place, caught
/// truncated, reads short while it is hashed for the status walk).
pub fn vanished(err: &git2::Error) -> bool {
    matches!(
        (err.code(), err.class()),
        (ErrorCode::NotFound, ErrorClass::Os)
    ) || (err.class() == ErrorClass::Filesystem
        && err.message().contains("changed before we could read"))
        || (err.class() == ErrorClass::Os
            && err.message().starts_with("error reading file for hashing"))
}

/// A single file's diff beyond this is cut with a marker: the JSON answer must stay bounded.
pub const MAX_FILE_DIFF_BYTES: usize = 1024 * 1024;

struct FileDiff {
    text: String,
    omitted: usize,
}

pub struct Rendered {
    pub files: BTreeMap<String, String>,
    /// Files after the budget ran out were left out (the last rendered file says so too).
    pub truncated: bool,
}

/// Renders at most `budget` bytes of diff text. A file that does not fit is cut with a marker saying how
/// many bytes were omitted; once the budget is spent, rendering stops at the next file (libgit2 stops
/// computing too) and the last rendered file ends with a line saying the rest is omitted.
///
/// Files are rendered one at a time, so a work-tree file that vanished between the diff listing it and
/// its content being read (a delete or a rename racing the diff) is left out rather than failing the
/// whole answer: it is no longer there to show, and the next diff shows where it went.
pub fn render(diff: &Diff<'_>, budget: usize) -> Result<Rendered, git2::Error> {
    let mut files: BTreeMap<String, FileDiff> = BTreeMap::new();
    let mut used = 0usize;
    let mut current: Option<String> = None;
    let mut cut = false;
    // A line did not fit the budget: the next file is not started (lines are never split, so `used` may
    // stay just below `budget`).
    let mut spent = budget == 0;
    for index in 0..diff.deltas().len() {
        if spent {
            cut = true;
            break;
        }
        let mut patch = match Patch::from_diff(diff, index) {
            Ok(Some(patch)) => patch,
            Ok(None) => continue,
            Err(err) if vanished(&err) => {
                tracing::debug!(
                    reason = err.message(),
                    "a file vanished while its diff was read"
                );
                continue;
            }
            Err(err) => return Err(err),
        };
        patch.print(&mut |delta, _hunk, line| {
            let path = delta
                .new_file()
                .path()
                .or_else(|| delta.old_file().path())
                .map(|path| path.to_string_lossy().into_owned())
                .unwrap_or_default();
            current = Some(path.clone());
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
            let fits_answer = used.saturating_add(added) <= budget;
            spent |= !fits_answer;
            let fits = fits_answer && entry.text.len().saturating_add(added) <= MAX_FILE_DIFF_BYTES;
            if entry.omitted > 0 || !fits {
                entry.omitted = entry.omitted.saturating_add(added);
                return true;
            }
            if let Some(prefix) = prefix {
                entry.text.push(prefix);
            }
            entry.text.push_str(&content);
            used = used.saturating_add(added);
            true
        })?;
    }
    let last = current;
    Ok(Rendered {
        files: files
            .into_iter()
            .map(|(path, file)| {
                let mut text = file.text;
                if file.omitted > 0 {
                    text.push_str(&format!(
                        "[boxd: diff truncated, {} bytes omitted]\n",
                        file.omitted
                    ));
                }
                if cut && last.as_deref() == Some(path.as_str()) {
                    text.push_str(&format!(
                        "[boxd: diff size limit of {budget} bytes reached; the remaining files are omitted]\n"
                    ));
                }
                (path, text)
            })
            .collect(),
        truncated: cut,
    })
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn a_file_that_reads_short_while_hashed_counts_as_changed_under_the_walk() {
        use git2::{Error, ErrorClass, ErrorCode};
        let short = Error::new(
            ErrorCode::GenericError,
            ErrorClass::Os,
            "error reading file for hashing: ",
        );
        assert!(super::vanished(&short));
        let other = Error::new(ErrorCode::GenericError, ErrorClass::Os, "permission denied");
        assert!(!super::vanished(&other));
    }

    /// A diff of `files` (name, content) added to an empty repository.
    fn rendered(files: &[(&str, String)], budget: usize) -> super::Rendered {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = git2::Repository::init(dir.path()).expect("init");
        let mut builder = repo.treebuilder(None).expect("tree builder");
        for (name, content) in files {
            let blob = repo.blob(content.as_bytes()).expect("blob");
            builder.insert(name, blob, 0o100644).expect("insert");
        }
        let tree = repo
            .find_tree(builder.write().expect("tree"))
            .expect("find tree");
        let diff = repo
            .diff_tree_to_tree(None, Some(&tree), None)
            .expect("diff");
        render(&diff, budget).expect("render")
    }

    #[test]
    fn a_spent_budget_stops_at_the_next_file_and_says_so() {
        let big = "z".repeat(99) + "\n";
        let files = [
            ("a", big.repeat(10)),
            ("b", big.repeat(10)),
            ("c", big.repeat(10)),
        ];
        let whole = rendered(&files, usize::MAX);
        assert!(!whole.truncated);
        assert_eq!(whole.files.len(), 3);
        let a_len = whole.files["a"].len();

        let cut = rendered(&files, a_len + 300);
        assert!(cut.truncated);
        assert_eq!(cut.files["a"], whole.files["a"]);
        let b = &cut.files["b"];
        assert!(b.contains("[boxd: diff truncated, "), "{b}");
        assert!(b.ends_with("the remaining files are omitted]\n"), "{b}");
        assert!(!cut.files.contains_key("c"));

        let nothing = rendered(&files, 0);
        assert!(nothing.truncated && nothing.files.is_empty());
    }
}
