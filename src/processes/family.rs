//! The `processes` family: live processes (`/processes/*`), with or without a terminal.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::core::footprint::Held;
use crate::core::live::{ProcessLimits, ProcessManager, stdin};
use crate::family::limits::{Limit, as_u64, bytes, flag_seconds, seconds};
use crate::family::{BoxFuture, Family, Setup};

struct Processes {
    manager: Arc<ProcessManager>,
}

impl Family for Processes {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn routes(&self) -> Router {
        super::routes().with_state(Arc::clone(&self.manager))
    }

    /// Every running live process (with whatever it started).
    fn held_processes(&self) -> Vec<Held> {
        self.manager
            .running_pids()
            .into_iter()
            .map(Held::Tree)
            .collect()
    }

    /// Kills every live process group; the streams following them end with it.
    fn stop(&self) -> BoxFuture<'_, ()> {
        let manager = Arc::clone(&self.manager);
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || manager.shutdown()).await;
        })
    }
}

// The `processes` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct ProcessesArgs {
    /// Live processes (`/processes`) running at once.
    #[arg(long, env = "BOXD_MAX_PROCESSES", default_value_t = 64)]
    pub max_processes: usize,
    /// Output kept per live process, in bytes (the oldest is dropped first).
    #[arg(long, env = "BOXD_PROCESS_BUFFER", default_value_t = 1024 * 1024)]
    pub process_buffer: usize,
    /// Seconds an exited live process stays readable (status and output).
    #[arg(long, env = "BOXD_PROCESS_RETENTION", default_value_t = 600.0)]
    pub process_retention: f64,
}

/// The bounds of boxd's one table of live processes, from this family's flags: the table is shared
/// (`Setup::live`), with the `sandboxd` family's `ProcessService` too.
pub fn table_limits(args: &ProcessesArgs) -> Result<ProcessLimits, String> {
    Ok(ProcessLimits {
        max_running: args.max_processes.max(1),
        max_kept: args.max_processes.saturating_mul(4).max(64),
        buffer_bytes: args.process_buffer.max(4096),
        retention: crate::core::deadline::positive_seconds(
            "--process-retention",
            args.process_retention,
        )?,
        kill_grace: Duration::from_secs(2),
        drain: Duration::from_millis(200),
    })
}

pub fn family(setup: &Setup, _args: &ProcessesArgs) -> Result<Arc<dyn Family>, String> {
    Ok(Arc::new(Processes {
        manager: Arc::clone(setup.live),
    }))
}

/// The bounds the `processes` family keeps, for `boxd limits`.
pub fn limits(args: &ProcessesArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "processes",
            "live processes running at once",
            format!("{} (`--max-processes`)", args.max_processes),
            "429",
        ),
        Limit::new(
            "processes",
            "output kept per live process",
            format!(
                "{} (`--process-buffer`)",
                bytes(as_u64(args.process_buffer))
            ),
            "the oldest output is dropped; reads from an older offset say so",
        ),
        Limit::new(
            "processes",
            "how long an exited process stays readable",
            flag_seconds(args.process_retention, "--process-retention"),
            "404",
        ),
        Limit::new(
            "processes",
            "one stdin body",
            bytes(as_u64(stdin::BODY_MAX)),
            "413",
        ),
        Limit::new(
            "processes",
            "stdin queued for a process that does not read",
            format!(
                "{}, waited for up to {}",
                bytes(as_u64(stdin::QUEUE_BYTES)),
                seconds(stdin::WAIT)
            ),
            "503 + `Retry-After`",
        ),
        Limit::new(
            "processes",
            "one WebSocket message",
            bytes(as_u64(super::routes::WEBSOCKET_MESSAGE_MAX)),
            "the socket is closed (message too big)",
        ),
    ]
}
