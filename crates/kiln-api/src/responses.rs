//! OpenAI's Responses API (`/v1/responses`): the request, the response object, its
//! items (messages, function calls and their outputs, MCP listings, calls and
//! approvals, file searches), the streamed events and the input-item list.
//!
//! Items are one tagged enum, so what is stored, returned and sent back as input is the
//! same JSON. Tools and input are kept loose (`serde_json::Value`) in the request so the
//! server can name the exact field that is wrong instead of a generic parse error.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/responses`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateResponse {
    #[serde(default)]
    pub model: Option<String>,
    /// A string (one user message) or a list of items.
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub instructions: Option<String>,
    /// `function` and `mcp` tools.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required`, `{"type": "function", "name"}` or
    /// `{"type": "mcp", "server_label", "name"}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub text: Option<TextConfig>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Bound on tool rounds (MCP calls executed here) in one response.
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Default true.
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub user: Option<String>,
    /// Only `disabled` (the default) is served: an over-long conversation is an error.
    #[serde(default)]
    pub truncation: Option<String>,
    /// Extra output to include: `file_search_call.results`.
    #[serde(default)]
    pub include: Option<Vec<String>>,
}

/// `text`: the output's format.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<TextFormat>,
}

/// `text.format`: `{"type": "text" | "json_object" | "json_schema", name?, schema?, strict?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A response object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    /// `queued`, `in_progress`, `completed`, `incomplete`, `failed` or `cancelled`.
    pub status: String,
    pub background: bool,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub max_tool_calls: Option<u32>,
    pub model: String,
    pub output: Vec<Item>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub text: TextConfig,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub truncation: String,
    pub usage: Option<ResponseUsage>,
    pub user: Option<String>,
    pub metadata: Map<String, Value>,
}

/// Why a response failed: OpenAI's `{code, message}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

/// Why a response is `incomplete` (`max_output_tokens`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncompleteDetails {
    pub reason: String,
}

/// Token counts of a response, summed over its model rounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

/// One item of a conversation, input or output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    Message {
        id: String,
        role: String,
        content: Vec<ContentPart>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
    },
    FunctionCallOutput {
        id: String,
        call_id: String,
        output: String,
    },
    McpListTools {
        id: String,
        server_label: String,
        tools: Vec<McpToolInfo>,
        #[serde(default)]
        error: Option<String>,
    },
    McpCall {
        id: String,
        server_label: String,
        name: String,
        arguments: String,
        #[serde(default)]
        output: Option<String>,
        #[serde(default)]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_request_id: Option<String>,
    },
    McpApprovalRequest {
        id: String,
        server_label: String,
        name: String,
        arguments: String,
    },
    McpApprovalResponse {
        id: String,
        approval_request_id: String,
        approve: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A search of the request's vector stores; `results` only when the request's
    /// `include` asks for `file_search_call.results`.
    FileSearchCall {
        id: String,
        status: String,
        queries: Vec<String>,
        #[serde(default)]
        results: Option<Vec<FileSearchResult>>,
    },
}

/// A chunk a `file_search_call` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSearchResult {
    pub file_id: String,
    pub filename: String,
    pub score: f64,
    pub text: String,
    #[serde(default)]
    pub attributes: Map<String, Value>,
}

impl Item {
    pub fn id(&self) -> &str {
        match self {
            Item::Message { id, .. }
            | Item::FunctionCall { id, .. }
            | Item::FunctionCallOutput { id, .. }
            | Item::McpListTools { id, .. }
            | Item::McpCall { id, .. }
            | Item::McpApprovalRequest { id, .. }
            | Item::McpApprovalResponse { id, .. }
            | Item::FileSearchCall { id, .. } => id,
        }
    }
}

/// A part of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    InputText {
        text: String,
    },
    OutputText {
        text: String,
        #[serde(default)]
        annotations: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
}

impl ContentPart {
    /// The part's text (a refusal's reason).
    pub fn text(&self) -> &str {
        match self {
            ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => text,
            ContentPart::Refusal { refusal } => refusal,
        }
    }
}

/// A tool an MCP server offers, as listed in `mcp_list_tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: Option<Value>,
}

/// `GET /v1/responses/{id}/input_items` and list endpoints of items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemList {
    pub object: String,
    pub data: Vec<Item>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deleted {
    pub id: String,
    pub object: String,
    pub deleted: bool,
}

/// One streamed event: its `type` names the SSE event; the rest are its fields
/// (`response`, `item`, `output_index`, `delta`, ...), in OpenAI's shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub sequence_number: u64,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}
