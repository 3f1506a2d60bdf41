//! `POST /v1/chat/completions`: request, response, stream chunk and chat logprobs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::common::{double_option, StopSequences, StreamOptions, Usage};
use crate::structured::{GuidedFields, ResponseFormat, StructuredOutputs, Tool, ToolCallDelta};

/// A chat completion request: OpenAI's fields plus vLLM's extra sampling fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// Catalogue name or alias; the first served model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// A LoRA adapter of the model to run with (also written `model: "base:adapter"`).
    #[serde(default)]
    pub lora: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    /// Token id (as a string) → bias added to its logit, in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<BTreeMap<String, f32>>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Deprecated by OpenAI in favour of `max_completion_tokens`; both are accepted.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub n: Option<u32>,
    /// vLLM's field; as on completions, only `best_of == n` (or absent) is served.
    #[serde(default)]
    pub best_of: Option<u32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<StopSequences>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub user: Option<String>,
    /// Functions the model may call; rendered through the chat template.
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "function": {"name"}}`.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// Default true; false allows at most one call.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// vLLM's structured outputs (`json`, `regex`, `choice`, `grammar`, `json_object`).
    #[serde(default)]
    pub structured_outputs: Option<StructuredOutputs>,
    /// vLLM's older `guided_*` fields.
    #[serde(flatten)]
    pub guided: GuidedFields,
    // vLLM's extra sampling fields.
    /// Keep the `top_k` most likely tokens; 0 or -1 turns it off.
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    #[serde(default)]
    pub min_tokens: Option<u32>,
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub skip_special_tokens: Option<bool>,
    /// Default true: end the rendered prompt with the assistant turn's header.
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Kiln's extension: answer 429 at once instead of queueing when the model is busy.
    #[serde(default)]
    pub reject_if_busy: Option<bool>,
    /// Kiln's extension: `false` opts out of speculative decoding (the output is the
    /// same either way; only its speed differs).
    #[serde(default)]
    pub speculative: Option<bool>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's newer name for `system`; templates see `system`.
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role name chat templates expect.
    pub fn template_name(self) -> &'static str {
        match self {
            Role::System | Role::Developer => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// A string, a list of content parts, or null (an assistant turn with tool calls).
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with plain text content.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(MessageContent::Text(content.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// Message content: a string or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content parts")]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a message's content. Only text parts can be served; the others are
/// recognised so the server can say so instead of failing to parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: serde_json::Value },
    InputAudio { input_audio: serde_json::Value },
    File { file: serde_json::Value },
}

/// A tool call the assistant made (in a previous turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON-encoded arguments, as OpenAI sends them.
    pub arguments: String,
}

/// A complete (non-streamed) chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// `chatcmpl-…`
    pub id: String,
    /// `chat.completion`
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    /// `null` unless logprobs were asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: Option<String>,
}

/// The generated message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: String,
    pub content: Option<String>,
    /// Always `null`: the model doesn't refuse through a separate channel.
    #[serde(default)]
    pub refusal: Option<String>,
    /// The calls the model made (then `finish_reason` is `tool_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// `file_citation`s of the files a server-side `file_search` put before the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<serde_json::Value>>,
}

/// Chat-format logprobs: one entry per generated token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Option<Vec<ChatTokenLogprob>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    /// The token's text (lossy UTF-8 when it holds part of a character).
    pub token: String,
    pub logprob: f32,
    /// The token's exact bytes.
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at this position, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
}

/// One server-sent event of a streamed chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// `chat.completion.chunk`
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    /// Empty in the final usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// Absent without `stream_options.include_usage`; with it, `null` on every chunk
    /// but the last, which carries the totals.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub usage: Option<Option<Usage>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// What a chunk adds to a choice's message; the first chunk of each choice carries the
/// role, the last is empty and carries the finish reason.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// On the first chunk: the message's annotations (see [`AssistantMessage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<serde_json::Value>>,
}
