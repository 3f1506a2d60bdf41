//! The chat messages a template renders, in OpenAI's shape.

use serde::{Deserialize, Serialize};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// Text, or a list of typed parts. Absent content renders as an empty string (as in
    /// llama.cpp), e.g. for an assistant message that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// OpenAI `tool_calls`: `[{"id", "type": "function", "function": {"name",
    /// "arguments"}}]`. Arguments given as a JSON string are passed to the template as the
    /// object they encode, which is what Hugging Face templates expect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// For `tool` messages: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with plain text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(MessageContent::Text(content.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// Message content: a string or typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One typed content part, e.g. `{"type": "text", "text": "..."}`. Parts of other types
/// are kept but contribute no text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl ContentPart {
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart {
            kind: "text".to_string(),
            text: Some(text.into()),
        }
    }
}

impl MessageContent {
    /// The text parts joined with newlines (llama.cpp's rule for templates that only take
    /// string content).
    pub fn joined_text(&self) -> String {
        match self {
            MessageContent::Text(t) => t.clone(),
            MessageContent::Parts(parts) => {
                let mut out = String::new();
                for part in parts.iter().filter(|p| p.kind == "text") {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(part.text.as_deref().unwrap_or_default());
                }
                out
            }
        }
    }
}
