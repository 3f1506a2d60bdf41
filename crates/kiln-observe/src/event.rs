//! One inference request as the router saw it.

use serde::{Deserialize, Serialize};

/// The fallback reason of a request a routing rule sent central.
pub const RULE: &str = "rule";

/// One request: where it ran, what it cost, and whether (and why) it left the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Event {
    /// Assigned by the ring, increasing for the process's life and across restarts.
    #[serde(default)]
    pub seq: u64,
    /// Arrival at the router, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The colo that answered (`upstream` for the central tier without its own).
    pub colo: String,
    /// The node that answered (`upstream` for the central tier).
    pub node: String,
    pub model: String,
    /// `chat`, `completions`, `embeddings`, `text-classification`, `ai-run`, ...
    pub task: String,
    pub status: u16,
    /// Arrival to the last byte sent.
    pub latency_ms: f64,
    /// Arrival to the first byte (a stream's first event).
    pub ttft_ms: Option<f64>,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    /// Set when the request waited for a model load: the wait.
    pub cold_start_ms: Option<u64>,
    pub fallback: Option<FallbackInfo>,
    /// A classification's top-class score.
    pub confidence: Option<f64>,
    /// The error code (or status) of a failed request.
    pub error: Option<String>,
    pub neurons: Option<f64>,
    /// Neurons spent on work the application did not use (an edge answer re-checked
    /// centrally).
    #[serde(default)]
    pub wasted_neurons: f64,
    /// The routing rule that decided where it ran (by the router's config; its names
    /// are bounded there), or `None` when no rule matched.
    #[serde(default)]
    pub rule: Option<String>,
    /// `edge` (a node answered) or `central` (the upstream); `None` when the router
    /// answered itself.
    #[serde(default)]
    pub tier: Option<String>,
}

/// Why a request went to the upstream, from where, and what that cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FallbackInfo {
    /// `node_down`, `overloaded`, `model_absent`, `context_length`, `low_confidence`,
    /// `rule` (a routing rule sent it central: policy, not a failure).
    pub reason: String,
    /// The colo first tried, if any node was.
    pub from: Option<String>,
    /// Time spent at the edge before going central.
    pub added_ms: f64,
}

impl Event {
    /// Whether it fell back to the upstream because the edge could not (or should not)
    /// answer it; a routing rule's decision is not a fallback.
    pub fn fell_back(&self) -> bool {
        self.fallback.as_ref().is_some_and(|f| f.reason != RULE)
    }

    pub fn is_error(&self) -> bool {
        self.status >= 400 || self.error.is_some()
    }

    /// The minute (since the epoch) the event falls in.
    pub fn minute(&self) -> i64 {
        (self.time_ms / 60_000) as i64
    }
}
