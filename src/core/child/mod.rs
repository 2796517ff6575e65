//! Everything about boxd's children (shell commands, cells, live processes, hosted MCP servers, and next
//! Xvfb, Chromium and adb): how they are started, what they inherit and what they must not, how their
//! groups are signalled and stopped, their stderr, and what a previous boxd left behind.

mod environment;
mod group;
mod leftovers;
mod piped;
mod spawn;
mod stderr;

pub use environment::{
    runtime_environment, runtime_environment_set, set_runtime_environment, withhold_from_children,
};
pub use group::OwnedGroup;
pub use leftovers::{instance_key, mark_children, stop_leftovers};
pub use piped::{spawn_piped, spawn_piped_with_env};
pub use spawn::{
    Backoff, CHILD_OOM_SCORE_ADJ, ChildGroup, Grouping, command, interpreter_path,
    set_family_environment, spawn_failure,
};
pub use stderr::{STDERR_LINE_MAX, STDERR_TAIL_LINES, StderrTail};
