//! Kiln's agents API (`/v1/agents/{name}`): an agent's settings, its schedules and the
//! list shapes. Its turns take and return the Responses API's types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::responses::Response;

/// `PUT /v1/agents/{name}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    pub model: String,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Responses-API tools (`function`, `mcp`) every turn gets unless it brings its own.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// Token limit of a turn that sets none (scheduled turns included).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
}

/// An agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub id: String,
    pub object: String,
    pub model: String,
    pub instructions: Option<String>,
    pub tools: Vec<Value>,
    pub max_output_tokens: Option<u32>,
    pub created_at: u64,
    pub updated_at: u64,
}

/// `POST /v1/agents/{name}/schedules`: `input` and exactly one of `delay_seconds`, `at`
/// (RFC 3339) or `cron` (five fields, UTC).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRequest {
    pub input: Value,
    #[serde(default)]
    pub delay_seconds: Option<f64>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
}

/// A schedule: `type` is `delayed`, `scheduled` or `cron`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    pub object: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub input: Value,
    #[serde(default)]
    pub cron: Option<String>,
    /// Unix seconds.
    pub next_run_at: u64,
    /// Failed runs since the last success (each retried with backoff).
    pub attempts: u32,
    #[serde(default)]
    pub last_error: Option<String>,
}

/// `{"object": "list", "data": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct List<T> {
    pub object: String,
    pub data: Vec<T>,
}

impl<T> List<T> {
    pub fn new(data: Vec<T>) -> Self {
        Self {
            object: "list".into(),
            data,
        }
    }
}

/// An agent's history: its stored responses, oldest first.
pub type History = List<Response>;
