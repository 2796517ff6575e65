//! `boxd mcp-stdio`: a stdio MCP server that relays to a remote boxd's `/mcp`, for MCP clients that can
//! only launch stdio servers (the job of upstream's host-side `runtime-sandbox-mcp`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long the relay waits for the remote boxd to close the session when its own client left (clients
/// give a stdio server about 2 s to exit).
const REMOTE_CLOSE: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct Relay {
    remote: Peer<RoleClient>,
    /// Cancelled when the stdio client closes our stdin. rmcp would then let handlers run on for seconds
    /// while it drains them, and clients kill a server that does not exit promptly, before it could close
    /// its remote session: so the relay closes it at once.
    stdin_closed: CancellationToken,
}

/// Stdin that cancels a token when it reaches end of file.
struct EofSignal<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            self.eof.cancel();
        }
        polled
    }
}

fn remote_error(err: rmcp::service::ServiceError) -> ErrorData {
    match err {
        rmcp::service::ServiceError::McpError(err) => err,
        other => ErrorData::internal_error(format!("remote boxd: {other}"), None),
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        super::tools_server_info("boxd-relay")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.remote.list_all_tools().await.map_err(remote_error)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Dropping the remote call makes rmcp send the remote boxd notifications/cancelled, which stops
        // the work there: a cancel from the stdio client travels all the way.
        let result = tokio::select! {
            // First: once stdin is closed, nothing more may be written (see `stdin_closed`).
            biased;
            () = self.stdin_closed.cancelled() => {
                // No answer: the client is gone, and some (the Python SDK) fail on a message after close.
                // `run` closes the remote session, which stops the remote work, and exits.
                return std::future::pending().await;
            }
            result = self.remote.call_tool(request) => result.map_err(remote_error)?,
            () = context.ct.cancelled() => {
                return Err(cancelled());
            }
        };
        Ok(CallToolResponse::Complete(result))
    }
}

fn cancelled() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(super::streamable::REQUEST_CANCELLED),
        "cancelled by the client",
        None,
    )
}

/// `url` is the boxd base URL (`http://host:port`, or with `/fastapi`), or its `/mcp` endpoint itself.
pub async fn run(url: &str, token: &str) -> Result<(), String> {
    let base = url.trim_end_matches('/');
    let endpoint = if base.ends_with("/mcp") {
        base.to_owned()
    } else {
        format!("{base}/mcp")
    };
    let config =
        StreamableHttpClientTransportConfig::with_uri(endpoint.as_str()).auth_header(token);
    let remote = ()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|err| format!("cannot reach boxd at {endpoint}: {err}"))?;
    tracing::info!(%endpoint, "relaying stdio MCP to boxd");
    let stdin_closed = CancellationToken::new();
    let relay = Relay {
        remote: remote.peer().clone(),
        stdin_closed: stdin_closed.clone(),
    };
    let (stdin, stdout) = rmcp::transport::stdio();
    let stdin = EofSignal {
        inner: stdin,
        eof: stdin_closed.clone(),
    };
    let served = relay
        .serve((stdin, stdout))
        .await
        .map_err(|err| format!("stdio MCP session failed to start: {err}"))?;
    let waiting = served.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => {}
        () = stdin_closed.cancelled() => {}
    }
    // Ending the remote session (DELETE) makes the remote boxd stop what this session's calls started.
    if tokio::time::timeout(REMOTE_CLOSE, remote.cancel())
        .await
        .is_err()
    {
        tracing::warn!(%endpoint, "the remote session did not close in time");
    }
    Ok(())
}
