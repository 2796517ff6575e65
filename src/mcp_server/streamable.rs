//! boxd as an MCP server: the whole tool registry (built-ins and hosted tools) over streamable HTTP at
//! `/mcp`, behind the same bearer auth as every route, so any MCP client can use a sandbox directly.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::core::error::ApiError;
use crate::tools::{CallContext, ToolRegistry};

/// JSON-RPC code of a request its client cancelled (as LSP names it; MCP sends no answer for it at all).
pub(super) const REQUEST_CANCELLED: i32 = -32800;

#[derive(Clone)]
pub struct RegistryServer {
    tools: Arc<ToolRegistry>,
}

impl ServerHandler for RegistryServer {
    fn get_info(&self) -> ServerConfig {
        super::tools_server_info("boxd")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .snapshot()
            .into_iter()
            .map(|tool| {
                let schema = match &*tool.input_schema {
                    Value::Object(schema) => schema.clone(),
                    _ => serde_json::Map::new(),
                };
                rmcp::model::Tool::new(
                    tool.name.clone(),
                    tool.description.clone(),
                    Arc::new(schema),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = self
            .tools
            .get(&request.name)
            .map_err(|err| ErrorData::invalid_params(err.to_string(), None))?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call_context = CallContext::new(
            format!("mcp-{}", request_id(&context)),
            session_of(&context),
        );
        // rmcp cancels `ct` on the client's notifications/cancelled and when its session ends. Dropping
        // the call's future is what stops the work (the shell tool kills its process group on drop), so
        // nobody is left running a command whose answer no one will read.
        let outcome = tokio::select! {
            outcome = tool.call(arguments, call_context) => outcome,
            () = context.ct.cancelled() => {
                tracing::info!(tool = %request.name, "MCP client cancelled the call; stopped it");
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode(REQUEST_CANCELLED),
                    format!("{} was cancelled by the client", request.name),
                    None,
                ));
            }
        };
        let result = match outcome {
            Ok(result) => serde_json::to_value(&result)
                .and_then(serde_json::from_value::<rmcp::model::CallToolResult>)
                .map_err(|err| {
                    ErrorData::internal_error(format!("result of {}: {err}", request.name), None)
                })?,
            // Bad arguments are the caller's to fix: a protocol error. Failures while running are results.
            Err(ApiError::BadRequest(message) | ApiError::Unprocessable(message)) => {
                return Err(ErrorData::invalid_params(message, None));
            }
            Err(err) => rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                err.to_string(),
            )]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// The caller's session, for tools that keep state per session (the agent family's `bash`): the
/// runtime's session header when the client sends one, else the MCP session.
fn session_of(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    ["x-agentscope-runtime-session-id", "mcp-session-id"]
        .iter()
        .find_map(|name| parts.headers.get(*name)?.to_str().ok())
        .map(str::to_owned)
}

fn request_id(context: &RequestContext<RoleServer>) -> String {
    match &context.id {
        rmcp::model::NumberOrString::Number(number) => number.to_string(),
        rmcp::model::NumberOrString::String(text) => text.to_string(),
    }
}

/// The tower service mounted at `/mcp`. Host validation is off: behind nginx or a gateway the `Host` is
/// whatever the client dialled, and the bearer token (which a DNS-rebinding page cannot send) guards it.
pub fn service(
    tools: Arc<ToolRegistry>,
) -> StreamableHttpService<RegistryServer, LocalSessionManager> {
    StreamableHttpService::new(
        move || {
            Ok(RegistryServer {
                tools: Arc::clone(&tools),
            })
        },
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    )
}
