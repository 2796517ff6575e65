//! The single tool registry. A tool is written once (name, JSON schema, call) and served from here by the
//! HTTP tool routes, `/mcp/list_tools`, `/mcp/call_tool` and the MCP server alike.

mod result;

pub use result::{CallToolResult, ContentItem};

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// Group of the tools every image has. The Python client lists these itself, so `/mcp/list_tools` omits it.
pub const GENERIC_GROUP: &str = "generic";

pub type ToolFuture = Pin<Box<dyn Future<Output = ApiResult<CallToolResult>> + Send>>;
type ToolHandler = Arc<dyn Fn(Value) -> ToolFuture + Send + Sync>;
/// Where a streaming call sends its progress events (JSON objects with a `type`) as they happen.
pub type EventSink = tokio::sync::mpsc::Sender<Value>;
type StreamingHandler = Arc<dyn Fn(Value, EventSink) -> ToolFuture + Send + Sync>;

#[derive(Clone)]
pub struct Tool {
    pub name: String,
    /// Upstream's MCP server name (`filesystem`, `playwright`, ...), so `list_tools(tool_type=...)` filters work.
    pub group: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub input_schema: Value,
    handler: ToolHandler,
    /// Tools that can report progress (output as it happens) have one; the others stream only their end.
    streaming: Option<StreamingHandler>,
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
            streaming: None,
        }
    }

    /// Adds the streaming form of the call: the same result at the end, events on the sink before it.
    pub fn with_streaming<F, Fut>(mut self, call: F) -> Self
    where
        F: Fn(Value, EventSink) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApiResult<CallToolResult>> + Send + 'static,
    {
        self.streaming = Some(Arc::new(move |args, sink| Box::pin(call(args, sink))));
        self
    }

    pub fn call(&self, arguments: Value) -> ToolFuture {
        (self.handler)(arguments)
    }

    pub fn call_streaming(&self, arguments: Value, sink: EventSink) -> ToolFuture {
        match &self.streaming {
            Some(streaming) => streaming(arguments, sink),
            None => self.call(arguments),
        }
    }

    /// The entry shape of upstream's `/mcp/list_tools`. The full schema is kept (`$defs`, enums...), with
    /// `properties` and `required` always present as upstream guarantees.
    pub fn listing(&self) -> Value {
        let mut parameters = match &self.input_schema {
            Value::Object(schema) => schema.clone(),
            _ => serde_json::Map::new(),
        };
        parameters.insert("type".into(), json!("object"));
        parameters.entry("properties").or_insert_with(|| json!({}));
        parameters.entry("required").or_insert_with(|| json!([]));
        json!({
            "name": self.name,
            "json_schema": {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": parameters,
                }
            }
        })
    }
}

/// Tools by exposed name. Built-ins register at start; hosted MCP servers add and drop their groups at
/// runtime, so the map sits behind a lock held only for lookups and inserts, never across a call.
#[derive(Default)]
pub struct ToolRegistry {
    tools: RwLock<BTreeMap<String, Tool>>,
}

impl ToolRegistry {
    /// First registration of a name wins; a later tool of the same name from another group stays reachable
    /// as `{group}__{name}`, and the collision is logged. Returns the name the tool is exposed under.
    pub fn register(&self, mut tool: Tool) -> String {
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(existing) = tools.get(&tool.name)
            && existing.group != tool.group
        {
            let namespaced = format!("{}__{}", tool.group, tool.name);
            tracing::warn!(
                tool = %tool.name,
                kept_group = %existing.group,
                group = %tool.group,
                exposed_as = %namespaced,
                "tool name already registered; the first keeps it"
            );
            tool.name = namespaced;
        }
        let name = tool.name.clone();
        tools.entry(name.clone()).or_insert(tool);
        name
    }

    pub fn unregister_group(&self, group: &str) {
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tools.retain(|_, tool| tool.group != group);
    }

    pub fn get(&self, name: &str) -> ApiResult<Tool> {
        let tools = self
            .tools
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tools
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("unknown tool: {name}")))
    }

    /// Calls `name` with `arguments`. The one place every route calls a tool from, so lookups and argument
    /// checks are not written per route.
    pub async fn call(&self, name: &str, arguments: Value) -> ApiResult<CallToolResult> {
        let arguments = object_arguments(arguments)?;
        self.get(name)?.call(arguments).await
    }

    /// As `call`, with progress events on `sink` for tools that have a streaming form.
    pub fn call_streaming(
        &self,
        name: &str,
        arguments: Value,
        sink: EventSink,
    ) -> ApiResult<ToolFuture> {
        let arguments = object_arguments(arguments)?;
        Ok(self.get(name)?.call_streaming(arguments, sink))
    }

    pub fn snapshot(&self) -> Vec<Tool> {
        let tools = self
            .tools
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tools.values().cloned().collect()
    }
}

/// Absent (`null`) arguments mean `{}`; anything but an object is a 400.
fn object_arguments(arguments: Value) -> ApiResult<Value> {
    match arguments {
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        Value::Object(map) => Ok(Value::Object(map)),
        _ => Err(ApiError::BadRequest(
            "arguments must be a JSON object".into(),
        )),
    }
}

/// A tool's optional `timeout` argument (seconds), or `default`; anything but a positive number → 400.
pub fn timeout_argument(
    requested: Option<f64>,
    default: std::time::Duration,
) -> ApiResult<std::time::Duration> {
    match requested {
        None => Ok(default),
        Some(seconds) => positive_seconds(seconds).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "timeout must be a positive number of seconds, got {seconds}"
            ))
        }),
    }
}

pub fn positive_seconds(seconds: f64) -> Option<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
}

/// Reads a tool's arguments into its typed request, naming the problem on failure.
pub fn parse_arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> ApiResult<T> {
    serde_json::from_value(arguments)
        .map_err(|err| ApiError::BadRequest(format!("invalid arguments for {tool}: {err}")))
}
