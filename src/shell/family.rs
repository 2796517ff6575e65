//! The `shell` family: `run_shell_command`, nothing long-lived.

use std::sync::Arc;
use std::time::Duration;

use crate::family::{Family, Setup};
use crate::tools::Tool;
use crate::tools::admission::Admission;

/// Shell commands running at once (blocking and streamed calls together); past it a call waits for a
/// place at most [`COMMAND_ADMISSION_WAIT`], then is answered 429 with `Retry-After`. Long jobs
/// belong in `/processes`, which has its own cap. 128: a burst of an agent's parallel tool calls runs at
/// once (#21), while a runaway client still cannot fork without bound.
pub const MAX_CONCURRENT_COMMANDS: usize = 128;
/// How long a command waits for a place under [`MAX_CONCURRENT_COMMANDS`] before the busy answer.
pub const COMMAND_ADMISSION_WAIT: Duration = Duration::from_millis(500);

struct Shell {
    tool: Tool,
}

impl Family for Shell {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn tools(&self) -> Vec<Tool> {
        vec![self.tool.clone()]
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let args = setup.args;
    let limits = super::ShellLimits {
        default_timeout: crate::core::deadline::flag_seconds(
            "--command-timeout",
            args.command_timeout,
        )?,
        max_output_bytes: args.max_output,
        kill_grace: Duration::from_secs(2),
        drain: Duration::from_millis(200),
    };
    Ok(Arc::new(Shell {
        tool: super::tool(
            setup.workspace.real_root().to_path_buf(),
            limits,
            Admission::new(
                "shell commands",
                MAX_CONCURRENT_COMMANDS,
                COMMAND_ADMISSION_WAIT,
            ),
        ),
    }))
}
