//! What every child of boxd (shell commands, cells, live processes, hosted MCP servers, and next Xvfb,
//! Chromium and adb) inherits, and what it must not.

mod environment;
mod leftovers;

pub use environment::withhold_from_children;
pub use leftovers::{instance_key, mark_children, stop_leftovers};
