//! The `mcp` family: hosting more MCP servers (`/mcp/add_servers`, `--mcp-config`). The tool listing
//! and call routes and boxd's own `/mcp` server are not part of it: every image has those
//! (`mcp_server`).

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;

use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, seconds};
use crate::family::{BoxFuture, Family, Setup};

struct Hosting {
    host: Arc<super::McpHost>,
    config: Option<PathBuf>,
}

impl Family for Hosting {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn routes(&self) -> Router {
        super::hosting_routes(Arc::clone(&self.host))
    }

    /// Servers of `--mcp-config` start in the background (npx and uvx download themselves); until they
    /// are up the family is `starting`, and a failure shows in `/readyz` with its reason.
    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let Some(config) = self.config.clone() else {
                health.ready();
                return;
            };
            health.starting(format!("starting the MCP servers of {}", config.display()));
            match self.host.add_from_file(&config).await {
                Ok(()) => {
                    tracing::info!(config = %config.display(), "MCP servers from config started");
                    health.ready();
                }
                Err(err) => {
                    tracing::error!(config = %config.display(), "MCP servers from config: {err}");
                    health.degraded(format!("--mcp-config {}: {err}", config.display()));
                }
            }
        })
    }

    /// Each hosted stdio server's child (and what it started: `npx`'s node, `uvx`'s Python).
    fn held_processes(&self) -> Vec<Held> {
        self.host
            .lock()
            .servers
            .values()
            .filter_map(|server| server.command())
            .map(|(program, args)| Held::Children {
                program: program.to_owned(),
                args: args.to_vec(),
            })
            .collect()
    }

    /// Hosted children run in their own process groups: stop them explicitly, or they outlive boxd.
    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.host.shutdown())
    }
}

// The `mcp` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// MCP servers to host at start-up (upstream's mcp_server_configs.json format).
    #[arg(long, env = "BOXD_MCP_CONFIG")]
    pub mcp_config: Option<PathBuf>,
}

pub fn family(setup: &Setup, args: &McpArgs) -> Result<Arc<dyn Family>, String> {
    Ok(Arc::new(Hosting {
        host: Arc::new(super::McpHost::new(
            Arc::clone(setup.tools),
            setup.workspace.real_root().to_path_buf(),
        )),
        config: args.mcp_config.clone(),
    }))
}

/// The bounds the `mcp` family keeps, for `boxd limits`.
pub fn limits(_: &McpArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "mcp",
            "a hosted server's handshake",
            format!(
                "{} by default, at most {}",
                seconds(super::config::DEFAULT_INITIALIZE_TIMEOUT),
                seconds(super::config::MAX_INITIALIZE_TIMEOUT)
            ),
            "the server is reported failed (502 from `add_servers`); a larger setting is a 400",
        ),
        Limit::new(
            "mcp",
            "one call to a hosted server",
            seconds(super::hosted::CALL_TIMEOUT),
            "504; not retried",
        ),
        Limit::new(
            "mcp",
            "wait before restarting a hosted server whose restart failed",
            format!(
                "{} doubling to {}",
                seconds(super::hosted::FIRST_RESTART_BACKOFF),
                seconds(super::hosted::MAX_RESTART_BACKOFF)
            ),
            "calls meanwhile get 503 + `Retry-After` with the failure",
        ),
    ]
}
