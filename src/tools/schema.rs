//! A built-in tool's input schema, derived from its argument struct: the struct is the one
//! declaration of a tool's arguments (serde reads calls with it, schemars describes it), and this
//! module writes the description in the dialect of the server the tool replaces, so what boxd
//! advertises is upstream's text (held to it key by key by the test over `tests/upstream-schemas`).

use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde_json::{Map, Value};

/// How the server a tool replaces wrote its input schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaDialect {
    /// `{type, properties, required}` and no more: Python servers and the hand-written schemas of
    /// the Node servers (computer-use-mcp's, the filesystem server's `list_allowed_directories`).
    #[default]
    Plain,
    /// What zod-to-json-schema writes (the reference filesystem server, Playwright MCP): every object
    /// closed with `additionalProperties: false`, no empty `required`, and draft-07's `$schema` at the
    /// top.
    ZodToJsonSchema,
    /// What pydantic's `model_json_schema` writes (the Anthropic SDK's tool input types): the model's
    /// title and description at the top, `additionalProperties: true`, a `title` on every property
    /// (its name in title case), an optional property as `anyOf` with `null` and `default: null`, and
    /// every object's keys in alphabetical order.
    Pydantic,
}

const DRAFT_07: &str = "http://json-schema.org/draft-07/schema#";

/// The keys of a schema object, in the order upstream's writers put them; others follow.
const KEY_ORDER: [&str; 9] = [
    "type",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "default",
    "description",
    "$schema",
];

/// A tool's input schema. A declared tool's is derived from its argument struct the first time it is
/// asked for (a listing, a call that checks against it), not when boxd starts: deriving every family's
/// took most of the families' share of the start before the first answer, and most sandboxes never
/// list most of their tools.
#[derive(Clone)]
pub struct InputSchema(Arc<LazyLock<Value, Box<dyn FnOnce() -> Value + Send>>>);

impl InputSchema {
    /// A schema given as it is (a hosted server's, a hand-written one).
    pub fn ready(schema: Value) -> InputSchema {
        InputSchema(Arc::new(LazyLock::new(Box::new(move || schema))))
    }

    /// `A`'s schema in `dialect`, derived when first asked for.
    pub fn derived<A: JsonSchema + 'static>(dialect: SchemaDialect) -> InputSchema {
        InputSchema(Arc::new(LazyLock::new(Box::new(move || {
            input_schema::<A>(dialect)
        }))))
    }
}

impl Deref for InputSchema {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

impl Serialize for InputSchema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl PartialEq<Value> for InputSchema {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(formatter)
    }
}

/// `A`'s input schema as `dialect` writes it.
pub fn input_schema<A: JsonSchema>(dialect: SchemaDialect) -> Value {
    let settings = SchemaSettings::draft07().with(|settings| {
        settings.inline_subschemas = true;
        settings.meta_schema = None;
    });
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if dialect == SchemaDialect::Pydantic {
        return pydantic(schema);
    }
    if let Value::Object(root) = &mut schema {
        // The tool's description is its own; the struct's doc comment is for Rust readers.
        root.remove("title");
        root.remove("description");
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        // zod-to-json-schema leaves out a `required` with nothing in it; hand-written schemas say it.
        if dialect == SchemaDialect::Plain {
            root.entry("required")
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    tidy(&mut schema, dialect);
    if dialect == SchemaDialect::ZodToJsonSchema
        && let Value::Object(root) = &mut schema
    {
        root.insert("$schema".into(), Value::from(DRAFT_07));
    }
    ordered(schema)
}

/// Rust's types said in JSON Schema's words only: an `Option` is a property that may be left out
/// (not one that may be `null`), and integer widths (`format`, an unsigned `minimum`) are Rust's,
/// not the tool's.
fn tidy(schema: &mut Value, dialect: SchemaDialect) {
    let Value::Object(object) = schema else {
        return;
    };
    object.remove("title");
    if let Some(Value::String(format)) = object.remove("format")
        && format.starts_with("uint")
        && object.get("minimum") == Some(&Value::from(0))
    {
        object.remove("minimum");
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|kind| kind != "null");
        if let [single] = types.as_slice() {
            let single = single.clone();
            object.insert("type".into(), single);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|value| !value.is_null());
    }
    if dialect == SchemaDialect::ZodToJsonSchema
        && object.get("type") == Some(&Value::from("object"))
    {
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            tidy(property, dialect);
        }
    }
    if let Some(items) = object.get_mut("items") {
        tidy(items, dialect);
    }
}

/// The schema schemars wrote, as pydantic writes the same model (see [`SchemaDialect::Pydantic`]):
/// the struct's `#[schemars(title, description)]` are the model's; field docs are Rust's alone.
fn pydantic(mut schema: Value) -> Value {
    let Value::Object(root) = &mut schema else {
        return schema;
    };
    root.insert("additionalProperties".into(), Value::Bool(true));
    root.entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let mut required: Vec<String> = root
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|name| name.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    required.sort_unstable();
    if required.is_empty() {
        root.remove("required");
    } else {
        root.insert("required".into(), Value::from(required.clone()));
    }
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            let mut inner = std::mem::take(property);
            strip_rust_words(&mut inner);
            let mut nullable = false;
            if let Value::Object(object) = &mut inner
                && let Some(Value::Array(types)) = object.get_mut("type")
            {
                nullable = types.iter().any(|kind| kind == "null");
                types.retain(|kind| kind != "null");
                if let [single] = types.as_slice() {
                    let single = single.clone();
                    object.insert("type".into(), single);
                }
            }
            let mut described = Map::new();
            if nullable && !required.contains(name) {
                described.insert(
                    "anyOf".into(),
                    Value::Array(vec![inner, serde_json::json!({"type": "null"})]),
                );
                described.insert("default".into(), Value::Null);
            } else if let Value::Object(object) = inner {
                described = object;
            }
            described.insert("title".into(), Value::from(python_title(name)));
            *property = Value::Object(described);
        }
    }
    alphabetical(schema)
}

/// What schemars adds that pydantic does not say: a field's doc comment, integer widths.
fn strip_rust_words(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    object.remove("description");
    object.remove("format");
    object.remove("title");
    if let Some(items) = object.get_mut("items") {
        strip_rust_words(items);
    }
}

/// pydantic's default title of a field: `name.title()` with `_` read as a space.
fn python_title(name: &str) -> String {
    let mut title = String::with_capacity(name.len());
    let mut word_start = true;
    for ch in name.chars() {
        if ch == '_' {
            title.push(' ');
            word_start = true;
        } else if ch.is_alphabetic() {
            if word_start {
                title.extend(ch.to_uppercase());
            } else {
                title.extend(ch.to_lowercase());
            }
            word_start = false;
        } else {
            title.push(ch);
            word_start = true;
        }
    }
    title
}

/// Every object's keys sorted, as pydantic's schemas are printed.
fn alphabetical(schema: Value) -> Value {
    match schema {
        Value::Object(object) => {
            let mut entries: Vec<(String, Value)> = object.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, alphabetical(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(alphabetical).collect()),
        other => other,
    }
}

/// The same schema with each object's keys in [`KEY_ORDER`], so the listing reads as upstream's.
fn ordered(schema: Value) -> Value {
    match schema {
        Value::Object(mut object) => {
            let mut sorted = Map::new();
            for key in KEY_ORDER {
                if let Some(value) = object.remove(key) {
                    sorted.insert(key.to_owned(), value);
                }
            }
            sorted.extend(object);
            let properties = sorted.get_mut("properties").map(std::mem::take);
            if let Some(Value::Object(properties)) = properties {
                let properties = properties
                    .into_iter()
                    .map(|(name, property)| (name, ordered(property)))
                    .collect();
                sorted.insert("properties".into(), Value::Object(properties));
            }
            if let Some(items) = sorted.get_mut("items") {
                *items = ordered(std::mem::take(items));
            }
            Value::Object(sorted)
        }
        other => other,
    }
}

/// For the tests of a family whose one tool takes an `action` from a table (`computer`, `adb`): the
/// schema derived from `A` lists each of the table's `(name, upstream)` actions once, upstream's
/// first; answers the schema for further checks.
#[cfg(test)]
pub fn assert_actions_listed<A: JsonSchema>(table: &[(&str, bool)]) -> Value {
    let schema = input_schema::<A>(SchemaDialect::Plain);
    let listed: Vec<&str> = schema["properties"]["action"]["enum"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
    let mut sorted = listed.clone();
    names.sort_unstable();
    sorted.sort_unstable();
    assert_eq!(sorted, names);
    names.dedup();
    assert_eq!(names.len(), table.len(), "a name declared twice");
    let upstream_count = table.iter().filter(|(_, upstream)| *upstream).count();
    let upstream = |name: &&str| table.iter().any(|(n, upstream)| n == name && *upstream);
    assert!(listed[..upstream_count].iter().all(upstream), "{listed:?}");
    assert!(!listed[upstream_count..].iter().any(upstream), "{listed:?}");
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// A struct's doc comment: not the tool's.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Edit {
        path: String,
        edits: Vec<Pair>,
        /// Preview changes using git-style diff format
        #[serde(default, rename = "dryRun")]
        dry_run: bool,
        #[schemars(description = "The index")]
        index: Option<f64>,
        count: Option<u32>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Pair {
        #[serde(rename = "oldText")]
        old_text: String,
    }

    #[test]
    fn a_struct_reads_as_zod_to_json_schema_writes_it() {
        let schema = input_schema::<Edit>(SchemaDialect::ZodToJsonSchema);
        let expected = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "edits": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"oldText": {"type": "string"}},
                    "required": ["oldText"],
                    "additionalProperties": false,
                }},
                "dryRun": {"type": "boolean", "default": false, "description": "Preview changes using git-style diff format"},
                "index": {"type": "number", "description": "The index"},
                "count": {"type": "integer"},
            },
            "required": ["path", "edits"],
            "additionalProperties": false,
            "$schema": DRAFT_07,
        });
        assert_eq!(schema, expected);
        let text = serde_json::to_string(&schema).unwrap_or_default();
        assert!(
            text.starts_with(r#"{"type":"object","properties":{"path""#),
            "{text}"
        );
    }

    #[test]
    fn a_struct_reads_as_pydantic_writes_it() {
        /// Rust's doc comment, not the model's.
        #[derive(Deserialize, JsonSchema)]
        #[schemars(title = "ReadInput", description = "Input payload.")]
        #[allow(dead_code)]
        struct Read {
            /// Not shown.
            file_path: String,
            view_range: Option<Vec<i64>>,
            timeout_ms: Option<i64>,
        }
        let schema = input_schema::<Read>(SchemaDialect::Pydantic);
        let expected = json!({
            "additionalProperties": true,
            "description": "Input payload.",
            "properties": {
                "file_path": {"title": "File Path", "type": "string"},
                "timeout_ms": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null, "title": "Timeout Ms"},
                "view_range": {"anyOf": [{"items": {"type": "integer"}, "type": "array"}, {"type": "null"}], "default": null, "title": "View Range"},
            },
            "required": ["file_path"],
            "title": "ReadInput",
            "type": "object",
        });
        assert_eq!(schema, expected);
    }

    #[test]
    fn a_struct_without_fields_lists_properties_and_required_as_each_dialect_does() {
        #[derive(Deserialize, JsonSchema)]
        struct Nothing {}
        assert_eq!(
            input_schema::<Nothing>(SchemaDialect::Plain),
            json!({"type": "object", "properties": {}, "required": []})
        );
        assert_eq!(
            input_schema::<Nothing>(SchemaDialect::ZodToJsonSchema),
            json!({"type": "object", "properties": {}, "additionalProperties": false, "$schema": DRAFT_07})
        );
    }
}
