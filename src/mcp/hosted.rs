//! One hosted MCP server: its connection (a stdio child in its own process group, SSE, or streamable
//! HTTP), its tools in the registry under its name, a restart on the next use after it died, and a stop
//! that leaves no process behind. Calls are never retried: a tool call may not be idempotent.

use std::collections::HashMap;
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
use tokio_util::sync::CancellationToken;

use super::config::{ServerSpec, Transport};
use super::sse::{SseClientTransport, header_map};
use crate::core::child::{self, Backoff, ChildGroup, Grouping, StderrTail};
use crate::core::error::{ApiError, ApiResult};
use crate::tools::{CallToolResult, ContentItem, Tool, ToolRegistry};

/// A call that gets no answer in this long fails (the server may still be working; it is not retried).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(300);
const STOP_GRACE: Duration = Duration::from_secs(2);
/// A stdio server's group gets this long after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_millis(500);
/// After a failed restart, the next is tried no sooner than this (doubling up to `MAX_RESTART_BACKOFF`
/// while it keeps failing); calls meanwhile get the failure at once, not another wait for a handshake.
pub(super) const FIRST_RESTART_BACKOFF: Duration = Duration::from_secs(1);
pub(super) const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

pub struct HostedServer {
    spec: ServerSpec,
    workspace: PathBuf,
    tools: Arc<ToolRegistry>,
    connection: tokio::sync::Mutex<Option<Connection>>,
    myself: Weak<HostedServer>,
    /// Cancelled by `stop` (or with the host's at shutdown): a handshake in flight gives up and kills its
    /// child, and the server neither reconnects nor registers tools again.
    cancel: CancellationToken,
    restarts: Mutex<Restarts>,
}

/// When the next restart may be tried, and why the last one failed.
struct Restarts {
    backoff: Backoff,
    not_before: Option<(tokio::time::Instant, String)>,
}

struct Connection {
    service: RunningService<RoleClient, ToolListWatcher>,
    /// Dropping the connection, wherever that happens, kills the child's whole group.
    process_group: Option<ChildGroup>,
    stderr_tail: Option<StderrTail>,
}

impl Connection {
    fn last_words(&self) -> String {
        self.stderr_tail
            .as_ref()
            .map(StderrTail::text)
            .unwrap_or_default()
    }
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

impl HostedServer {
    /// Connects and initialises; fails fast with the reason (and the stderr tail of a stdio child) when it
    /// exits, refuses the handshake or exceeds its initialize timeout. Its tools are registered separately
    /// ([`Self::refresh_tools`]) so that the host can register several servers in a deterministic order.
    pub async fn start(
        spec: ServerSpec,
        workspace: PathBuf,
        tools: Arc<ToolRegistry>,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let server = Arc::new_cyclic(|myself| HostedServer {
            spec,
            workspace,
            tools,
            connection: tokio::sync::Mutex::new(None),
            myself: myself.clone(),
            cancel,
            restarts: Mutex::new(Restarts {
                backoff: Backoff::new(FIRST_RESTART_BACKOFF, MAX_RESTART_BACKOFF),
                not_before: None,
            }),
        });
        let connection = server.connect().await?;
        *server.connection.lock().await = Some(connection);
        Ok(server)
    }

    /// Lists the server's tools and puts them in the registry (replacing earlier entries of this server).
    /// The program and arguments its child is started with; `None` for a server reached by URL.
    pub fn command(&self) -> Option<(&str, &[String])> {
        match &self.spec.transport {
            Transport::Stdio { command, args, .. } => Some((command.as_str(), args.as_slice())),
            Transport::Sse { .. } | Transport::StreamableHttp { .. } => None,
        }
    }

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

    /// Bounds a handshake by the config's timeout and by this server's stop (or boxd's).
    async fn handshake<T>(
        &self,
        handshake: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let timeout = self.spec.initialize_timeout;
        tokio::select! {
            outcome = tokio::time::timeout(timeout, handshake) => {
                outcome.map_err(|_| format!("no MCP handshake within {timeout:?}"))?
            }
            () = self.cancel.cancelled() => {
                Err("stopped during its handshake (removed, replaced or boxd stopping)".to_owned())
            }
        }
    }

    async fn connect(&self) -> Result<Connection, String> {
        let watcher = ToolListWatcher {
            server: self.myself.clone(),
        };
        let (service, process_group, stderr_tail) = match &self.spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut child = child::command(command, Grouping::OwnGroup);
                child.args(args).envs(env).current_dir(&self.workspace);
                let (transport, stderr) = TokioChildProcess::builder(child)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|err| format!("cannot start {command:?}: {err}"))?;
                // From here on, however this future ends (failure, timeout, stop, or the request being
                // dropped), the group does not outlive it unless the connection takes it over.
                let process_group = ChildGroup::of(transport.id(), Grouping::OwnGroup);
                let mut stderr_tail = stderr
                    .map(|stderr| StderrTail::forward(stderr, format!("mcp:{}", self.spec.name)));
                let handshake = self
                    .handshake(async {
                        watcher
                            .serve(transport)
                            .await
                            .map_err(|err| format!("the MCP handshake failed ({err})"))
                    })
                    .await;
                match handshake {
                    Ok(service) => (service, process_group, stderr_tail),
                    Err(reason) => {
                        drop(process_group);
                        // The child is gone: its stderr ends promptly; its last words explain the failure.
                        let words = match stderr_tail.as_mut() {
                            Some(tail) => tail.last_words(Duration::from_millis(500)).await,
                            None => String::new(),
                        };
                        return Err(format!("{reason}{words}"));
                    }
                }
            }
            Transport::Sse { url, headers } => {
                let service = self
                    .handshake(async {
                        let transport = SseClientTransport::connect(url, headers).await?;
                        watcher
                            .serve(transport)
                            .await
                            .map_err(|err| format!("the MCP handshake failed ({err})"))
                    })
                    .await?;
                (service, None, None)
            }
            Transport::StreamableHttp { url, headers } => {
                let headers: HashMap<_, _> = header_map(headers)?
                    .into_iter()
                    .filter_map(|(k, v)| Some((k?, v)))
                    .collect();
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = self
                    .handshake(async {
                        watcher
                            .serve(transport)
                            .await
                            .map_err(|err| format!("the MCP handshake with {url} failed ({err})"))
                    })
                    .await?;
                (service, None, None)
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
            // A refresh that was under way when the server was stopped must not bring its tools back.
            if self.cancel.is_cancelled() {
                return Ok(());
            }
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
        if self.cancel.is_cancelled() {
            return Err(ApiError::NotFound(format!(
                "MCP server {} was removed",
                self.spec.name
            )));
        }
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection
            .as_ref()
            .filter(|c| !c.service.is_closed() && !c.service.peer().is_transport_closed())
        {
            return Ok(live.service.peer().clone());
        }
        if let Some((not_before, failure)) = self.restart_not_before()
            && tokio::time::Instant::now() < not_before
        {
            let wait = not_before.saturating_duration_since(tokio::time::Instant::now());
            return Err(ApiError::Unavailable {
                message: format!(
                    "MCP server {} is down and its last restart failed ({failure}); the next try is in {}s",
                    self.spec.name,
                    wait.as_secs() + 1
                ),
                retry_after_seconds: wait.as_secs() + 1,
            });
        }
        // Dropping the dead connection kills what is left of its process group.
        let reason = match connection.take() {
            Some(dead) => format!("its connection closed{}", dead.last_words()),
            None => "it was not running".to_owned(),
        };
        tracing::warn!(server = %self.spec.name, %reason, "restarting hosted MCP server for this call");
        let fresh = match self.connect().await {
            Ok(fresh) => {
                self.restart_succeeded();
                fresh
            }
            Err(err) => {
                let failure = format!("{reason}; it did not restart: {err}");
                self.restart_failed(&failure);
                return Err(ApiError::BadGateway(format!(
                    "MCP server {} is down ({reason}) and did not restart: {err}",
                    self.spec.name
                )));
            }
        };
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
            return Err(ApiError::Unprocessable(
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

    fn restart_not_before(&self) -> Option<(tokio::time::Instant, String)> {
        let restarts = self
            .restarts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        restarts.not_before.clone()
    }

    fn restart_failed(&self, failure: &str) {
        let mut restarts = self
            .restarts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let delay = restarts.backoff.next_delay();
        restarts.not_before = Some((tokio::time::Instant::now() + delay, failure.to_owned()));
    }

    fn restart_succeeded(&self) {
        let mut restarts = self
            .restarts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        restarts.backoff.reset();
        restarts.not_before = None;
    }

    /// Drops a connection whose transport failed, keeping its stderr tail for the restart's log line.
    async fn mark_dead(&self) {
        let mut connection = self.connection.lock().await;
        if let Some(dead) = connection.take() {
            tracing::warn!(server = %self.spec.name, "connection lost{}", dead.last_words());
        }
    }

    /// Closes the session, then makes sure the child's whole process group is gone.
    pub async fn stop(&self) {
        // First, so that a reconnect holding the connection's lock gives up its handshake now.
        self.cancel.cancel();
        self.tools.unregister_group(&self.spec.name);
        let Some(Connection {
            service,
            process_group,
            ..
        }) = self.connection.lock().await.take()
        else {
            return;
        };
        let _ = tokio::time::timeout(STOP_GRACE, service.cancel()).await;
        if let Some(group) = process_group {
            group.terminate(TERM_GRACE).await;
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
