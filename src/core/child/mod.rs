//! Everything about boxd's children (shell commands, cells, live processes, hosted MCP servers, and next
//! Xvfb, Chromium and adb): how they are started, what they inherit and what they must not, how their
//! groups are signalled and stopped, their stderr, and what a previous (or a killed) boxd left behind.

mod captured;
mod environment;
mod fork;
mod group;
mod identity;
mod leftovers;
mod piped;
mod reaper;
mod spawn;
mod stderr;

pub use captured::{AtTimeout, OutputSink, RunBounds, exit_code_like_python, run_captured};
pub use environment::{
    runtime_environment, runtime_environment_set, set_runtime_environment, withhold_from_children,
};
pub use fork::run_forked;
pub use group::OwnedGroup;
pub use identity::{Identity, boxd_is_root, probe_user_namespaces};
pub use leftovers::{carries_any_marker, instance_key, mark_children, stop_leftovers};
pub use piped::{spawn_piped, spawn_piped_with_env};
pub use reaper::{REAPER_COMMAND, guard_pid, reaper_main, spawn_reaper};
pub use spawn::{
    Backoff, CHILD_OOM_SCORE_ADJ, ChildGroup, Grouping, command, command_as, interpreter_path,
    set_family_environment, spawn_failure,
};
pub use stderr::{STDERR_LINE_MAX, STDERR_TAIL_LINES, StderrTail};
