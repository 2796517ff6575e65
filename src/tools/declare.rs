//! How a built-in tool is declared: once, typed. A [`ToolSpec`] holds its name, description and
//! upstream-exact schema next to the policy for its arguments (how malformed ones are answered); its
//! handler takes the arguments as a serde struct and answers a [`ToolError`] whose outcome (an `isError`
//! result or an HTTP error) is decided in one place. The struct's fields and the schema's properties are
//! compared by a test over every family's tools, so neither can drift from the other.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

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
    /// An `isError` result listing the problems as zod does (`invalid_type`, `expected`, `path`...),
    /// checked against the schema before the struct is read: the reference Node servers' wording.
    ZodIssues,
}

/// A built-in tool's declaration; [`ToolSpec::handler`] makes it a [`Tool`].
pub struct ToolSpec {
    group: &'static str,
    name: &'static str,
    description: String,
    schema: Value,
    bad_arguments: BadArguments,
    error_prefix: &'static str,
}

impl ToolSpec {
    /// `schema` is upstream's, exactly (the properties of the argument struct, a test checks).
    pub fn new(
        group: &'static str,
        name: &'static str,
        description: impl Into<String>,
        schema: Value,
    ) -> ToolSpec {
        ToolSpec {
            group,
            name,
            description: description.into(),
            schema,
            bad_arguments: BadArguments::Reported,
            error_prefix: "",
        }
    }

    pub fn bad_arguments(mut self, policy: BadArguments) -> ToolSpec {
        self.bad_arguments = policy;
        self
    }

    /// Put before the text of every `isError` result the tool answers.
    pub fn error_prefix(mut self, prefix: &'static str) -> ToolSpec {
        self.error_prefix = prefix;
        self
    }

    /// The tool: arguments read into `A` by this spec's policy, then `handler`.
    pub fn handler<A, F, Fut>(self, handler: F) -> Tool
    where
        A: DeserializeOwned + Send + 'static,
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        let ToolSpec {
            group,
            name,
            description,
            schema,
            bad_arguments,
            error_prefix,
        } = self;
        let reading = Arc::new(ArgumentReading {
            name,
            rule: match bad_arguments {
                BadArguments::ZodIssues => ReadingRule::AgainstSchema(schema.clone()),
                BadArguments::Unprocessable => ReadingRule::Unprocessable,
                BadArguments::Reported => ReadingRule::Reported,
            },
        });
        let handler = Arc::new(handler);
        Tool::with_context(
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
        .with_argument_fields(argument_fields::<A>())
    }
}

struct ArgumentReading {
    name: &'static str,
    rule: ReadingRule,
}

/// [`BadArguments`] with what each needs to read arguments.
enum ReadingRule {
    Unprocessable,
    Reported,
    AgainstSchema(Value),
}

impl ArgumentReading {
    fn read<A: DeserializeOwned>(&self, arguments: Value) -> Result<A, ToolError> {
        let name = self.name;
        match &self.rule {
            ReadingRule::AgainstSchema(schema) => {
                super::zod::parse(name, schema, arguments).map_err(ToolError::Reported)
            }
            ReadingRule::Unprocessable => serde_json::from_value(arguments).map_err(|err| {
                ApiError::Unprocessable(format!("invalid arguments for {name}: {err}")).into()
            }),
            ReadingRule::Reported => serde_json::from_value(arguments)
                .map_err(|err| ToolError::Reported(invalid_arguments(name, &err))),
        }
    }
}

/// What a tool whose bad arguments are [`BadArguments::Reported`] answers for arguments serde could
/// not read; also for its arguments read elsewhere (a batch's actions, a route taking the same ones).
pub fn invalid_arguments(tool: &str, err: &serde_json::Error) -> String {
    format!("Invalid arguments for {tool}: {err}")
}

/// The fields serde reads for `A`, when `A` is a plain struct (not flattened, not an enum): what its
/// derive hands to `deserialize_struct`, taken without reading anything.
pub fn argument_fields<A: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut fields = None;
    let _ = A::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that only notes the field list a struct asks for, then declines.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a plain struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(serde::de::Error::custom("fields noted"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
/// Where a declared tool's schema and argument struct disagree: properties no field reads, fields
/// no property declares. `None` when they agree or the struct cannot be introspected.
pub fn disagreement(schema: &Value, fields: &[&str]) -> Option<String> {
    let properties: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let unread: Vec<&str> = properties
        .iter()
        .copied()
        .filter(|property| !fields.contains(property))
        .collect();
    let undeclared: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|field| !properties.contains(field))
        .collect();
    if unread.is_empty() && undeclared.is_empty() {
        None
    } else {
        Some(format!(
            "properties no field reads: {unread:?}; fields the schema does not declare: {undeclared:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Sample {
        path: String,
        #[serde(rename = "textGone", default)]
        text_gone: Option<String>,
    }

    #[test]
    fn a_struct_s_fields_are_read_without_arguments() {
        assert_eq!(argument_fields::<Sample>(), Some(&["path", "textGone"][..]));
        assert_eq!(argument_fields::<Value>(), None);
    }

    #[test]
    fn a_property_without_a_field_is_named() {
        let schema = json!({"properties": {"path": {}, "textGone": {}, "extra": {}}});
        let fields = argument_fields::<Sample>().unwrap_or_default();
        let found = disagreement(&schema, fields).unwrap_or_default();
        assert!(found.contains("extra"), "{found}");
        let schema = json!({"properties": {"path": {}, "textGone": {}}});
        assert_eq!(disagreement(&schema, fields), None);
    }

    #[tokio::test]
    async fn bad_arguments_are_answered_by_the_policy() {
        let spec = |policy| {
            ToolSpec::new(
                "test",
                "sample",
                "",
                json!({"type": "object", "properties": {"path": {"type": "string"}, "textGone": {"type": "string"}}, "required": ["path"]}),
            )
            .bad_arguments(policy)
            .error_prefix("Error: ")
            .handler(|_: Sample, _| async { Ok(CallToolResult::new(Vec::new(), false)) })
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
