//! Anthropic's text editor tool, `str_replace_based_edit_tool` (`text_editor_20250728`): `view`,
//! `create`, `str_replace` and `insert`, answering with the messages of Anthropic's reference
//! implementation (anthropic-quickstarts, `computer_use_demo/tools/edit.py`). Paths are relative to
//! the workspace and confined to it (`core::confine`), files written whole through a staged file.

use std::io::{self, Read};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::core::confine::{Anchor, Dir, Kind, Workspace};
use crate::core::entry::OpenError;
use crate::core::staging::stage_bytes;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError, ToolSpec};

pub use super::apply_patch::{MAX_FILE_BYTES, TOOL_DEADLINE};

/// The characters a `view` shows without `max_characters` (the reference's `MAX_RESPONSE_LEN`).
pub const MAX_VIEW_CHARACTERS: usize = 16_000;
/// The lines shown around an edit (the reference's `SNIPPET_LINES`).
const SNIPPET_LINES: usize = 4;
const TRUNCATED_MESSAGE: &str = "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>";

const DESCRIPTION: &str = "Anthropic's text editor tool (text_editor_20250728): `view` a file (numbered as `cat -n`; `view_range` [start, end], end -1 for the end of the file; `max_characters`) or a directory (two levels, hidden items left out), `create` a new file with `file_text`, `str_replace` the one occurrence of `old_str` with `new_str`, or `insert` `new_str` after line `insert_line` (0: at the top). Paths are relative to the workspace.";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Command {
    View,
    Create,
    StrReplace,
    Insert,
}

#[derive(Deserialize, JsonSchema)]
struct TextEditorArgs {
    /// The command to run: `view`, `create`, `str_replace` or `insert`
    command: Command,
    /// The file or directory, relative to the workspace
    path: String,
    /// The content of the file to create (`create`)
    file_text: Option<String>,
    /// The text to replace, which must appear exactly once in the file (`str_replace`)
    old_str: Option<String>,
    /// The replacement text (`str_replace`, default empty) or the text to insert (`insert`)
    new_str: Option<String>,
    /// The line after which to insert, 0 for the top of the file (`insert`)
    insert_line: Option<i64>,
    /// The lines to show, [start, end], 1-based and inclusive; end -1 for the end of the file (`view` of a file)
    view_range: Option<Vec<i64>>,
    /// The most characters of the file to show (`view`)
    max_characters: Option<u64>,
}

pub fn tool(group: &'static str, workspace: Workspace) -> Tool {
    let workspace = Arc::new(workspace);
    ToolSpec::declare::<TextEditorArgs>(group, "str_replace_based_edit_tool", DESCRIPTION).handler(
        move |args: TextEditorArgs, _| {
            let workspace = Arc::clone(&workspace);
            async move {
                let running = tokio::task::spawn_blocking(move || run(&workspace, args));
                let deadline = tokio::time::Instant::now() + TOOL_DEADLINE;
                let answer = match tokio::time::timeout_at(deadline, running).await {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(err)) => Err(format!("str_replace_based_edit_tool failed: {err}")),
                    Err(_) => {
                        tracing::warn!("str_replace_based_edit_tool over its deadline");
                        Err(format!(
                            "str_replace_based_edit_tool did not finish within {TOOL_DEADLINE:?}; it may still complete in the background"
                        ))
                    }
                };
                let text = answer.map_err(ToolError::Reported)?;
                Ok(CallToolResult::new(vec![ContentItem::plain_text(text)], false))
            }
        },
    )
}

/// Blocking. One call, as the reference's `__call__`: the path checked, then the command.
fn run(workspace: &Workspace, args: TextEditorArgs) -> Result<String, String> {
    let path = args.path.as_str();
    let held = locate(workspace, path)?;
    let exists = held.exists();
    let creating = matches!(args.command, Command::Create);
    if !exists && !creating {
        return Err(format!(
            "The path {path} does not exist. Please provide a valid path."
        ));
    }
    if exists && creating {
        return Err(format!(
            "File already exists at: {path}. Cannot overwrite files using command `create`."
        ));
    }
    let is_dir = held.is_root() || held.metadata().is_ok_and(|meta| meta.is_dir());
    if is_dir && !matches!(args.command, Command::View) {
        return Err(format!(
            "The path {path} is a directory and only the `view` command can be used on directories"
        ));
    }
    match args.command {
        Command::View if is_dir => {
            if args
                .view_range
                .as_ref()
                .is_some_and(|range| !range.is_empty())
            {
                return Err(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                        .to_owned(),
                );
            }
            list(&held, path)
        }
        Command::View => {
            let limit = args.max_characters.map_or(MAX_VIEW_CHARACTERS, |max| {
                usize::try_from(max).unwrap_or(usize::MAX)
            });
            view(&read(&held, path)?, path, args.view_range.as_deref(), limit)
        }
        Command::Create => {
            let text = args.file_text.ok_or_else(|| {
                "Parameter `file_text` is required for command: create".to_owned()
            })?;
            write(held, path, &text)?;
            Ok(format!("File created successfully at: {path}"))
        }
        Command::StrReplace => {
            let old = args.old_str.ok_or_else(|| {
                "Parameter `old_str` is required for command: str_replace".to_owned()
            })?;
            let content = read(&held, path)?;
            let (edited, snippet) = str_replace(&content, path, &old, args.new_str.as_deref())?;
            write(held, path, &edited)?;
            Ok(snippet)
        }
        Command::Insert => {
            let line = args.insert_line.ok_or_else(|| {
                "Parameter `insert_line` is required for command: insert".to_owned()
            })?;
            let new = args
                .new_str
                .ok_or_else(|| "Parameter `new_str` is required for command: insert".to_owned())?;
            let content = read(&held, path)?;
            let (edited, snippet) = insert(&content, path, line, &new)?;
            write(held, path, &edited)?;
            Ok(snippet)
        }
    }
}

/// The reference's `find PATH -maxdepth 2 -not -path '*/\.*'`: the directory, then its entries and
/// theirs, hidden ones left out (and not entered), in name order; bounded as a `view` is.
fn list(held: &Anchor, path: &str) -> Result<String, String> {
    let dir = held
        .open_dir()
        .map_err(|err| format!("Ran into {err} while trying to read {path}"))?;
    let mut out = format!(
        "Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n{path}\n"
    );
    let base = path.trim_end_matches('/');
    list_level(&dir, base, 1, &mut out);
    out.push('\n');
    Ok(truncate(&out, MAX_VIEW_CHARACTERS))
}

fn list_level(dir: &Dir, shown: &str, depth: usize, out: &mut String) {
    let Ok(mut entries) = dir.entries() else {
        return;
    };
    entries.retain(|entry| !entry.name.as_encoded_bytes().starts_with(b"."));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        // Past the bound the answer is clipped anyway: stop walking.
        if out.len() > MAX_VIEW_CHARACTERS.saturating_mul(4) {
            return;
        }
        let child = format!("{shown}/{}", entry.name.to_string_lossy());
        out.push_str(&child);
        out.push('\n');
        if depth < 2
            && entry.kind == Kind::Dir
            && let Ok(sub) = dir.open_child(&entry.name)
        {
            list_level(&sub, &child, depth.saturating_add(1), out);
        }
    }
}

/// The path held inside the workspace (a final symlink followed): relative to it, or absolute inside it.
fn locate(workspace: &Workspace, path: &str) -> Result<Anchor, String> {
    if path.is_empty() {
        return Err("The path is empty. Please provide a valid path.".to_owned());
    }
    workspace
        .locate(path)
        .map(|(_, held)| held)
        .map_err(|err| format!("{path}: {err}"))
}

fn read(held: &Anchor, path: &str) -> Result<String, String> {
    let failed = |err: String| format!("Ran into {err} while trying to read {path}");
    let mut file = held.open_for_reading().map_err(|err| {
        failed(match err {
            OpenError::NotRegular(message) => message,
            OpenError::Io(err) => err.to_string(),
        })
    })?;
    let size = file
        .metadata()
        .map_err(|err| failed(err.to_string()))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(failed(format!(
            "a file of {size} bytes (the text editor reads files of at most {MAX_FILE_BYTES} bytes)"
        )));
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|err| failed(err.to_string()))?;
    String::from_utf8(bytes).map_err(|_| failed("a file that is not UTF-8".to_owned()))
}

/// Writes the file whole (staged beside it, renamed into place); missing parent directories are made.
fn write(mut held: Anchor, path: &str, content: &str) -> Result<(), String> {
    let failed = |err: io::Error| format!("Ran into {err} while trying to write to {path}");
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "Ran into a content of {} bytes (the text editor writes files of at most {MAX_FILE_BYTES} bytes) while trying to write to {path}",
            content.len()
        ));
    }
    held.create_parents().map_err(failed)?;
    let dir = held.parent_path().map_err(failed)?;
    let staged = stage_bytes(&dir, content.as_bytes()).map_err(failed)?;
    let target = held.entry_path().map_err(failed)?;
    staged.persist(&target).map_err(failed)
}

/// Python's `str.expandtabs()`: tab stops every 8 columns, the column reset by a line break.
fn expand_tabs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut column = 0usize;
    for ch in text.chars() {
        match ch {
            '\t' => {
                let spaces = 8 - column % 8;
                out.extend(std::iter::repeat_n(' ', spaces));
                column = column.saturating_add(spaces);
            }
            '\n' | '\r' => {
                out.push(ch);
                column = 0;
            }
            _ => {
                out.push(ch);
                column = column.saturating_add(1);
            }
        }
    }
    out
}

/// The reference's `maybe_truncate`: at most `limit` characters, then a note saying so.
fn truncate(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}{TRUNCATED_MESSAGE}", &text[..end]),
        None => text.to_owned(),
    }
}

/// The reference's `_make_output`: the lines numbered as `cat -n` does, from `first_line`.
fn numbered(content: &str, descriptor: &str, first_line: usize, limit: usize) -> String {
    let content = expand_tabs(&truncate(content, limit));
    let mut out = format!("Here's the result of running `cat -n` on {descriptor}:\n");
    for (index, line) in content.split('\n').enumerate() {
        out.push_str(&format!("{:6}\t{line}\n", index.saturating_add(first_line)));
    }
    out
}

/// Python's rendering of a list of integers, as the reference's messages show them.
fn python_list(items: &[i64]) -> String {
    let items: Vec<String> = items.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(", "))
}

fn view(content: &str, path: &str, range: Option<&[i64]>, limit: usize) -> Result<String, String> {
    let Some(range) = range.filter(|range| !range.is_empty()) else {
        return Ok(numbered(content, path, 1, limit));
    };
    let &[first, last] = range else {
        return Err("Invalid `view_range`. It should be a list of two integers.".to_owned());
    };
    let lines: Vec<&str> = content.split('\n').collect();
    let count = i64::try_from(lines.len()).unwrap_or(i64::MAX);
    let shown = python_list(range);
    if first < 1 || first > count {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its first element `{first}` should be within the range of lines of the file: {}",
            python_list(&[1, count])
        ));
    }
    if last > count {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its second element `{last}` should be smaller than the number of lines in the file: `{count}`"
        ));
    }
    if last != -1 && last < first {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its second element `{last}` should be larger or equal than its first `{first}`"
        ));
    }
    // Both checked to lie in 1..=count (or `last` is -1 or below: Python's negative slice end).
    let start = usize::try_from(first - 1).unwrap_or(0);
    let end = if last == -1 {
        lines.len()
    } else if last < 0 {
        lines
            .len()
            .saturating_sub(usize::try_from(last.unsigned_abs()).unwrap_or(usize::MAX))
            .max(start)
    } else {
        usize::try_from(last).unwrap_or(lines.len())
    };
    let selected = lines.get(start..end).unwrap_or_default().join("\n");
    Ok(numbered(&selected, path, start.saturating_add(1), limit))
}

/// The edited content and the answer, or the reference's refusal for 0 or several occurrences.
fn str_replace(
    content: &str,
    path: &str,
    old: &str,
    new: Option<&str>,
) -> Result<(String, String), String> {
    let new = new.unwrap_or_default();
    let mut found = content.match_indices(old);
    let first = found.next();
    let several = found.next().is_some();
    let Some((at, _)) = first.filter(|_| !old.is_empty() || content.is_empty()) else {
        if old.is_empty() && !content.is_empty() {
            return Err(several_message(content, old));
        }
        return Err(format!(
            "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        ));
    };
    if several {
        return Err(several_message(content, old));
    }
    let edited = format!(
        "{}{new}{}",
        &content[..at],
        &content[at.saturating_add(old.len())..]
    );
    let replaced_line = content[..at].matches('\n').count();
    let start = replaced_line.saturating_sub(SNIPPET_LINES);
    let end = replaced_line
        .saturating_add(SNIPPET_LINES)
        .saturating_add(new.matches('\n').count());
    let lines: Vec<&str> = edited.split('\n').collect();
    let snippet = lines
        .get(start..end.saturating_add(1).min(lines.len()))
        .unwrap_or_default()
        .join("\n");
    let answer = format!(
        "The file {path} has been edited. {}Review the changes and make sure they are as expected. Edit the file again if necessary.",
        numbered(
            &snippet,
            &format!("a snippet of {path}"),
            start.saturating_add(1),
            MAX_VIEW_CHARACTERS
        )
    );
    Ok((edited, answer))
}

fn several_message(content: &str, old: &str) -> String {
    let lines: Vec<String> = content
        .split('\n')
        .enumerate()
        .filter(|(_, line)| line.contains(old))
        .map(|(index, _)| index.saturating_add(1).to_string())
        .collect();
    format!(
        "No replacement was performed. Multiple occurrences of old_str `{old}` in lines [{}]. Please ensure it is unique",
        lines.join(", ")
    )
}

fn insert(content: &str, path: &str, line: i64, new: &str) -> Result<(String, String), String> {
    let lines: Vec<&str> = content.split('\n').collect();
    let count = lines.len();
    let at = usize::try_from(line).ok().filter(|at| *at <= count);
    let Some(at) = at else {
        return Err(format!(
            "Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {count}]"
        ));
    };
    let new_lines: Vec<&str> = new.split('\n').collect();
    let before = lines.get(..at).unwrap_or_default();
    let after = lines.get(at..).unwrap_or_default();
    let edited = [before, &new_lines, after].concat().join("\n");
    let snippet = [
        before
            .get(at.saturating_sub(SNIPPET_LINES)..)
            .unwrap_or_default(),
        &new_lines,
        after
            .get(..SNIPPET_LINES.min(after.len()))
            .unwrap_or_default(),
    ]
    .concat()
    .join("\n");
    let answer = format!(
        "The file {path} has been edited. {}Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.",
        numbered(
            &snippet,
            "a snippet of the edited file",
            at.saturating_sub(SNIPPET_LINES).saturating_add(1),
            MAX_VIEW_CHARACTERS
        )
    );
    Ok((edited, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let workspace = Workspace::open(dir.path()).unwrap_or_else(|err| panic!("{err}"));
        (dir, workspace)
    }

    fn call(workspace: &Workspace, args: serde_json::Value) -> Result<String, String> {
        let args: TextEditorArgs =
            serde_json::from_value(args).unwrap_or_else(|err| panic!("{err}"));
        run(workspace, args)
    }

    fn content(dir: &tempfile::TempDir, path: &str) -> Option<String> {
        std::fs::read_to_string(dir.path().join(path)).ok()
    }

    #[test]
    fn view_numbers_lines_as_cat_n() {
        let (dir, workspace) = workspace();
        assert!(std::fs::write(dir.path().join("a.txt"), "one\n\ttwo\nthree").is_ok());
        assert_eq!(
            call(&workspace, serde_json::json!({"command": "view", "path": "a.txt"})),
            Ok("Here's the result of running `cat -n` on a.txt:\n     1\tone\n     2\t        two\n     3\tthree\n".to_owned())
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "view", "path": "a.txt", "view_range": [2, -1]})
            ),
            Ok("Here's the result of running `cat -n` on a.txt:\n     2\t        two\n     3\tthree\n".to_owned())
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "view", "path": "a.txt", "view_range": [2, 2]})
            ),
            Ok("Here's the result of running `cat -n` on a.txt:\n     2\t        two\n".to_owned())
        );
        let clipped = call(
            &workspace,
            serde_json::json!({"command": "view", "path": "a.txt", "max_characters": 2}),
        );
        assert_eq!(
            clipped,
            Ok(format!(
                "Here's the result of running `cat -n` on a.txt:\n     1\ton{TRUNCATED_MESSAGE}\n"
            ))
        );
    }

    #[test]
    fn view_range_refusals() {
        let (dir, workspace) = workspace();
        assert!(std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree").is_ok());
        let view = |range: serde_json::Value| {
            call(
                &workspace,
                serde_json::json!({"command": "view", "path": "a.txt", "view_range": range}),
            )
        };
        assert_eq!(
            view(serde_json::json!([1])),
            Err("Invalid `view_range`. It should be a list of two integers.".to_owned())
        );
        assert_eq!(
            view(serde_json::json!([0, 2])),
            Err("Invalid `view_range`: [0, 2]. Its first element `0` should be within the range of lines of the file: [1, 3]".to_owned())
        );
        assert_eq!(
            view(serde_json::json!([1, 4])),
            Err("Invalid `view_range`: [1, 4]. Its second element `4` should be smaller than the number of lines in the file: `3`".to_owned())
        );
        assert_eq!(
            view(serde_json::json!([3, 2])),
            Err("Invalid `view_range`: [3, 2]. Its second element `2` should be larger or equal than its first `3`".to_owned())
        );
    }

    #[test]
    fn view_lists_a_directory_two_levels_deep_without_hidden_items() {
        let (dir, workspace) = workspace();
        for made in [
            std::fs::create_dir_all(dir.path().join("src/deep/deeper")),
            std::fs::create_dir_all(dir.path().join(".git")),
            std::fs::write(dir.path().join("src/b.rs"), ""),
            std::fs::write(dir.path().join("src/.hidden"), ""),
            std::fs::write(dir.path().join("a.txt"), ""),
        ] {
            assert!(made.is_ok());
        }
        assert_eq!(
            call(&workspace, serde_json::json!({"command": "view", "path": "."})),
            Ok("Here's the files and directories up to 2 levels deep in ., excluding hidden items:\n.\n./a.txt\n./src\n./src/b.rs\n./src/deep\n\n".to_owned())
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "view", "path": "src", "view_range": [1, 2]})
            ),
            Err(
                "The `view_range` parameter is not allowed when `path` points to a directory."
                    .to_owned()
            )
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "create", "path": "src", "file_text": "x"})
            ),
            Err(
                "File already exists at: src. Cannot overwrite files using command `create`."
                    .to_owned()
            )
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "insert", "path": "src", "insert_line": 0, "new_str": "x"})
            ),
            Err("The path src is a directory and only the `view` command can be used on directories".to_owned())
        );
    }

    #[test]
    fn create_makes_a_new_file_only() {
        let (dir, workspace) = workspace();
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "create", "path": "n/new.py", "file_text": "x = 1\n"})
            ),
            Ok("File created successfully at: n/new.py".to_owned())
        );
        assert_eq!(content(&dir, "n/new.py").as_deref(), Some("x = 1\n"));
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "create", "path": "n/new.py", "file_text": "y"})
            ),
            Err(
                "File already exists at: n/new.py. Cannot overwrite files using command `create`."
                    .to_owned()
            )
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "create", "path": "other.py"})
            ),
            Err("Parameter `file_text` is required for command: create".to_owned())
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "view", "path": "missing.py"})
            ),
            Err("The path missing.py does not exist. Please provide a valid path.".to_owned())
        );
    }

    #[test]
    fn str_replace_takes_exactly_one_occurrence() {
        let (dir, workspace) = workspace();
        let text = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nx y x\n";
        assert!(std::fs::write(dir.path().join("f.txt"), text).is_ok());
        let replace = |old: &str, new: &str| {
            call(
                &workspace,
                serde_json::json!({"command": "str_replace", "path": "f.txt", "old_str": old, "new_str": new}),
            )
        };
        assert_eq!(
            replace("zzz", "q"),
            Err(
                "No replacement was performed, old_str `zzz` did not appear verbatim in f.txt."
                    .to_owned()
            )
        );
        assert_eq!(
            replace("x", "q"),
            Err("No replacement was performed. Multiple occurrences of old_str `x` in lines [11]. Please ensure it is unique".to_owned())
        );
        assert_eq!(content(&dir, "f.txt").as_deref(), Some(text));
        assert_eq!(
            replace("f\n", "F1\nF2\n"),
            Ok("The file f.txt has been edited. Here's the result of running `cat -n` on a snippet of f.txt:\n     2\tb\n     3\tc\n     4\td\n     5\te\n     6\tF1\n     7\tF2\n     8\tg\n     9\th\n    10\ti\n    11\tj\n    12\tx y x\nReview the changes and make sure they are as expected. Edit the file again if necessary.".to_owned())
        );
        assert_eq!(
            content(&dir, "f.txt").as_deref(),
            Some("a\nb\nc\nd\ne\nF1\nF2\ng\nh\ni\nj\nx y x\n")
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "str_replace", "path": "f.txt"})
            ),
            Err("Parameter `old_str` is required for command: str_replace".to_owned())
        );
    }

    #[test]
    fn insert_after_a_line_within_the_file() {
        let (dir, workspace) = workspace();
        assert!(std::fs::write(dir.path().join("f.txt"), "a\nb\nc").is_ok());
        let insert = |line: i64| {
            call(
                &workspace,
                serde_json::json!({"command": "insert", "path": "f.txt", "insert_line": line, "new_str": "new"}),
            )
        };
        assert_eq!(
            insert(4),
            Err("Invalid `insert_line` parameter: 4. It should be within the range of lines of the file: [0, 3]".to_owned())
        );
        assert_eq!(
            insert(-1),
            Err("Invalid `insert_line` parameter: -1. It should be within the range of lines of the file: [0, 3]".to_owned())
        );
        assert_eq!(
            insert(1),
            Ok("The file f.txt has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n     1\ta\n     2\tnew\n     3\tb\n     4\tc\nReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.".to_owned())
        );
        assert!(insert(0).is_ok());
        assert_eq!(content(&dir, "f.txt").as_deref(), Some("new\na\nnew\nb\nc"));
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "insert", "path": "f.txt", "new_str": "x"})
            ),
            Err("Parameter `insert_line` is required for command: insert".to_owned())
        );
        assert_eq!(
            call(
                &workspace,
                serde_json::json!({"command": "insert", "path": "f.txt", "insert_line": 0})
            ),
            Err("Parameter `new_str` is required for command: insert".to_owned())
        );
    }

    #[test]
    fn paths_stay_in_the_workspace() {
        let (dir, workspace) = workspace();
        let outside = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        assert!(std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).is_ok());
        for path in [
            "/etc/passwd",
            "../escape.txt",
            "a/../../escape.txt",
            "out/x.txt",
        ] {
            let answer = call(
                &workspace,
                serde_json::json!({"command": "create", "path": path, "file_text": "x"}),
            );
            assert!(answer.is_err(), "{path}: {answer:?}");
        }
        assert!(std::fs::read_dir(outside.path()).is_ok_and(|mut it| it.next().is_none()));
    }
}
