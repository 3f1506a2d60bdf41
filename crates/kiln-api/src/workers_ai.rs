//! The Workers AI-style `POST /ai/run/{model}`: `{prompt}` or `{messages}` in,
//! `{result: {response, usage}, success, errors, messages}` out.

use serde::{Deserialize, Serialize};

use crate::chat::ChatMessage;
use crate::common::Usage;

/// Exactly one of `prompt` and `messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AiRunRequest {
    #[serde(default)]
    pub prompt: Option<String>,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunResponse {
    pub result: AiRunResult,
    pub success: bool,
    pub errors: Vec<serde_json::Value>,
    pub messages: Vec<serde_json::Value>,
}

impl AiRunResponse {
    pub fn success(response: String, usage: Usage) -> Self {
        Self {
            result: AiRunResult { response, usage },
            success: true,
            errors: Vec::new(),
            messages: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunResult {
    pub response: String,
    pub usage: Usage,
}

/// One streamed event: `data: {"response": "..."}`; the last one before `[DONE]` has
/// an empty response and the usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AiRunChunk {
    pub response: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}
