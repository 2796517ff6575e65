//! `boxd mcp-stdio`: a stdio MCP server that relays to a remote boxd's `/mcp`, for MCP clients that can
//! only launch stdio servers (the job of upstream's host-side `runtime-sandbox-mcp`).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

#[derive(Clone)]
struct Relay {
    remote: Peer<RoleClient>,
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = self.remote.call_tool(request).await.map_err(remote_error)?;
        Ok(CallToolResponse::Complete(result))
    }
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
    let relay = Relay {
        remote: remote.peer().clone(),
    };
    let served = relay
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|err| format!("stdio MCP session failed to start: {err}"))?;
    let _ = served.waiting().await;
    let _ = remote.cancel().await;
    Ok(())
}
