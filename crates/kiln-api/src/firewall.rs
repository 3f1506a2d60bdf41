//! Kiln's `POST /v1/firewall/score`: the prompt firewall's scores for any text.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ScoreRequest {
    /// A string or a list of strings.
    #[serde(default)]
    pub input: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreResponse {
    pub data: Vec<TextScore>,
}

/// One text's scores: `injection_score` from 1 (riskiest) to 99 (`null` for blank
/// text), and the PII categories found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextScore {
    pub injection_score: Option<u8>,
    pub pii_detected: bool,
    pub pii_categories: Vec<String>,
}
