//! MCP `CallToolResult` as upstream serialises it: what every tool answers.

use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentItem {
    Text {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// An item relayed as a hosted MCP server sent it (any content type, its own fields).
    #[serde(untagged)]
    Raw(serde_json::Value),
}

impl ContentItem {
    pub fn plain_text(text: impl Into<String>) -> Self {
        ContentItem::Text {
            text: text.into(),
            description: None,
        }
    }

    pub fn described_text(description: &str, text: impl Into<String>) -> Self {
        ContentItem::Text {
            text: text.into(),
            description: Some(description.to_owned()),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CallToolResult {
    pub meta: Option<serde_json::Value>,
    pub content: Vec<ContentItem>,
    #[serde(rename = "structuredContent")]
    pub structured_content: Option<serde_json::Value>,
    #[serde(rename = "isError")]
    pub is_error: bool,
}

impl CallToolResult {
    pub fn new(content: Vec<ContentItem>, is_error: bool) -> Self {
        CallToolResult {
            meta: None,
            content,
            structured_content: None,
            is_error,
        }
    }
}
