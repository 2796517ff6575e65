//! boxd as an MCP server, over the one tool registry, whatever families are on: upstream's tool listing
//! and call routes (`/mcp/list_tools`, `/mcp/call_tool`), streamable HTTP at `/mcp`, and `boxd
//! mcp-stdio`, which relays a stdio client to a remote boxd's `/mcp`.

pub mod relay;
mod streamable;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::extract::ApiJson;
use crate::core::error::{ApiError, ApiResult};
use crate::tools::{CallContext, CallToolResult, GENERIC_GROUP, ToolRegistry};

/// What boxd's MCP servers (the `/mcp` endpoint and the stdio relay) announce: tools, under `name`.
fn tools_server_info(name: &str) -> rmcp::model::ServerConfig {
    rmcp::model::ServerConfig::new(
        rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .build(),
    )
    .with_server_info(rmcp::model::Implementation::new(
        name,
        env!("CARGO_PKG_VERSION"),
    ))
}

/// The routes every image serves: the tool listing and call routes of upstream's client, and boxd's
/// own MCP server at `/mcp`, all over `tools`.
pub fn routes(tools: Arc<ToolRegistry>) -> Router {
    Router::new()
        .route_service("/mcp", streamable::service(Arc::clone(&tools)))
        .route("/mcp/list_tools", get(list_tools))
        .route("/mcp/call_tool", post(call_tool))
        .with_state(tools)
}

/// Upstream's shape: `{SERVER: {TOOL: {"name", "json_schema"}}}` for every group but `generic`.
async fn list_tools(State(tools): State<Arc<ToolRegistry>>) -> Json<Value> {
    let mut groups: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for tool in tools.snapshot() {
        if tool.group != GENERIC_GROUP {
            groups
                .entry(tool.group.clone())
                .or_default()
                .insert(tool.name.clone(), tool.listing());
        }
    }
    Json(serde_json::to_value(groups).unwrap_or_default())
}

#[derive(Deserialize)]
struct CallToolRequest {
    #[serde(default)]
    tool_name: String,
    #[serde(default)]
    arguments: Value,
}

async fn call_tool(
    State(tools): State<Arc<ToolRegistry>>,
    context: CallContext,
    ApiJson(request): ApiJson<CallToolRequest>,
) -> ApiResult<Json<CallToolResult>> {
    if request.tool_name.is_empty() {
        return Err(ApiError::BadRequest("tool_name is required".into()));
    }
    Ok(Json(
        tools
            .call(&request.tool_name, request.arguments, context)?
            .await?,
    ))
}
