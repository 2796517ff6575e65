//! The `processes` family: live processes (`/processes/*`), with or without a terminal.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::family::{BoxFuture, Family, Setup};

struct Processes {
    manager: Arc<super::ProcessManager>,
}

impl Family for Processes {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn routes(&self) -> Router {
        super::routes().with_state(Arc::clone(&self.manager))
    }

    /// Kills every live process group; the streams following them end with it.
    fn stop(&self) -> BoxFuture<'_, ()> {
        let manager = Arc::clone(&self.manager);
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || manager.shutdown()).await;
        })
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let args = setup.args;
    let limits = super::ProcessLimits {
        max_running: args.max_processes.max(1),
        max_kept: args.max_processes.saturating_mul(4).max(64),
        buffer_bytes: args.process_buffer.max(4096),
        retention: crate::core::deadline::flag_seconds(
            "--process-retention",
            args.process_retention,
        )?,
        kill_grace: Duration::from_secs(2),
        drain: Duration::from_millis(200),
    };
    Ok(Arc::new(Processes {
        manager: super::ProcessManager::new(Arc::new(setup.workspace.clone()), limits),
    }))
}
