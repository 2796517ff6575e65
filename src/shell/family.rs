//! The `shell` family: `run_shell_command`, nothing long-lived.

use std::sync::Arc;
use std::time::Duration;

use crate::family::limits::{Limit, count, flag_seconds, seconds};
use crate::family::{COMMAND_ADMISSION_WAIT, Family, MAX_CONCURRENT_COMMANDS, Setup};
use crate::tools::Tool;

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

// The `shell` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// Default seconds before a shell command's process group is killed.
    #[arg(long, env = "BOXD_COMMAND_TIMEOUT", default_value_t = 300.0)]
    pub command_timeout: f64,
}

pub fn family(setup: &Setup, args: &ShellArgs) -> Result<Arc<dyn Family>, String> {
    let limits = super::ShellLimits {
        default_timeout: crate::core::deadline::positive_seconds(
            "--command-timeout",
            args.command_timeout,
        )?,
        max_output_bytes: setup.max_output,
        kill_grace: Duration::from_secs(2),
        drain: Duration::from_millis(200),
    };
    Ok(Arc::new(Shell {
        tool: super::tool(
            setup.workspace.real_root().to_path_buf(),
            limits,
            setup.commands.clone(),
        ),
    }))
}

/// The bounds the `shell` family keeps, for `boxd limits`.
pub fn limits(args: &ShellArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "shell",
            "one-shot commands running at once (shell commands, sandboxd's `Execute` and `/execute` together)",
            count(MAX_CONCURRENT_COMMANDS),
            "a call waits up to the next row, then 429 + `Retry-After` and is not run",
        ),
        Limit::new(
            "shell",
            "wait for a command slot",
            seconds(COMMAND_ADMISSION_WAIT),
            "429 + `Retry-After`",
        ),
        Limit::new(
            "shell",
            "default command timeout",
            flag_seconds(args.command_timeout, "--command-timeout"),
            "the process group gets TERM, then KILL; return code 124",
        ),
    ]
}
