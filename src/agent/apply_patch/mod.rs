//! OpenAI's `apply_patch`: a V4A patch (Codex's `*** Begin Patch` envelope, or one operation of the
//! Responses API's `apply_patch_call`) applied to the workspace as Codex's `apply-patch` crate applies
//! it. `parse` reads the patch, `apply` makes the changes.

mod apply;
mod parse;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::core::confine::Workspace;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError, ToolSpec};

pub use apply::{MATCH_BUDGET, MAX_FILE_BYTES};

/// The largest patch (`input`, or an operation's `diff`) taken.
pub const MAX_PATCH_BYTES: usize = 4 * 1024 * 1024;
/// One call's deadline: blocking file work cannot be interrupted, so past it the caller is answered
/// and the work finishes on its own.
pub const TOOL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

const DESCRIPTION: &str = "Use the `apply_patch` tool to edit files. Pass either `input`, the whole patch (`*** Begin Patch`, then `*** Add File: PATH` with `+` lines, `*** Delete File: PATH`, or `*** Update File: PATH` with an optional `*** Move to: PATH` and `@@` hunks of ` `, `-` and `+` lines, an optional `*** End of File`, then `*** End Patch`), or `operation`, one file's change as the Responses API's apply_patch_call carries it. Paths are relative to the workspace. With `atomic`, either every file is changed or none.";

#[derive(Deserialize, JsonSchema)]
struct ApplyPatchArgs {
    /// The entire contents of the apply_patch command
    input: Option<String>,
    /// One file's change, as the Responses API's apply_patch_call operation
    operation: Option<Operation>,
    /// All files or none: the new contents are staged and moved into place only once every operation succeeded (default false: as Codex, the changes made before a failing operation stay)
    #[serde(default)]
    atomic: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(tag = "type")]
enum Operation {
    /// A new file (an existing one is overwritten); `diff` is its lines, each prefixed with `+`
    #[serde(rename = "create_file")]
    Create { path: String, diff: String },
    /// An existing file; `diff` is its V4A hunks
    #[serde(rename = "update_file")]
    Update { path: String, diff: String },
    /// A file removed
    #[serde(rename = "delete_file")]
    Delete { path: String },
}

pub fn tool(group: &'static str, workspace: Workspace) -> Tool {
    let workspace = Arc::new(workspace);
    ToolSpec::declare::<ApplyPatchArgs>(group, "apply_patch", DESCRIPTION).handler(
        move |args: ApplyPatchArgs, _| {
            let workspace = Arc::clone(&workspace);
            async move {
                let hunks = hunks_of(args.input, args.operation).map_err(ToolError::Reported)?;
                let atomic = args.atomic;
                let running =
                    tokio::task::spawn_blocking(move || apply::apply(&workspace, &hunks, atomic));
                let deadline = tokio::time::Instant::now() + TOOL_DEADLINE;
                let outcome = match tokio::time::timeout_at(deadline, running).await {
                    Ok(Ok(outcome)) => outcome.map_err(|failure| failure.report()),
                    Ok(Err(err)) => Err(format!("apply_patch failed: {err}")),
                    Err(_) => {
                        tracing::warn!("apply_patch over its deadline");
                        Err(format!(
                            "apply_patch did not finish within {TOOL_DEADLINE:?}; it may still complete in the background"
                        ))
                    }
                };
                let affected = outcome.map_err(ToolError::Reported)?;
                Ok(CallToolResult::new(
                    vec![ContentItem::plain_text(affected.summary())],
                    false,
                ))
            }
        },
    )
}

/// The hunks a call asks for, from exactly one of its two forms.
fn hunks_of(
    input: Option<String>,
    operation: Option<Operation>,
) -> Result<Vec<parse::Hunk>, String> {
    let too_large = |what: &str, len: usize| {
        (len > MAX_PATCH_BYTES).then(|| {
            format!("{what} is {len} bytes; apply_patch takes at most {MAX_PATCH_BYTES} bytes")
        })
    };
    let parsed = match (input, operation) {
        (Some(input), None) => {
            if let Some(refused) = too_large("the patch", input.len()) {
                return Err(refused);
            }
            parse::parse_patch(&input)
        }
        (None, Some(operation)) => {
            let hunk = match operation {
                Operation::Create { path, diff } => {
                    if let Some(refused) = too_large("the diff", diff.len()) {
                        return Err(refused);
                    }
                    parse::parse_create_body(&path, &diff)
                }
                Operation::Update { path, diff } => {
                    if let Some(refused) = too_large("the diff", diff.len()) {
                        return Err(refused);
                    }
                    parse::parse_update_body(&path, &diff)
                }
                Operation::Delete { path } => Ok(parse::Hunk::Delete { path }),
            };
            hunk.map(|hunk| vec![hunk])
        }
        (Some(_), Some(_)) | (None, None) => {
            return Err(
                "apply_patch takes either `input` (the whole patch) or `operation` (one file's change), exactly one of them"
                    .to_owned(),
            );
        }
    };
    parsed.map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTIAL: &str = "*** Begin Patch\n*** Add File: created.txt\n+hello\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n";

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let workspace = Workspace::open(dir.path()).unwrap_or_else(|err| panic!("{err}"));
        (dir, workspace)
    }

    fn run(workspace: &Workspace, patch: &str, atomic: bool) -> Result<String, String> {
        let hunks = hunks_of(Some(patch.to_owned()), None)?;
        apply::apply(workspace, &hunks, atomic)
            .map(|affected| affected.summary())
            .map_err(|failure| failure.report())
    }

    #[test]
    fn atomic_leaves_nothing_when_an_operation_fails() {
        let (dir, workspace) = workspace();
        let failed = run(&workspace, PARTIAL, true);
        assert!(
            failed.as_ref().is_err_and(|text| text
                .starts_with("Failed to read file to update missing.txt: ")
                && !text.contains("stay")),
            "{failed:?}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name())
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        // Without it, as Codex: the file added before the failure stays, and the answer says so.
        let failed = run(&workspace, PARTIAL, false);
        assert!(
            failed
                .as_ref()
                .is_err_and(|text| text.ends_with("stay:\nA created.txt\n")),
            "{failed:?}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("created.txt"))
                .ok()
                .as_deref(),
            Some("hello\n")
        );
    }

    #[test]
    fn atomic_changes_see_the_earlier_ones() {
        let (dir, workspace) = workspace();
        let patch = "*** Begin Patch\n*** Add File: a/b.txt\n+one\n*** Update File: a/b.txt\n*** Move to: c.txt\n@@\n-one\n+two\n*** End Patch";
        assert_eq!(
            run(&workspace, patch, true),
            Ok("Success. Updated the following files:\nA a/b.txt\nM c.txt\n".to_owned())
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c.txt"))
                .ok()
                .as_deref(),
            Some("two\n")
        );
        assert!(!dir.path().join("a/b.txt").exists());
    }

    #[test]
    fn paths_stay_in_the_workspace() {
        let (dir, workspace) = workspace();
        let outside = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let link = dir.path().join("out");
        assert!(std::os::unix::fs::symlink(outside.path(), &link).is_ok());
        for path in [
            "/etc/passwd-new",
            "../escape.txt",
            "a/../../escape.txt",
            "out/x.txt",
        ] {
            let patch = format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch");
            let answer = run(&workspace, &patch, false);
            assert!(answer.is_err(), "{path}: {answer:?}");
        }
        assert!(std::fs::read_dir(outside.path()).is_ok_and(|mut it| it.next().is_none()));
    }

    #[test]
    fn exactly_one_form_and_a_bounded_patch() {
        assert!(hunks_of(None, None).is_err());
        let both = hunks_of(
            Some("*** Begin Patch\n*** End Patch".into()),
            Some(Operation::Delete { path: "a".into() }),
        );
        assert!(both.is_err());
        let huge = "x".repeat(MAX_PATCH_BYTES + 1);
        assert!(hunks_of(Some(huge), None).is_err_and(|text| text.contains("at most")));
    }

    #[test]
    fn context_is_matched_as_codex_matches_it() {
        let (dir, workspace) = workspace();
        let file = dir.path().join("f.txt");
        assert!(
            std::fs::write(
                &file,
                "fn a() {\n    x = 1;   \n}\nfn b() {\n    x = 1;\n}\n"
            )
            .is_ok()
        );
        // Trailing and surrounding whitespace ignored; `@@ fn b() {` places the chunk after it.
        let patch = "*** Begin Patch\n*** Update File: f.txt\n@@ fn b() {\n-x = 1;\n+    x = 2;\n*** End Patch";
        assert!(run(&workspace, patch, false).is_ok());
        assert_eq!(
            std::fs::read_to_string(&file).ok().as_deref(),
            Some("fn a() {\n    x = 1;   \n}\nfn b() {\n    x = 2;\n}\n")
        );
        let missing = "*** Begin Patch\n*** Update File: f.txt\n@@ fn c() {\n-x\n*** End Patch";
        assert_eq!(
            run(&workspace, missing, false),
            Err("Failed to find context 'fn c() {' in f.txt".to_owned())
        );
    }
}
