//! MCP servers hosted by boxd: `/mcp/add_servers` and `--mcp-config`. Each hosted server's tools live in
//! the shared tool registry under the server's name, so a call goes straight to the tool's owner (no
//! fan-out) and the same entries serve every surface (`/mcp/list_tools`, `/mcp/call_tool`, `/mcp`).

mod family;
pub use family::{McpArgs, family, limits};

mod config;
mod hosted;
mod sse;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::extract::ApiJson;
use crate::core::error::{ApiError, ApiResult};
use crate::tools::ToolRegistry;
use config::parse_servers;
use hosted::HostedServer;

pub struct McpHost {
    /// Held only to look at or change the maps, never across a handshake or a stop.
    hosted: std::sync::Mutex<Hosted>,
    tools: Arc<ToolRegistry>,
    workspace: PathBuf,
    /// Cancelled at shutdown: handshakes in flight give up (killing their child) instead of being waited on.
    closing: CancellationToken,
}

#[derive(Default)]
struct Hosted {
    servers: BTreeMap<String, Arc<HostedServer>>,
    /// Names an `add_servers` has claimed and is starting, so no other request starts or replaces them.
    starting: BTreeSet<String>,
}

/// The names an `add_servers` claimed and has not handed over to `servers`. Released on drop, also when
/// the request is dropped mid-way, and whatever such a server registered is removed with it.
struct Claim<'a> {
    host: &'a McpHost,
    names: Vec<String>,
}

impl Claim<'_> {
    /// Moves a started server from "starting" to "hosted", unless boxd is stopping (then it is handed back).
    fn settle(&mut self, name: &str, server: Arc<HostedServer>) -> Result<(), Arc<HostedServer>> {
        let mut hosted = self.host.lock();
        if self.host.closing.is_cancelled() {
            return Err(server);
        }
        hosted.starting.remove(name);
        hosted.servers.insert(name.to_owned(), server);
        self.names.retain(|claimed| claimed != name);
        Ok(())
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut hosted = self.host.lock();
        for name in &self.names {
            hosted.starting.remove(name);
            self.host.tools.unregister_group(name);
        }
    }
}

impl McpHost {
    pub fn new(tools: Arc<ToolRegistry>, workspace: PathBuf) -> Self {
        McpHost {
            hosted: std::sync::Mutex::new(Hosted::default()),
            tools,
            workspace,
            closing: CancellationToken::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hosted> {
        self.hosted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the servers of `configs` concurrently. A name already hosted is skipped unless `overwrite`
    /// (then the old one is stopped first). Servers that start stay even if others fail; the failed ones
    /// are cleaned up and named, with their reasons, in the error. No lock is held while servers start:
    /// a hung handshake delays only its own request.
    pub async fn add_servers(&self, configs: &Value, overwrite: bool) -> ApiResult<()> {
        let specs = parse_servers(configs)?;
        if let Some(taken) = specs.iter().find(|spec| self.tools.is_reserved(&spec.name)) {
            return Err(crate::tools::RegistryError::ReservedGroup(taken.name.clone()).into());
        }
        let mut claim = Claim {
            host: self,
            names: Vec::new(),
        };
        let mut replaced = Vec::new();
        let mut to_start = Vec::new();
        {
            let mut hosted = self.lock();
            if self.closing.is_cancelled() {
                return Err(ApiError::Conflict(
                    "boxd is stopping; no MCP server is started".into(),
                ));
            }
            if overwrite
                && let Some(busy) = specs
                    .iter()
                    .find(|spec| hosted.starting.contains(&spec.name))
            {
                return Err(ApiError::Conflict(format!(
                    "MCP server {} is being started by another request; retry once that one answered",
                    busy.name
                )));
            }
            for spec in specs {
                if hosted.starting.contains(&spec.name) {
                    tracing::info!(server = %spec.name, "MCP server is already starting; skipped (overwrite is false)");
                    continue;
                }
                if hosted.servers.contains_key(&spec.name) {
                    if !overwrite {
                        tracing::info!(server = %spec.name, "MCP server already hosted; skipped (overwrite is false)");
                        continue;
                    }
                    tracing::info!(server = %spec.name, "replacing hosted MCP server");
                    replaced.extend(hosted.servers.remove(&spec.name));
                }
                hosted.starting.insert(spec.name.clone());
                claim.names.push(spec.name.clone());
                to_start.push(spec);
            }
        }
        join_all(replaced.iter().map(|server| server.stop())).await;
        let started = join_all(to_start.into_iter().map(|spec| {
            let name = spec.name.clone();
            let start = HostedServer::start(
                spec,
                self.workspace.clone(),
                Arc::clone(&self.tools),
                self.closing.child_token(),
            );
            async move { (name, start.await) }
        }))
        .await;
        let mut failures = Vec::new();
        // Connected concurrently, registered one by one in name order: which server keeps a contested tool
        // name must not depend on which one answered first.
        let mut started: Vec<_> = started.into_iter().collect();
        started.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, outcome) in started {
            let registered = match outcome {
                Ok(server) => match server.refresh_tools().await {
                    Ok(()) => Ok(server),
                    Err(reason) => {
                        server.stop().await;
                        Err(reason)
                    }
                },
                Err(reason) => Err(reason),
            };
            let settled = match registered {
                Ok(server) => match claim.settle(&name, server) {
                    Ok(()) => Ok(()),
                    Err(server) => {
                        server.stop().await;
                        Err("boxd is stopping".to_owned())
                    }
                },
                Err(reason) => Err(reason),
            };
            match settled {
                Ok(()) => tracing::info!(server = %name, "hosted MCP server ready"),
                Err(reason) => {
                    tracing::warn!(server = %name, "hosted MCP server failed to start: {reason}");
                    failures.push(format!("{name}: {reason}"));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(ApiError::BadGateway(format!(
                "Failed to initialize MCP servers: {}",
                failures.join("; ")
            )))
        }
    }

    /// Loads upstream's `mcp_server_configs.json` format from a file (at start-up, in the background).
    pub async fn add_from_file(&self, path: &Path) -> ApiResult<()> {
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|err| ApiError::from_io(&err, &path.display().to_string()))?;
        let configs: Value = serde_json::from_str(&text)
            .map_err(|err| ApiError::BadRequest(format!("{}: {err}", path.display())))?;
        self.add_servers(&configs, false).await
    }

    /// Stops every hosted server (and its process group). Servers still in their handshake are not waited
    /// on: they give up at once and kill their own child.
    pub async fn shutdown(&self) {
        self.closing.cancel();
        let servers: Vec<_> = std::mem::take(&mut self.lock().servers)
            .into_values()
            .collect();
        join_all(servers.iter().map(|server| server.stop())).await;
        if !servers.is_empty() {
            tracing::info!(count = servers.len(), "hosted MCP servers stopped");
        }
    }
}

/// Hosting more MCP servers (arbitrary commands): the `mcp` family's route.
pub fn hosting_routes(host: Arc<McpHost>) -> Router {
    Router::new()
        .route("/mcp/add_servers", post(add_servers))
        .with_state(host)
}

#[derive(Deserialize)]
struct AddServersRequest {
    #[serde(default)]
    server_configs: Value,
    #[serde(default)]
    overwrite: bool,
}

async fn add_servers(
    State(host): State<Arc<McpHost>>,
    ApiJson(request): ApiJson<AddServersRequest>,
) -> ApiResult<&'static str> {
    if !request.server_configs.is_object() {
        return Err(ApiError::BadRequest("server_configs is required".into()));
    }
    host.add_servers(&request.server_configs, request.overwrite)
        .await?;
    Ok("OK")
}
