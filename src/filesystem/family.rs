//! The `filesystem` family: the eleven server-filesystem tools over the workspace and `--allow-dir`s.

use std::sync::Arc;

use crate::family::limits::{Limit, bytes, count, seconds};
use crate::family::{Family, Setup};
use crate::tools::Tool;

struct Filesystem {
    tools: Vec<Tool>,
}

impl Family for Filesystem {
    fn name(&self) -> &'static str {
        "filesystem"
    }

    fn tools(&self) -> Vec<Tool> {
        self.tools.clone()
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP]
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let allowed = setup.allowed_dirs()?;
    Ok(Arc::new(Filesystem {
        tools: super::tools(allowed),
    }))
}

/// The bounds the `filesystem` family keeps, for `boxd limits`.
pub fn limits() -> Vec<Limit> {
    vec![
        Limit::new(
            "filesystem",
            "a file read by `read_file`, `read_multiple_files`, `edit_file`",
            bytes(super::MAX_READ_BYTES),
            "an error result naming the size",
        ),
        Limit::new(
            "filesystem",
            "entries one `directory_tree` or `search_files` walks",
            count(super::walk::MAX_WALK_ENTRIES),
            "an error result (tree) or a note that the search stopped there",
        ),
        Limit::new(
            "filesystem",
            "matches of one `search_files`",
            count(super::walk::MAX_SEARCH_MATCHES),
            "the list is cut, and says so",
        ),
        Limit::new(
            "filesystem",
            "work of one whitespace-tolerant `edit_file` match (line comparisons)",
            count(usize::try_from(super::edit::MATCH_BUDGET).unwrap_or(usize::MAX)),
            "an error result",
        ),
        Limit::new(
            "filesystem",
            "one filesystem tool call",
            seconds(super::TOOL_DEADLINE),
            "an error result",
        ),
    ]
}
