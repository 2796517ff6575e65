//! How a built-in tool is declared: once, typed. [`ToolSpec::declare`] takes its name and description;
//! its arguments are one struct, which serde reads calls with and whose JSON schema (derived by
//! schemars, in its upstream's [`SchemaDialect`]) is what the tool advertises; the policy for its
//! arguments (how malformed ones are answered) sits beside them as data. Arguments are checked at one
//! point, before the handler runs; the handler answers a [`ToolError`] whose outcome (an `isError`
//! result or an HTTP error) is decided in one place.

use std::future::Future;
use std::sync::Arc;

use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::schema::{InputSchema, SchemaDialect};
use super::{CallContext, CallToolResult, ContentItem, Tool};
use crate::core::error::{ApiError, ApiResult};

/// Why a call did not succeed, and how its caller hears of it.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Something the model reads and can act on (bad arguments for a tool that answers them as
    /// results, an element that is gone, a request the display refused): an `isError` result with
    /// this text.
    #[error("{0}")]
    Reported(String),
    /// The call could not be served (a family starting, a full queue, a path out of the workspace):
    /// an HTTP error with its status.
    #[error(transparent)]
    Http(#[from] ApiError),
}

impl ToolError {
    /// The one place a failure becomes what the caller sees: `prefix` is the tool's (e.g. the reference
    /// filesystem server's `Error: `).
    pub fn into_outcome(self, prefix: &str) -> ApiResult<CallToolResult> {
        let text = self.into_report()?;
        Ok(CallToolResult::new(
            vec![ContentItem::plain_text(format!("{prefix}{text}"))],
            true,
        ))
    }

    /// Which of the two outcomes a failure has: the text of an `isError` result, or the HTTP error.
    /// Callers that put a failure among other content (a batch's steps, a notice after it) take the
    /// text from here, so the choice is made nowhere else.
    pub fn into_report(self) -> ApiResult<String> {
        match self {
            ToolError::Reported(text) => Ok(text),
            ToolError::Http(err) => Err(err),
        }
    }
}

pub type ToolResult = Result<CallToolResult, ToolError>;

/// How a tool answers arguments that do not fit its schema: as upstream's server of the same tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadArguments {
    /// HTTP 422 with serde's message: FastAPI's answer for upstream's generic tools.
    Unprocessable,
    /// An `isError` result with serde's message.
    Reported,
    /// An `isError` result `Invalid arguments for TOOL: ` and the problems listed as zod lists them
    /// (`invalid_type`, `expected`, `path`...), checked against the schema before the struct is read:
    /// the reference filesystem server's wording.
    ZodIssues,
    /// An `isError` result that is zod's problem list alone: what Playwright MCP answers, `String()`
    /// of the `ZodError` its one `inputSchema.parse` throws.
    ZodError,
    /// An `isError` result `ValueError('Invalid arguments for function TOOL')`: what the Anthropic
    /// SDK's tool runner answers when pydantic refuses a function tool's arguments (the `repr` of the
    /// `ValueError` its `call` raises).
    PydanticFunction,
}

/// A built-in tool's declaration, made by [`ToolSpec::declare`]; [`Declared::handler`] makes it a
/// [`Tool`].
pub struct ToolSpec {
    group: &'static str,
    name: &'static str,
    description: String,
    dialect: SchemaDialect,
    bad_arguments: BadArguments,
    error_prefix: &'static str,
    sdk_defaults_absent: bool,
}

/// A tool declared with its argument struct `A`, whose schema it advertises: see [`ToolSpec::declare`].
pub struct Declared<A> {
    spec: ToolSpec,
    arguments: PhantomData<fn() -> A>,
}

impl ToolSpec {
    /// A tool whose arguments are `A`: it advertises `A`'s schema (in its upstream's dialect, see
    /// [`Declared::dialect`]) and its handler takes an `A`.
    pub fn declare<A>(
        group: &'static str,
        name: &'static str,
        description: impl Into<String>,
    ) -> Declared<A>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
    {
        Declared {
            spec: ToolSpec::named(group, name, description),
            arguments: PhantomData,
        }
    }

    fn named(group: &'static str, name: &'static str, description: impl Into<String>) -> ToolSpec {
        ToolSpec {
            group,
            name,
            description: description.into(),
            dialect: SchemaDialect::Plain,
            bad_arguments: BadArguments::Reported,
            error_prefix: "",
            sdk_defaults_absent: false,
        }
    }

    fn serve<A, F, Fut>(self, schema: InputSchema, handler: F) -> Tool
    where
        A: DeserializeOwned + Send + 'static,
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        let ToolSpec {
            group,
            name,
            description,
            bad_arguments,
            error_prefix,
            sdk_defaults_absent,
            ..
        } = self;
        let rule = match bad_arguments {
            BadArguments::ZodIssues => ReadingRule::AgainstSchema(Listing::Named),
            BadArguments::ZodError => ReadingRule::AgainstSchema(Listing::Bare),
            BadArguments::Unprocessable => ReadingRule::Unprocessable,
            BadArguments::Reported => ReadingRule::Reported,
            BadArguments::PydanticFunction => ReadingRule::PydanticFunction,
        };
        // The reading needs the schema only to check against it or to leave out the SDK's defaults.
        let needs_schema = sdk_defaults_absent || matches!(rule, ReadingRule::AgainstSchema(_));
        let reading = Arc::new(ArgumentReading {
            name,
            schema: needs_schema.then(|| schema.clone()),
            sdk_defaults_absent,
            rule,
        });
        let handler = Arc::new(handler);
        Tool::with_input_schema(
            group,
            name,
            &description,
            schema,
            move |arguments, context| {
                let reading = Arc::clone(&reading);
                let handler = Arc::clone(&handler);
                async move {
                    let outcome = match reading.read::<A>(arguments) {
                        Ok(arguments) => handler(arguments, context).await,
                        Err(err) => Err(err),
                    };
                    outcome.or_else(|err| err.into_outcome(error_prefix))
                }
            },
        )
        .declared()
    }
}

impl<A> Declared<A>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
{
    /// How the tool's upstream wrote its schema ([`SchemaDialect::Plain`] unless said).
    pub fn dialect(mut self, dialect: SchemaDialect) -> Declared<A> {
        self.spec.dialect = dialect;
        self
    }

    pub fn bad_arguments(mut self, policy: BadArguments) -> Declared<A> {
        self.spec.bad_arguments = policy;
        self
    }

    /// Put before the text of every `isError` result the tool answers.
    pub fn error_prefix(mut self, prefix: &'static str) -> Declared<A> {
        self.spec.error_prefix = prefix;
        self
    }

    /// The one adapter between the Python SDK and a strict schema: an optional argument sent as
    /// `null`, or as `""` where a string is expected, counts as not given. The SDK's methods send
    /// their defaults that way (`browser_take_screenshot(filename="")`, `browser_tab_close(index=None)`),
    /// where upstream's server was never called with them.
    pub fn sdk_defaults_mean_absent(mut self) -> Declared<A> {
        self.spec.sdk_defaults_absent = true;
        self
    }

    /// The tool: arguments checked against `A`'s schema and read into `A` by the policy, then
    /// `handler`.
    pub fn handler<F, Fut>(self, handler: F) -> Tool
    where
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        let schema = InputSchema::derived::<A>(self.spec.dialect);
        self.spec.serve(schema, handler)
    }
}

struct ArgumentReading {
    name: &'static str,
    /// The tool's schema, when the rule checks against it or the SDK's defaults are left out by it.
    schema: Option<InputSchema>,
    sdk_defaults_absent: bool,
    rule: ReadingRule,
}

/// [`BadArguments`] with what each needs to read arguments.
enum ReadingRule {
    Unprocessable,
    Reported,
    PydanticFunction,
    AgainstSchema(Listing),
}

/// How the problems zod would list are said.
enum Listing {
    /// `Invalid arguments for TOOL: [...]`.
    Named,
    /// `[...]`.
    Bare,
}

impl ArgumentReading {
    /// The one validation point of a built-in tool's call.
    fn read<A: DeserializeOwned>(&self, mut arguments: Value) -> Result<A, ToolError> {
        let name = self.name;
        let schema = self.schema.as_deref().unwrap_or(&Value::Null);
        if self.sdk_defaults_absent {
            leave_out_sdk_defaults(schema, &mut arguments);
        }
        match &self.rule {
            ReadingRule::AgainstSchema(listing) => {
                let issues = super::zod::issues(schema, &arguments);
                if let Some(listed) = issues {
                    return Err(ToolError::Reported(match listing {
                        Listing::Named => format!("Invalid arguments for {name}: {listed}"),
                        Listing::Bare => listed,
                    }));
                }
                serde_json::from_value(arguments)
                    .map_err(|err| ToolError::Reported(invalid_arguments(name, &err)))
            }
            ReadingRule::Unprocessable => serde_json::from_value(arguments).map_err(|err| {
                ApiError::Unprocessable(format!("invalid arguments for {name}: {err}")).into()
            }),
            ReadingRule::Reported => serde_json::from_value(arguments)
                .map_err(|err| ToolError::Reported(invalid_arguments(name, &err))),
            ReadingRule::PydanticFunction => serde_json::from_value(arguments).map_err(|err| {
                tracing::debug!(tool = name, %err, "arguments refused");
                ToolError::Reported(format!(
                    "ValueError('Invalid arguments for function {name}')"
                ))
            }),
        }
    }
}

/// See [`Declared::sdk_defaults_mean_absent`]: drops the optional properties sent as `null`, and the
/// optional string properties sent as `""`.
fn leave_out_sdk_defaults(schema: &Value, arguments: &mut Value) {
    let (Some(properties), Value::Object(given)) = (
        schema.get("properties").and_then(Value::as_object),
        arguments,
    ) else {
        return;
    };
    let required = schema.get("required").and_then(Value::as_array);
    let is_required = |name: &str| required.is_some_and(|names| names.iter().any(|n| n == name));
    given.retain(|name, value| {
        let default = match value {
            Value::Null => true,
            Value::String(text) => {
                text.is_empty()
                    && properties
                        .get(name)
                        .and_then(|property| property.get("type"))
                        .is_some_and(|kind| kind == "string")
            }
            _ => false,
        };
        !default || is_required(name)
    });
}

/// What a tool whose bad arguments are [`BadArguments::Reported`] answers for arguments serde could
/// not read; also for its arguments read elsewhere (a batch's actions, a route taking the same ones).
pub fn invalid_arguments(tool: &str, err: &serde_json::Error) -> String {
    format!("Invalid arguments for {tool}: {err}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Sample {
        path: String,
        #[serde(rename = "textGone", default)]
        text_gone: Option<String>,
    }

    /// Arguments as the browser tools declare them.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Shot {
        /// The index
        index: f64,
        filename: Option<String>,
        raw: Option<bool>,
    }

    async fn answer(tool: &Tool, arguments: Value) -> (bool, String) {
        let result = tool.call(arguments, CallContext::default()).await;
        let Ok(result) = result else {
            panic!("an HTTP error: {result:?}");
        };
        let content = serde_json::to_value(&result.content).unwrap_or_default();
        let text = content[0]["text"].as_str().unwrap_or_default().to_owned();
        (result.is_error, text)
    }

    #[tokio::test]
    async fn a_declared_tool_advertises_its_struct_and_answers_as_zod() {
        let tool = ToolSpec::declare::<Shot>("test", "shot", "Takes one")
            .sdk_defaults_mean_absent()
            .bad_arguments(BadArguments::ZodError)
            .handler(|shot, _| async move {
                let said = format!("{:?} {:?}", shot.filename, shot.raw);
                Ok(CallToolResult::new(
                    vec![ContentItem::plain_text(said)],
                    false,
                ))
            });
        assert_eq!(
            tool.input_schema,
            json!({"type": "object", "properties": {
                "index": {"type": "number", "description": "The index"},
                "filename": {"type": "string"},
                "raw": {"type": "boolean"},
            }, "required": ["index"]})
        );
        // The SDK's defaults: "" and null for what it was not given.
        let (failed, text) = answer(&tool, json!({"index": 1, "filename": "", "raw": null})).await;
        assert_eq!((failed, text.as_str()), (false, "None None"));
        // A wrong type is a problem zod lists, not an argument left out.
        let (failed, text) = answer(&tool, json!({"index": "1", "raw": "yes"})).await;
        assert!(failed);
        let issues: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(
            issues,
            json!([
                {"code": "invalid_type", "expected": "number", "received": "string",
                 "path": ["index"], "message": "Expected number, received string"},
                {"code": "invalid_type", "expected": "boolean", "received": "string",
                 "path": ["raw"], "message": "Expected boolean, received string"},
            ])
        );
        assert!(text.starts_with("[\n  {\n    \"code\""), "{text}");
        // A required argument is required even when the SDK sends null for it.
        let (failed, text) = answer(&tool, json!({"index": null})).await;
        assert!(failed && text.contains("\"received\": \"null\""), "{text}");
    }

    #[tokio::test]
    async fn bad_arguments_are_answered_by_the_policy() {
        let spec = |policy| {
            ToolSpec::declare::<Sample>("test", "sample", "")
                .bad_arguments(policy)
                .error_prefix("Error: ")
                .handler(|_, _| async { Ok(CallToolResult::new(Vec::new(), false)) })
        };
        let bad = json!({"path": 3});
        let unprocessable = spec(BadArguments::Unprocessable)
            .call(bad.clone(), CallContext::default())
            .await;
        assert!(matches!(unprocessable, Err(ApiError::Unprocessable(_))));
        let reported = spec(BadArguments::Reported)
            .call(bad.clone(), CallContext::default())
            .await;
        assert!(matches!(reported, Ok(ref result) if result.is_error));
        let zod = spec(BadArguments::ZodIssues)
            .call(bad, CallContext::default())
            .await
            .ok()
            .map(|result| serde_json::to_string(&result.content).unwrap_or_default());
        assert!(
            zod.as_deref()
                .is_some_and(|text| text.contains("Error: Invalid arguments for sample")
                    && text.contains("invalid_type")),
            "{zod:?}"
        );
    }
}
