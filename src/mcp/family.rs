//! The `mcp` family: hosting more MCP servers (`/mcp/add_servers`, `--mcp-config`). The tool listing
//! and call routes and boxd's own `/mcp` server are not part of it: every image has those
//! (`mcp_server`).

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;

use crate::family::{BoxFuture, Family, Health, Setup};

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

    /// Hosted children run in their own process groups: stop them explicitly, or they outlive boxd.
    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.host.shutdown())
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    Ok(Arc::new(Hosting {
        host: Arc::new(super::McpHost::new(
            Arc::clone(setup.tools),
            setup.workspace.real_root().to_path_buf(),
        )),
        config: setup.args.mcp_config.clone(),
    }))
}
