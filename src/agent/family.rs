//! The `agent` family: vendors' agent tools, nothing long-lived.

use std::sync::Arc;

use crate::family::limits::{Limit, as_u64, bytes, count, seconds};
use crate::family::{Family, Setup};
use crate::tools::Tool;

use super::{apply_patch, text_editor, toolset};

struct Agent {
    tools: Vec<Tool>,
}

impl Family for Agent {
    fn name(&self) -> &'static str {
        "agent"
    }

    fn tools(&self) -> Vec<Tool> {
        self.tools.clone()
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::OPENAI_GROUP, super::ANTHROPIC_GROUP]
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let mut tools = toolset::tools(super::ANTHROPIC_GROUP, setup.workspace.clone());
    tools.extend([
        text_editor::tool(super::ANTHROPIC_GROUP, setup.workspace.clone()),
        apply_patch::tool(super::OPENAI_GROUP, setup.workspace.clone()),
        super::openai_shell::tool(super::OPENAI_GROUP, setup),
    ]);
    Ok(Arc::new(Agent { tools }))
}

/// The bounds the `agent` family keeps, for `boxd limits`.
pub fn limits() -> Vec<Limit> {
    vec![
        Limit::new(
            "agent",
            "output one `bash` command keeps (its tail)",
            bytes(as_u64(toolset::BASH_OUTPUT_LIMIT)),
            "the head dropped, `[output truncated]` before the rest",
        ),
        Limit::new(
            "agent",
            "`bash` command timeout when the call gives none (`timeout_ms` at most the next row)",
            seconds(toolset::BASH_DEFAULT_TIMEOUT),
            "the session's shell ends (its process group killed); the next call says a restart is required",
        ),
        Limit::new(
            "agent",
            "longest `timeout_ms` a `bash` call may ask for",
            seconds(toolset::BASH_MAX_TIMEOUT),
            "a longer one is cut to it",
        ),
        Limit::new(
            "agent",
            "`bash` shells kept at once (one per session)",
            count(toolset::MAX_BASH_SESSIONS),
            "the least recently used idle one is closed; with all busy, an error result",
        ),
        Limit::new(
            "agent",
            "a `bash` shell unused",
            seconds(toolset::BASH_IDLE),
            "closed; the session's next call starts a fresh one",
        ),
        Limit::new(
            "agent",
            "a file `read` returns whole or `edit` changes",
            bytes(toolset::MAX_FILE_BYTES),
            "an error result naming the size (`read` with `view_range` streams the lines)",
        ),
        Limit::new(
            "agent",
            "an image `read` returns (a PDF: the next row)",
            bytes(5 * 1024 * 1024 / 4 * 3),
            "an error result naming the size",
        ),
        Limit::new(
            "agent",
            "a PDF `read` returns",
            bytes(toolset::MAX_PDF_BYTES),
            "an error result naming the size",
        ),
        Limit::new(
            "agent",
            "`glob` matches listed (newest first) / gathered",
            count(toolset::GLOB_RESULT_LIMIT),
            "the newest kept",
        ),
        Limit::new(
            "agent",
            "`glob` matches gathered before sorting, and files one `grep` searches",
            count(toolset::WALK_MAX_ENTRIES),
            "the walk stops there",
        ),
        Limit::new(
            "agent",
            "`grep` output",
            bytes(as_u64(toolset::GREP_OUTPUT_LIMIT)),
            "`[output truncated at 102400 bytes]` and the search stops",
        ),
        Limit::new(
            "agent",
            "bytes of a line `grep` searches",
            bytes(as_u64(toolset::GREP_MAX_LINE_LENGTH)),
            "the line is skipped",
        ),
        Limit::new(
            "agent",
            "one `glob` or `grep` walk",
            seconds(toolset::WALK_DEADLINE),
            "`grep`: an error result `timed out`; `glob`: the matches so far",
        ),
        Limit::new(
            "agent",
            "one `read`, `write`, `edit`, `glob` or `grep` call",
            seconds(toolset::FILE_TOOL_DEADLINE),
            "an error result; the work may still finish",
        ),
        Limit::new(
            "agent",
            "one `apply_patch` patch (`input`, or an operation's `diff`)",
            bytes(as_u64(apply_patch::MAX_PATCH_BYTES)),
            "an error result naming the size; nothing is changed",
        ),
        Limit::new(
            "agent",
            "a file `apply_patch` updates",
            bytes(apply_patch::MAX_FILE_BYTES),
            "an error result for that operation",
        ),
        Limit::new(
            "agent",
            "line comparisons one `apply_patch` spends placing its hunks",
            count(usize::try_from(apply_patch::MATCH_BUDGET).unwrap_or(usize::MAX)),
            "an error result for that operation",
        ),
        Limit::new(
            "agent",
            "one `apply_patch` call",
            seconds(apply_patch::TOOL_DEADLINE),
            "an error result; the work may still finish",
        ),
        Limit::new(
            "agent",
            "characters of a file or listing one `str_replace_based_edit_tool` `view` shows (without `max_characters`)",
            count(text_editor::MAX_VIEW_CHARACTERS),
            "the rest clipped, with the reference's `<response clipped>` note",
        ),
        Limit::new(
            "agent",
            "a file `str_replace_based_edit_tool` reads or writes",
            bytes(text_editor::MAX_FILE_BYTES),
            "an error result; nothing is changed",
        ),
        Limit::new(
            "agent",
            "one `str_replace_based_edit_tool` call",
            seconds(text_editor::TOOL_DEADLINE),
            "an error result; the work may still finish",
        ),
        Limit::new(
            "agent",
            "commands in one `shell` call",
            count(super::openai_shell::MAX_COMMANDS),
            "an error result; nothing is run",
        ),
        Limit::new(
            "agent",
            "one `shell` command",
            bytes(as_u64(super::openai_shell::MAX_COMMAND_BYTES)),
            "an error result; nothing is run",
        ),
        Limit::new(
            "agent",
            "a `shell` command's timeout without `timeout_ms`",
            seconds(super::openai_shell::DEFAULT_TIMEOUT),
            "the command's process group gets SIGKILL; outcome `timeout`, the later commands are not run",
        ),
        Limit::new(
            "agent",
            "a `shell` command's timeout (a larger `timeout_ms` is lowered to it)",
            seconds(super::openai_shell::MAX_TIMEOUT),
            "the command's process group gets SIGKILL; outcome `timeout`, the later commands are not run",
        ),
        Limit::new(
            "agent",
            "output one `shell` call keeps, all its commands' stdout and stderr together",
            "`--max-output` bytes",
            "the rest left out, stdout before stderr, command by command, with `[boxd: output truncated, N bytes omitted]`",
        ),
    ]
}
