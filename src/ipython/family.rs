//! The `ipython` family: `run_ipython_cell` on one supervised kernel, started when the first request
//! reaches boxd (or with boxd: `--kernel-start eager`), restarted with backoff while it cannot start (the
//! reason shows in `/readyz` and in each refused call), and recycled between cells past an RSS cap.

use std::sync::Arc;
use std::time::Duration;

use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, bytes, count, flag_seconds, seconds};
use crate::family::{BoxFuture, Family, Setup};
use crate::tools::Tool;

/// How long a timed-out cell has to stop on SIGINT before the kernel is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

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

    /// The kernel (boxd's child running the helper) and whatever its cells started.
    fn held_processes(&self) -> Vec<Held> {
        vec![Held::Children {
            program: self.config.python.clone(),
            args: ["-u", "-c", super::HELPER].map(String::from).to_vec(),
        }]
    }

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.bridge.run_worker(self.config.clone(), health) })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.bridge.stop())
    }
}

// The `ipython` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct IpythonArgs {
    /// Python interpreter for the IPython kernel (IPython must be importable there).
    #[arg(long, env = "BOXD_PYTHON", default_value = "python3")]
    pub python: String,
    /// Default seconds before an IPython cell is interrupted.
    #[arg(long, env = "BOXD_CELL_TIMEOUT", default_value_t = 300.0)]
    pub cell_timeout: f64,
    /// When the IPython kernel starts: at the first request of any kind that reaches boxd (which does
    /// not wait for it), or with boxd.
    #[arg(long, env = "BOXD_KERNEL_START", value_enum, default_value_t = KernelStart::OnFirstRequest)]
    pub kernel_start: KernelStart,
    /// MiB of resident memory (the kernel's process tree) past which the IPython kernel is restarted
    /// between cells; 0: no cap.
    #[arg(long, env = "BOXD_KERNEL_MAX_RSS", default_value_t = 2048)]
    pub kernel_max_rss: u64,
    /// Whether a spare IPython kernel is kept, started once a cell has been answered, so a restart
    /// swaps it in (~1 ms) instead of starting a fresh interpreter (~0.2 s); `off` saves its memory
    /// (the RSS of an idle kernel, ~40 MiB).
    #[arg(long, env = "BOXD_KERNEL_SPARE", value_enum, default_value_t = KernelSpare::On)]
    pub kernel_spare: KernelSpare,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelSpare {
    /// Kept while cells come: dropped after 10 minutes without one, warmed again after the next.
    On,
    /// None: a restart starts a fresh interpreter.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelStart {
    /// With boxd, before any client (the kernel's memory is paid by every idle sandbox).
    Eager,
    /// When the first request reaches boxd: a sandbox nobody contacted holds no kernel.
    OnFirstRequest,
}

pub fn family(setup: &Setup, args: &IpythonArgs) -> Result<Arc<dyn Family>, String> {
    let config = super::KernelConfig {
        python: crate::core::child::interpreter_path(&args.python),
        workspace: setup.workspace.real_root().to_path_buf(),
        default_timeout: crate::core::deadline::positive_seconds(
            "--cell-timeout",
            args.cell_timeout,
        )?,
        interrupt_grace: INTERRUPT_GRACE,
        start_timeout: Duration::from_secs(60),
        max_output_bytes: setup.max_output,
        wait_for_a_client: args.kernel_start == KernelStart::OnFirstRequest,
        max_rss: match args.kernel_max_rss {
            0 => None,
            mib => Some(mib.checked_mul(super::MIB).ok_or_else(|| {
                format!("--kernel-max-rss {mib}: more MiB than a process can hold")
            })?),
        },
        spare: args.kernel_spare == KernelSpare::On,
    };
    let bridge = super::IpythonBridge::new(config.default_timeout);
    Ok(Arc::new(Ipython {
        config,
        tool: super::tool(bridge.clone()),
        bridge,
    }))
}

/// The bounds the `ipython` family keeps, for `boxd limits`.
pub fn limits(args: &IpythonArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "ipython",
            "cells waiting behind the running one",
            count(super::MAX_QUEUED_CELLS),
            "429 + `Retry-After` at once; the cell is not run",
        ),
        Limit::new(
            "ipython",
            "wait of a queued cell for its turn",
            seconds(super::CELL_QUEUE_WAIT),
            "429 + `Retry-After`; the cell is not run",
        ),
        Limit::new(
            "ipython",
            "default cell timeout",
            flag_seconds(args.cell_timeout, "--cell-timeout"),
            "SIGINT (state kept); a cell that ignores it for the next row kills the kernel (state lost, said so)",
        ),
        Limit::new(
            "ipython",
            "grace of an interrupted cell",
            seconds(INTERRUPT_GRACE),
            "the kernel is killed and restarts",
        ),
        Limit::new(
            "ipython",
            "resident memory (RSS) of the kernel and its children",
            match args.kernel_max_rss {
                0 => "none (`--kernel-max-rss 0`)".to_owned(),
                mib => format!(
                    "{mib} MiB (`--kernel-max-rss`), read after each cell and every {} between cells",
                    seconds(super::RSS_CHECK_INTERVAL)
                ),
            },
            "the kernel is restarted between cells, never during one (state lost); the next cell's stdout starts with a line saying so and why",
        ),
        Limit::new(
            "ipython",
            "spare kernel kept without a cell",
            match args.kernel_spare {
                KernelSpare::On => format!("{} (`--kernel-spare on`)", seconds(super::SPARE_IDLE)),
                KernelSpare::Off => "no spare (`--kernel-spare off`)".to_owned(),
            },
            "the spare is stopped; the next cell's answer starts one again",
        ),
        Limit::new(
            "ipython",
            "images of one cell (base64)",
            bytes(16 * 1024 * 1024),
            "later images dropped with a note in stdout (`MAX_IMAGE_BYTES` in the kernel helper)",
        ),
    ]
}
