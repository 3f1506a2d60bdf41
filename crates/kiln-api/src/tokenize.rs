//! vLLM's `POST /tokenize` and `POST /detokenize`.

use serde::{Deserialize, Serialize};

use crate::chat::ChatMessage;

/// Exactly one of `prompt` and `messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
    /// Rendered with the model's chat template first.
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// Default: true for `prompt`, false for `messages` (the template adds them).
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
    /// With `messages`; default true.
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Also return each token's text.
    #[serde(default)]
    pub return_token_strs: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    #[serde(default)]
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
