//! The `shell` family: `run_shell_command`, nothing long-lived.

use std::sync::Arc;
use std::time::Duration;

use crate::family::{Family, Setup};
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

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let args = setup.args;
    let limits = super::ShellLimits {
        default_timeout: crate::cli::positive_seconds("--command-timeout", args.command_timeout)?,
        max_output_bytes: args.max_output,
        kill_grace: Duration::from_secs(2),
        drain: Duration::from_millis(200),
    };
    Ok(Arc::new(Shell {
        tool: super::tool(setup.workspace.real_root().to_path_buf(), limits),
    }))
}
