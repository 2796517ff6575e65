//! The single tool registry. A tool is written once (name, JSON schema, call) and served from here by the
//! HTTP tool routes, `/mcp/list_tools`, `/mcp/call_tool` and the MCP server alike.

mod context;
mod declare;
mod result;
mod schema;
mod zod;

pub use context::{CallContext, PROGRESS_CAPACITY, ProgressSink};
pub use declare::{BadArguments, Declared, ToolError, ToolResult, ToolSpec, invalid_arguments};
#[cfg(test)]
pub use schema::assert_actions_listed;
pub use schema::{InputSchema, SchemaDialect};

pub use result::{CallToolResult, ContentItem};

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::core::error::{ApiError, ApiResult};
use crate::core::health::Health;

/// Group of the tools every image has. The Python client lists these itself, so `/mcp/list_tools` omits it.
pub const GENERIC_GROUP: &str = "generic";

pub type ToolFuture = Pin<Box<dyn Future<Output = ApiResult<CallToolResult>> + Send>>;
type ToolHandler = Arc<dyn Fn(Value, CallContext) -> ToolFuture + Send + Sync>;

#[derive(Clone)]
pub struct Tool {
    pub name: String,
    /// Upstream's MCP server name (`filesystem`, `playwright`, ...), so `list_tools(tool_type=...)` filters work.
    pub group: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub input_schema: InputSchema,
    handler: ToolHandler,
    /// The health of the family that admits each call (built-in tools); hosted tools have none.
    admission: Option<Health>,
    /// Declared with its argument struct ([`ToolSpec::declare`]); hosted tools are not (their schema
    /// is their server's).
    declared: bool,
}

impl Tool {
    /// A tool that needs nothing of its call's context.
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
        Tool::with_context(group, name, description, input_schema, move |args, _| {
            call(args)
        })
    }

    /// A tool that uses its call's context (progress, cancellation, session).
    pub fn with_context<F, Fut>(
        group: &str,
        name: &str,
        description: &str,
        input_schema: Value,
        call: F,
    ) -> Self
    where
        F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApiResult<CallToolResult>> + Send + 'static,
    {
        Tool::with_input_schema(
            group,
            name,
            description,
            InputSchema::ready(input_schema),
            call,
        )
    }

    /// [`Tool::with_context`] with a schema that may be derived later.
    fn with_input_schema<F, Fut>(
        group: &str,
        name: &str,
        description: &str,
        input_schema: InputSchema,
        call: F,
    ) -> Self
    where
        F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApiResult<CallToolResult>> + Send + 'static,
    {
        Tool {
            name: name.to_owned(),
            group: group.to_owned(),
            description: description.to_owned(),
            input_schema,
            handler: Arc::new(move |args, context| Box::pin(call(args, context))),
            admission: None,
            declared: false,
        }
    }

    fn declared(mut self) -> Self {
        self.declared = true;
        self
    }

    /// Whether the tool was declared with its argument struct.
    #[cfg(test)]
    pub fn is_declared(&self) -> bool {
        self.declared
    }

    /// Calls are admitted only while `family` serves (else 503 with its reason).
    pub fn admitted_by(mut self, health: Health) -> Self {
        self.admission = Some(health);
        self
    }

    /// Runs the call: admitted by its family's health, bounded by the caller's deadline if any.
    pub fn call(&self, arguments: Value, context: CallContext) -> ToolFuture {
        let admission = self.admission.clone();
        let deadline = context.deadline;
        // Named in the timeout's message; cloned only for the calls that have a deadline.
        let name = deadline.map(|_| self.name.clone());
        // Dropping the call (the caller went away) cancels its token, for work the tool started
        // outside its own future.
        let cancel_on_drop = context.cancel.clone().drop_guard();
        // Lines logged by the tool and what it supervises carry the caller (also for `/mcp` calls,
        // which have no HTTP span of their own).
        let span = tracing::info_span!(
            "tool",
            tool = %self.name,
            request = %context.request_id,
            session = context.session.as_deref().unwrap_or("-"),
        );
        let call = (self.handler)(arguments, context);
        Box::pin(tracing::Instrument::instrument(
            async move {
                let _cancel_on_drop = cancel_on_drop;
                if let Some(health) = admission {
                    health.admit().await?;
                }
                match deadline {
                    None => call.await,
                    Some(deadline) => tokio::time::timeout_at(deadline.instant(), call)
                        .await
                        .map_err(|_| {
                            ApiError::GatewayTimeout(format!(
                                "{} did not finish before the caller's deadline",
                                name.as_deref().unwrap_or("the tool")
                            ))
                        })?,
                }
            },
            span,
        ))
    }

    /// The entry shape of upstream's `/mcp/list_tools`. The full schema is kept (`$defs`, enums...), with
    /// `properties` and `required` always present as upstream guarantees.
    pub fn listing(&self) -> Value {
        let mut parameters = match &*self.input_schema {
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

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "group {0} is a built-in tool family's; a hosted MCP server cannot take its name (choose another)"
    )]
    ReservedGroup(String),
    #[error(
        "tool {name} of group {group} collides with an existing tool, and so does {namespaced}"
    )]
    Collision {
        name: String,
        group: String,
        namespaced: String,
    },
}

impl From<RegistryError> for ApiError {
    fn from(err: RegistryError) -> Self {
        match err {
            RegistryError::ReservedGroup(_) => ApiError::BadRequest(err.to_string()),
            RegistryError::Collision { .. } => ApiError::Conflict(err.to_string()),
        }
    }
}

#[derive(Default)]
struct Entries {
    tools: BTreeMap<String, Arc<Tool>>,
    /// Groups of the built-in families: no hosted server may replace or remove them.
    reserved: BTreeSet<String>,
}

impl Entries {
    /// First registration of a name wins; a later tool of the same name from another group is exposed as
    /// `{group}__{name}`. When that name is taken too, the tool is refused (never silently dropped).
    fn insert(&mut self, mut tool: Tool) -> Result<String, RegistryError> {
        if let Some(existing) = self.tools.get(&tool.name)
            && existing.group != tool.group
        {
            let namespaced = format!("{}__{}", tool.group, tool.name);
            if self.tools.contains_key(&namespaced) {
                return Err(RegistryError::Collision {
                    name: tool.name,
                    group: tool.group,
                    namespaced,
                });
            }
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
        self.tools.insert(name.clone(), Arc::new(tool));
        Ok(name)
    }
}

/// Tools by exposed name. Built-in families register at start; hosted MCP servers replace their groups
/// at runtime, so the map sits behind a lock held only for lookups and inserts, never across a call.
#[derive(Default)]
pub struct ToolRegistry {
    entries: RwLock<Entries>,
}

impl ToolRegistry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Entries> {
        self.entries
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Entries> {
        self.entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a built-in family's tool; its group becomes reserved. Returns the exposed name.
    pub fn register_builtin(&self, tool: Tool) -> Result<String, RegistryError> {
        let mut entries = self.write();
        entries.reserved.insert(tool.group.clone());
        entries.insert(tool)
    }

    /// Reserves a group name for a built-in family that registers its tools later (or none).
    pub fn reserve_group(&self, group: &str) {
        self.write().reserved.insert(group.to_owned());
    }

    pub fn is_reserved(&self, group: &str) -> bool {
        self.read().reserved.contains(group)
    }

    /// Replaces every tool of a (non-reserved) group by `tools` in one step, so a call during a hosted
    /// server's tool-list refresh never sees the group missing. Tools that collide are left out and
    /// named in the returned errors; the others are registered.
    pub fn replace_group(
        &self,
        group: &str,
        tools: Vec<Tool>,
    ) -> Result<Vec<Result<String, RegistryError>>, RegistryError> {
        let mut entries = self.write();
        if entries.reserved.contains(group) {
            return Err(RegistryError::ReservedGroup(group.to_owned()));
        }
        entries.tools.retain(|_, tool| tool.group != group);
        Ok(tools.into_iter().map(|tool| entries.insert(tool)).collect())
    }

    /// Removes a hosted group; built-in groups are never removed.
    pub fn unregister_group(&self, group: &str) {
        let mut entries = self.write();
        if entries.reserved.contains(group) {
            return;
        }
        entries.tools.retain(|_, tool| tool.group != group);
    }

    pub fn get(&self, name: &str) -> ApiResult<Arc<Tool>> {
        self.read()
            .tools
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("unknown tool: {name}")))
    }

    /// Calls `name` with `arguments`. The one place every route calls a tool from, so lookups and argument
    /// checks are not written per route.
    pub fn call(
        &self,
        name: &str,
        arguments: Value,
        context: CallContext,
    ) -> ApiResult<ToolFuture> {
        let arguments = object_arguments(arguments)?;
        Ok(self.get(name)?.call(arguments, context))
    }

    pub fn snapshot(&self) -> Vec<Arc<Tool>> {
        self.read().tools.values().cloned().collect()
    }
}

/// Absent (`null`) arguments mean `{}`; anything but an object does not fit any tool's schema (422).
fn object_arguments(arguments: Value) -> ApiResult<Value> {
    match arguments {
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        Value::Object(map) => Ok(Value::Object(map)),
        _ => Err(ApiError::Unprocessable(
            "arguments must be a JSON object".into(),
        )),
    }
}

/// A tool's optional `timeout` argument (seconds), or `default`; anything but a positive number up to
/// [`crate::core::deadline::MAX_TIMEOUT`] → 400 naming the bound.
pub fn timeout_argument(
    requested: Option<f64>,
    default: std::time::Duration,
) -> ApiResult<std::time::Duration> {
    match requested {
        None => Ok(default),
        Some(seconds) => crate::core::deadline::user_timeout(seconds)
            .map_err(|err| ApiError::BadRequest(err.to_string())),
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    fn tool(group: &str, name: &str) -> Tool {
        Tool::new(group, name, "", json!({}), |_| async {
            Ok(CallToolResult::new(Vec::new(), false))
        })
    }

    #[test]
    fn a_hosted_group_cannot_take_or_remove_a_built_in_group() {
        let registry = ToolRegistry::default();
        registry
            .register_builtin(tool("filesystem", "read_file"))
            .ok();
        assert!(matches!(
            registry.replace_group("filesystem", vec![tool("filesystem", "x")]),
            Err(RegistryError::ReservedGroup(_))
        ));
        registry.unregister_group("filesystem");
        assert!(registry.get("read_file").is_ok());
    }

    #[test]
    fn a_namespaced_collision_is_an_error_not_a_silent_drop() {
        let registry = ToolRegistry::default();
        registry.register_builtin(tool("generic", "echo")).ok();
        registry.register_builtin(tool("generic", "a__echo")).ok();
        let outcome = registry.replace_group("a", vec![tool("a", "echo")]).ok();
        assert!(matches!(
            outcome.as_deref(),
            Some([Err(RegistryError::Collision { .. })])
        ));
    }

    #[test]
    fn replacing_a_group_swaps_its_tools_at_once() {
        let registry = ToolRegistry::default();
        registry
            .replace_group("srv", vec![tool("srv", "one"), tool("srv", "two")])
            .ok();
        registry.replace_group("srv", vec![tool("srv", "two")]).ok();
        assert!(registry.get("one").is_err());
        assert!(registry.get("two").is_ok());
    }
}
