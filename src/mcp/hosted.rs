//! One hosted MCP server: its connection (a stdio child in its own process group, SSE, or streamable
//! HTTP), its tools in the registry under its name, a restart on the next use after it died, and a stop
//! that leaves no process behind. Calls are never retried: a tool call may not be idempotent.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{NotificationContext, Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::config::{ServerSpec, Transport};
use super::sse::{SseClientTransport, header_map};
use crate::error::{ApiError, ApiResult};
use crate::process::signal_group;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolRegistry};

const STDERR_TAIL_LINES: usize = 20;
/// A call that gets no answer in this long fails (the server may still be working; it is not retried).
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
const STOP_GRACE: Duration = Duration::from_secs(2);

pub struct HostedServer {
    spec: ServerSpec,
    workspace: PathBuf,
    tools: Arc<ToolRegistry>,
    connection: tokio::sync::Mutex<Option<Connection>>,
    myself: Weak<HostedServer>,
}

struct Connection {
    service: RunningService<RoleClient, ToolListWatcher>,
    process_group: Option<i32>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

/// Refreshes the server's tools in the registry on `notifications/tools/list_changed`.
#[derive(Clone)]
struct ToolListWatcher {
    server: Weak<HostedServer>,
}

impl ClientHandler for ToolListWatcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let Some(server) = self.server.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let peer = server
                .connection
                .lock()
                .await
                .as_ref()
                .map(|c| c.service.peer().clone());
            if let Some(peer) = peer
                && let Err(err) = server.register_tools(&peer).await
            {
                tracing::warn!(server = %server.spec.name, "refreshing tools after list_changed failed: {err}");
            }
        });
    }
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    let lines = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if lines.is_empty() {
        String::new()
    } else {
        format!(
            "; stderr: {}",
            lines.iter().cloned().collect::<Vec<_>>().join(" | ")
        )
    }
}

impl HostedServer {
    /// Connects and initialises; fails fast with the reason (and the stderr tail of a stdio child) when it
    /// exits, refuses the handshake or exceeds its initialize timeout. Its tools are registered separately
    /// ([`Self::refresh_tools`]) so that the host can register several servers in a deterministic order.
    pub async fn start(
        spec: ServerSpec,
        workspace: PathBuf,
        tools: Arc<ToolRegistry>,
    ) -> Result<Arc<Self>, String> {
        let server = Arc::new_cyclic(|myself| HostedServer {
            spec,
            workspace,
            tools,
            connection: tokio::sync::Mutex::new(None),
            myself: myself.clone(),
        });
        let connection = server.connect().await?;
        *server.connection.lock().await = Some(connection);
        Ok(server)
    }

    /// Lists the server's tools and puts them in the registry (replacing earlier entries of this server).
    pub async fn refresh_tools(&self) -> Result<(), String> {
        let peer = self
            .connection
            .lock()
            .await
            .as_ref()
            .map(|c| c.service.peer().clone());
        let peer = peer.ok_or_else(|| "not connected".to_owned())?;
        self.register_tools(&peer)
            .await
            .map_err(|err| format!("listing its tools failed: {err}"))
    }

    async fn connect(&self) -> Result<Connection, String> {
        let watcher = ToolListWatcher {
            server: self.myself.clone(),
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let timeout = self.spec.initialize_timeout;
        let handshake_timeout = || format!("no MCP handshake within {timeout:?}");
        let (service, process_group) = match &self.spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut child = tokio::process::Command::new(command);
                child
                    .args(args)
                    .envs(env)
                    .current_dir(&self.workspace)
                    .process_group(0);
                let (transport, stderr) = TokioChildProcess::builder(child)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|err| format!("cannot start {command:?}: {err}"))?;
                let process_group = transport.id().map(|pid| pid as i32);
                let forwarder = stderr.map(|stderr| {
                    let tail = Arc::clone(&stderr_tail);
                    let name = self.spec.name.clone();
                    tokio::spawn(async move {
                        let mut lines = BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::info!(target: "boxd::mcp::child", server = %name, "{line}");
                            let mut tail =
                                tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                            if tail.len() == STDERR_TAIL_LINES {
                                tail.pop_front();
                            }
                            tail.push_back(line);
                        }
                    })
                });
                let handshake = match tokio::time::timeout(timeout, watcher.serve(transport)).await
                {
                    Ok(Ok(service)) => Ok(service),
                    Ok(Err(err)) => Err(format!("the MCP handshake failed ({err})")),
                    Err(_) => Err(handshake_timeout()),
                };
                match handshake {
                    Ok(service) => (service, process_group),
                    Err(reason) => {
                        if let Some(pgid) = process_group {
                            signal_group(pgid, libc::SIGKILL);
                        }
                        if let Some(forwarder) = forwarder {
                            // The child is gone: its stderr ends promptly; its last words explain the failure.
                            let _ =
                                tokio::time::timeout(Duration::from_millis(500), forwarder).await;
                        }
                        return Err(format!("{reason}{}", tail_text(&stderr_tail)));
                    }
                }
            }
            Transport::Sse { url, headers } => {
                let handshake = async {
                    let transport = SseClientTransport::connect(url, headers).await?;
                    watcher
                        .serve(transport)
                        .await
                        .map_err(|err| format!("the MCP handshake failed ({err})"))
                };
                let service = tokio::time::timeout(timeout, handshake)
                    .await
                    .map_err(|_| handshake_timeout())??;
                (service, None)
            }
            Transport::StreamableHttp { url, headers } => {
                let headers: HashMap<_, _> = header_map(headers)?
                    .into_iter()
                    .filter_map(|(k, v)| Some((k?, v)))
                    .collect();
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = tokio::time::timeout(timeout, watcher.serve(transport))
                    .await
                    .map_err(|_| handshake_timeout())?
                    .map_err(|err| format!("the MCP handshake with {url} failed ({err})"))?;
                (service, None)
            }
        };
        Ok(Connection {
            service,
            process_group,
            stderr_tail,
        })
    }

    /// Replaces this server's entries in the registry with its current tool list.
    ///
    /// Boxed with an explicit `Send`: the registered tools call back into this server, and the compiler
    /// cannot prove `Send` through that cycle of opaque futures on its own.
    fn register_tools<'a>(
        &'a self,
        peer: &'a Peer<RoleClient>,
    ) -> Pin<Box<dyn Future<Output = Result<(), ServiceError>> + Send + 'a>> {
        Box::pin(async move {
            let listed = peer.list_all_tools().await?;
            let mut tools = Vec::with_capacity(listed.len());
            for remote in listed {
                let remote_name = remote.name.to_string();
                let server = self.myself.clone();
                let call_name = remote_name.clone();
                tools.push(Tool::new(
                    &self.spec.name,
                    &remote_name,
                    remote.description.as_deref().unwrap_or_default(),
                    Value::Object((*remote.input_schema).clone()),
                    move |arguments: Value| {
                        let server = server.clone();
                        let call_name = call_name.clone();
                        async move {
                            let server = server.upgrade().ok_or_else(|| {
                                ApiError::NotFound(format!("tool {call_name} was removed"))
                            })?;
                            server.call(&call_name, arguments).await
                        }
                    },
                ));
            }
            let outcomes = self
                .tools
                .replace_group(&self.spec.name, tools)
                .map_err(|err| {
                    ServiceError::McpError(rmcp::model::ErrorData::invalid_params(
                        err.to_string(),
                        None,
                    ))
                })?;
            for outcome in outcomes {
                match outcome {
                    Ok(exposed) => {
                        tracing::debug!(server = %self.spec.name, tool = %exposed, "registered hosted tool")
                    }
                    Err(err) => tracing::warn!(server = %self.spec.name, "tool left out: {err}"),
                }
            }
            Ok(())
        })
    }

    /// The live peer, reconnecting first if the server died since its last use (with the reason logged).
    async fn live_peer(&self) -> ApiResult<Peer<RoleClient>> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection
            .as_ref()
            .filter(|c| !c.service.is_closed() && !c.service.peer().is_transport_closed())
        {
            return Ok(live.service.peer().clone());
        }
        let reason = match connection.take() {
            Some(dead) => format!("its connection closed{}", tail_text(&dead.stderr_tail)),
            None => "it was not running".to_owned(),
        };
        tracing::warn!(server = %self.spec.name, %reason, "restarting hosted MCP server for this call");
        let fresh = self.connect().await.map_err(|err| {
            ApiError::BadGateway(format!(
                "MCP server {} is down ({reason}) and did not restart: {err}",
                self.spec.name
            ))
        })?;
        let peer = fresh.service.peer().clone();
        *connection = Some(fresh);
        drop(connection);
        self.register_tools(&peer).await.map_err(|err| {
            ApiError::BadGateway(format!(
                "MCP server {} restarted but listing tools failed: {err}",
                self.spec.name
            ))
        })?;
        Ok(peer)
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> ApiResult<CallToolResult> {
        let Value::Object(arguments) = arguments else {
            return Err(ApiError::BadRequest(
                "arguments must be a JSON object".into(),
            ));
        };
        let peer = self.live_peer().await?;
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let answer = tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(request))
            .await
            .map_err(|_| {
                ApiError::GatewayTimeout(format!(
                    "{} did not answer {tool} within {CALL_TIMEOUT:?}",
                    self.spec.name
                ))
            })?;
        match answer {
            Ok(result) => Ok(from_mcp_result(&result)),
            Err(ServiceError::McpError(err)) => Err(match err.code.0 {
                -32602 => ApiError::BadRequest(format!("{tool}: {}", err.message)),
                -32601 => ApiError::NotFound(format!("{tool}: {}", err.message)),
                _ => ApiError::BadGateway(format!("{tool} on {}: {}", self.spec.name, err.message)),
            }),
            Err(err) => {
                if matches!(
                    err,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) {
                    self.mark_dead().await;
                }
                Err(ApiError::BadGateway(format!(
                    "{tool} on {} failed ({err}); not retried, the server restarts on its next use",
                    self.spec.name
                )))
            }
        }
    }

    /// Drops a connection whose transport failed, keeping its stderr tail for the restart's log line.
    async fn mark_dead(&self) {
        let mut connection = self.connection.lock().await;
        if let Some(dead) = connection.as_ref() {
            tracing::warn!(server = %self.spec.name, "connection lost{}", tail_text(&dead.stderr_tail));
            if let Some(pgid) = dead.process_group {
                signal_group(pgid, libc::SIGKILL);
            }
        }
        *connection = None;
    }

    /// Closes the session, then makes sure the child's whole process group is gone.
    pub async fn stop(&self) {
        self.tools.unregister_group(&self.spec.name);
        let Some(connection) = self.connection.lock().await.take() else {
            return;
        };
        let process_group = connection.process_group;
        let _ = tokio::time::timeout(STOP_GRACE, connection.service.cancel()).await;
        if let Some(pgid) = process_group {
            signal_group(pgid, libc::SIGTERM);
            tokio::time::sleep(Duration::from_millis(200)).await;
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Hosted results pass through as the server sent them (any content type), in upstream's field names.
fn from_mcp_result(result: &rmcp::model::CallToolResult) -> CallToolResult {
    let value = serde_json::to_value(result).unwrap_or_default();
    let content = value["content"]
        .as_array()
        .map(|items| items.iter().cloned().map(ContentItem::Raw).collect())
        .unwrap_or_default();
    CallToolResult {
        meta: value.get("_meta").cloned(),
        content,
        structured_content: value.get("structuredContent").cloned(),
        is_error: value["isError"].as_bool().unwrap_or(false),
    }
}
