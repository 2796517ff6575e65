//! The single tool registry. A tool is written once (name, JSON schema, call) and served from here by the
//! HTTP tool routes, `/mcp/list_tools`, `/mcp/call_tool` and the MCP server alike.

mod result;

pub use result::{CallToolResult, ContentItem};

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// Group of the tools every image has. The Python client lists these itself, so `/mcp/list_tools` omits it.
pub const GENERIC_GROUP: &str = "generic";

pub type ToolFuture = Pin<Box<dyn Future<Output = ApiResult<CallToolResult>> + Send>>;
type ToolHandler = Arc<dyn Fn(Value) -> ToolFuture + Send + Sync>;

#[derive(Clone)]
pub struct Tool {
    pub name: String,
    /// Upstream's MCP server name (`filesystem`, `playwright`, ...), so `list_tools(tool_type=...)` filters work.
    pub group: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub input_schema: Value,
    handler: ToolHandler,
}

impl Tool {
    pub fn new<F, Fut>(
        group: &str,
        name: &str,
        description: &str,
        input_schema: Value,
        call: F,
    ) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApiResult<CallToolResult>> + Send + 'static,
    {
        Tool {
            name: name.to_owned(),
            group: group.to_owned(),
            description: description.to_owned(),
            input_schema,
            handler: Arc::new(move |args| Box::pin(call(args))),
        }
    }

    pub fn call(&self, arguments: Value) -> ToolFuture {
        (self.handler)(arguments)
    }

    /// The entry shape of upstream's `/mcp/list_tools`.
    pub fn listing(&self) -> Value {
        json!({
            "name": self.name,
            "json_schema": {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.input_schema,
                }
            }
        })
    }
}

#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Tool>,
}

impl ToolRegistry {
    /// First registration of a name wins; a later one is refused and logged, so lookups stay deterministic.
    pub fn register(&mut self, tool: Tool) {
        if let Some(existing) = self.tools.get(&tool.name) {
            tracing::warn!(
                tool = %tool.name,
                kept_group = %existing.group,
                refused_group = %tool.group,
                "tool name already registered; keeping the first"
            );
            return;
        }
        self.tools.insert(tool.name.clone(), tool);
    }

    pub fn get(&self, name: &str) -> ApiResult<&Tool> {
        self.tools
            .get(name)
            .ok_or_else(|| ApiError::NotFound(format!("unknown tool: {name}")))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }
}

/// Reads a tool's arguments into its typed request, naming the problem on failure.
pub fn parse_arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> ApiResult<T> {
    serde_json::from_value(arguments)
        .map_err(|err| ApiError::BadRequest(format!("invalid arguments for {tool}: {err}")))
}
