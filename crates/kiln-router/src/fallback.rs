//! Why a request went to the upstream (central) tier rather than a node, and what the
//! proxy tells the request's event about it.

use std::time::Duration;

/// Why a request went to the upstream (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// No node lists the model.
    UnknownModel,
    /// A node said the prompt is over its context length.
    ContextLength,
    /// Every shard node answered 429 (or is resting after one).
    Overloaded,
    /// No node could be reached.
    Unavailable,
    /// An edge classification under the confidence threshold, re-run centrally.
    LowConfidence,
    /// A routing rule sends it central ([`crate::rules`]).
    Rule,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::UnknownModel => "unknown_model",
            Fallback::ContextLength => "context_length",
            Fallback::Overloaded => "overloaded",
            Fallback::Unavailable => "unavailable",
            Fallback::LowConfidence => "low_confidence",
            Fallback::Rule => "rule",
        }
    }
}

/// What the proxy tells the events about a request it sent central (a response
/// extension; never sent to the client).
#[derive(Debug, Clone)]
pub struct RouteNote {
    pub fallback: Fallback,
    /// The colo of the first node tried, if any was.
    pub from: Option<String>,
    /// Time spent at the edge before going central.
    pub added: Duration,
    /// Neurons the edge spent on an answer that was not used.
    pub wasted_neurons: f64,
}
