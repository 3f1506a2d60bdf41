//! The Workers AI-style `POST /ai/run/{model}`. Text generation: `{prompt}` or
//! `{messages}` in, `{result: {response, usage}, success, errors, messages}` out.
//! Embeddings: `{text}` in, `{result: {shape, data, pooling}, ...}` out. Text
//! classification: `{text}` in, `{result: [{label, score}, ...], ...}` out.

use serde::{Deserialize, Serialize};

use crate::chat::ChatMessage;
use crate::common::Usage;

/// Exactly one of `prompt` and `messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AiRunRequest {
    #[serde(default)]
    pub prompt: Option<String>,
    /// A LoRA adapter of the model to run with (also `.../ai/run/base:adapter`).
    #[serde(default)]
    pub lora: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// With `prompt`: send it as is instead of wrapping it in a user turn of the chat
    /// template (models without a template always get it raw).
    #[serde(default)]
    pub raw: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    /// Answer 429 at once instead of queueing when the model is busy.
    #[serde(default)]
    pub reject_if_busy: Option<bool>,
    /// Functions the model may call: Workers AI's `{name, description, parameters}` or
    /// OpenAI's `{type: "function", function: {...}}`.
    #[serde(default)]
    pub tools: Option<Vec<serde_json::Value>>,
    /// JSON mode: `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema":
    /// S}` where `S` is the schema itself (Workers AI) or OpenAI's `{name, schema}`.
    #[serde(default)]
    pub response_format: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunResponse {
    pub result: AiRunResult,
    pub success: bool,
    pub errors: Vec<serde_json::Value>,
    pub messages: Vec<serde_json::Value>,
}

impl AiRunResponse {
    pub fn success(response: String, tool_calls: Option<Vec<AiToolCall>>, usage: Usage) -> Self {
        Self {
            result: AiRunResult {
                response,
                tool_calls,
                usage,
            },
            success: true,
            errors: Vec::new(),
            messages: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunResult {
    pub response: String,
    /// The calls the model made, when the request declared `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<AiToolCall>>,
    pub usage: Usage,
}

/// A tool call in Workers AI's shape: the arguments as an object, not a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiToolCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

/// One streamed event: `data: {"response": "..."}`; the last one before `[DONE]` has
/// an empty response and the usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunChunk {
    pub response: String,
    /// On the last event, the calls the model made (when the request declared `tools`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<AiToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// What every Workers AI response wraps its result in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunEnvelope<T> {
    pub result: T,
    pub success: bool,
    pub errors: Vec<serde_json::Value>,
    pub messages: Vec<serde_json::Value>,
}

impl<T> AiRunEnvelope<T> {
    pub fn success(result: T) -> Self {
        Self {
            result,
            success: true,
            errors: Vec::new(),
            messages: Vec::new(),
        }
    }
}

/// The input of an embedding or text-classification model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiTextRequest {
    pub text: AiText,
    /// Workers AI's field: cut inputs over the model's limit to their first tokens
    /// instead of refusing the request.
    #[serde(default)]
    pub truncate_inputs: Option<bool>,
    /// Embeddings: `mean` or `cls`; a model answers only with its own pooling.
    #[serde(default)]
    pub pooling: Option<String>,
}

/// `text`: one string or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum AiText {
    One(String),
    Many(Vec<String>),
}

/// An embedding model's result: `shape` is `[inputs, dimensions]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiEmbeddings {
    pub shape: [usize; 2],
    pub data: Vec<Vec<f32>>,
    pub pooling: String,
}

/// One class of a text-classification result (results are sorted by `score`,
/// highest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiLabelScore {
    pub label: String,
    pub score: f32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encoder_shapes() {
        let r: AiTextRequest = serde_json::from_value(json!({"text": ["a", "b"]})).expect("parse");
        assert_eq!(r.text, AiText::Many(vec!["a".into(), "b".into()]));
        let r: AiTextRequest = serde_json::from_value(json!({"text": "a"})).expect("parse");
        assert_eq!(r.text, AiText::One("a".into()));
        assert!(serde_json::from_value::<AiTextRequest>(json!({"text": 5})).is_err());
        let out = AiRunEnvelope::success(vec![AiLabelScore {
            label: "safe".into(),
            score: 0.75,
        }]);
        assert_eq!(
            serde_json::to_value(&out).expect("serialize"),
            json!({"result": [{"label": "safe", "score": 0.75}], "success": true,
                "errors": [], "messages": []})
        );
    }
}
