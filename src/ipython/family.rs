//! The `ipython` family: `run_ipython_cell` on one supervised kernel, warmed at start, restarted with
//! backoff while it cannot start (the reason shows in `/readyz` and in each refused call).

use std::sync::Arc;
use std::time::Duration;

use crate::family::{BoxFuture, Family, Health, Setup};
use crate::tools::Tool;

/// How long a timed-out cell has to stop on SIGINT before the kernel is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

struct Ipython {
    config: super::KernelConfig,
    bridge: super::IpythonBridge,
    tool: Tool,
}

impl Family for Ipython {
    fn name(&self) -> &'static str {
        "ipython"
    }

    fn tools(&self) -> Vec<Tool> {
        vec![self.tool.clone()]
    }

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.bridge.run_worker(self.config.clone(), health) })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.bridge.stop())
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let args = setup.args;
    let config = super::KernelConfig {
        python: interpreter_path(&args.python),
        workspace: setup.workspace.real_root().to_path_buf(),
        default_timeout: crate::core::deadline::flag_seconds("--cell-timeout", args.cell_timeout)?,
        interrupt_grace: INTERRUPT_GRACE,
        start_timeout: Duration::from_secs(60),
        max_output_bytes: args.max_output,
    };
    let bridge = super::IpythonBridge::new(config.default_timeout);
    Ok(Arc::new(Ipython {
        config,
        tool: super::tool(bridge.clone()),
        bridge,
    }))
}

/// A relative interpreter path (`.venv/bin/python`) means relative to where boxd was started, not to the
/// workspace the kernel runs in; a bare name (`python3`) is looked up on PATH as usual.
fn interpreter_path(python: &str) -> String {
    let path = std::path::Path::new(python);
    if path.is_relative()
        && path.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(path).to_string_lossy().into_owned();
    }
    python.to_owned()
}
