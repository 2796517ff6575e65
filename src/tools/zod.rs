//! Argument checking against a tool's JSON schema, reporting problems as the Node servers boxd replaces
//! do: their zod validation's issue list (`invalid_type`, `expected`, `received`, `path`, `message`),
//! so a caller sees the same text.

use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Debug, Serialize)]
struct Issue {
    code: &'static str,
    expected: String,
    received: &'static str,
    path: Vec<Value>,
    message: String,
}

/// The problems of `arguments` against `schema` (objects, arrays, strings, booleans, numbers), listed as
/// zod's `ZodError` prints them (its issues as JSON, two-space indented); `None` when there are none.
pub fn issues(schema: &Value, arguments: &Value) -> Option<String> {
    let mut issues = Vec::new();
    check(schema, Some(arguments), &mut Vec::new(), true, &mut issues);
    if issues.is_empty() {
        return None;
    }
    Some(serde_json::to_string_pretty(&issues).unwrap_or_default())
}

fn check(
    schema: &Value,
    value: Option<&Value>,
    path: &mut Vec<Value>,
    required: bool,
    issues: &mut Vec<Issue>,
) {
    let Some(expected) = schema.get("type").and_then(Value::as_str) else {
        return;
    };
    let Some(value) = value else {
        if required && schema.get("default").is_none() {
            issues.push(Issue {
                code: "invalid_type",
                expected: expected.to_owned(),
                received: "undefined",
                path: path.clone(),
                message: "Required".to_owned(),
            });
        }
        return;
    };
    let received = type_name(value);
    if received != expected && !(expected == "integer" && value.is_i64()) {
        issues.push(Issue {
            code: "invalid_type",
            expected: expected.to_owned(),
            received,
            path: path.clone(),
            message: format!("Expected {expected}, received {received}"),
        });
        return;
    }
    match value {
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return;
            };
            for (index, item) in items.iter().enumerate() {
                path.push(Value::from(index));
                check(item_schema, Some(item), path, true, issues);
                path.pop();
            }
        }
        Value::Object(fields) => check_fields(schema, fields, path, issues),
        _ => {}
    }
}

fn check_fields(
    schema: &Value,
    fields: &Map<String, Value>,
    path: &mut Vec<Value>,
    issues: &mut Vec<Issue>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        path.push(Value::from(name.as_str()));
        check(
            property,
            fields.get(name),
            path,
            required.contains(&name.as_str()),
            issues,
        );
        path.pop();
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issues_are_listed_in_schema_order_with_zod_wording() {
        let schema = json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "edits": {"type": "array", "items": {"type": "object",
                "properties": {"oldText": {"type": "string"}}, "required": ["oldText"]}},
            "dryRun": {"type": "boolean", "default": false}
        }, "required": ["path", "edits"]});
        let listed = issues(&schema, &json!({"edits": [{}], "dryRun": "x"})).unwrap_or_default();
        let listing: Value = serde_json::from_str(&listed).unwrap_or_default();
        assert_eq!(
            listing,
            json!([
                {"code": "invalid_type", "expected": "string", "received": "undefined",
                 "path": ["path"], "message": "Required"},
                {"code": "invalid_type", "expected": "string", "received": "undefined",
                 "path": ["edits", 0, "oldText"], "message": "Required"},
                {"code": "invalid_type", "expected": "boolean", "received": "string",
                 "path": ["dryRun"], "message": "Expected boolean, received string"},
            ])
        );
    }
}
