//! OpenAI's Batch API (`/v1/batches`) and Workers AI's queued requests
//! (`/ai/run/{model}?queueRequest=true`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/batches`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateBatch {
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A batch: `status` is `validating`, `in_progress`, `finalizing`, `completed`,
/// `failed`, `cancelling`, `cancelled` or `expired`; times are unix seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub id: String,
    pub object: String,
    pub endpoint: String,
    pub errors: Option<BatchErrors>,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: String,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: u64,
    pub in_progress_at: Option<u64>,
    pub expires_at: Option<u64>,
    pub finalizing_at: Option<u64>,
    pub completed_at: Option<u64>,
    pub failed_at: Option<u64>,
    pub expired_at: Option<u64>,
    pub cancelling_at: Option<u64>,
    pub cancelled_at: Option<u64>,
    pub request_counts: RequestCounts,
    pub metadata: Option<BTreeMap<String, String>>,
    pub usage: BatchUsage,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

/// Tokens of the batch's requests so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchUsage {
    pub input_tokens: u64,
    pub input_tokens_details: CachedTokens,
    pub output_tokens: u64,
    pub output_tokens_details: ReasoningTokens,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedTokens {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningTokens {
    pub reasoning_tokens: u64,
}

/// Why a batch failed validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchErrors {
    pub object: String,
    pub data: Vec<BatchError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    /// 1-based line of the input file.
    pub line: Option<u64>,
}

/// One line of a batch's input file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchInputLine {
    pub custom_id: String,
    pub method: String,
    pub url: String,
    pub body: Value,
}

/// One line of a batch's output or error file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchOutputLine {
    pub id: String,
    pub custom_id: Option<String>,
    pub response: Option<BatchLineResponse>,
    pub error: Option<BatchLineError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchLineResponse {
    pub status_code: u16,
    pub request_id: String,
    pub body: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchLineError {
    pub code: String,
    pub message: String,
}

/// `POST /ai/run/{model}?queueRequest=true`: new requests, or a poll for earlier ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueueRequest {
    Submit { requests: Vec<Value> },
    Poll { request_id: String },
}

/// What a queued request answers while it waits or runs: `status` is `queued` or
/// `running`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStatus {
    pub status: String,
    pub request_id: String,
    pub model: String,
}

/// A finished queued request: one response per request, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueResults {
    pub responses: Vec<QueueResponse>,
    pub usage: QueueUsage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueResponse {
    pub id: u64,
    pub result: Value,
    pub success: bool,
    pub external_reference: Option<String>,
    /// Why the request failed (`success: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Workers AI's envelope around a queue answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueEnvelope<T> {
    pub result: T,
    pub success: bool,
    pub errors: Vec<Value>,
    pub messages: Vec<Value>,
}

impl<T> QueueEnvelope<T> {
    pub fn ok(result: T) -> Self {
        Self {
            result,
            success: true,
            errors: Vec::new(),
            messages: Vec::new(),
        }
    }
}
