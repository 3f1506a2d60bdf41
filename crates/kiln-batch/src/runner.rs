//! The one thing batches need from the server: run a request body on an endpoint as a
//! given caller, at batch priority, and say what it answered.

use futures_util::future::BoxFuture;
use kiln_api::Caller;
use serde_json::Value;

/// Runs one line. The server implements it over its own routes, so a line gets exactly
/// the checks, errors and metering of the same request sent over HTTP, at the engine's
/// batch priority.
pub trait BatchRunner: Send + Sync + 'static {
    /// Runs `body` on `path` (`/v1/chat/completions`, `/v1/completions`,
    /// `/v1/embeddings` or `/ai/run/{model}`) for `caller`.
    fn run(&self, caller: &Caller, path: &str, body: Value) -> BoxFuture<'static, LineOutcome>;
}

/// What a line's request answered: its HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct LineOutcome {
    pub status: u16,
    pub body: Value,
}

impl LineOutcome {
    /// The server was busy or going away: the line is run again later rather than
    /// failed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.status, 429 | 503)
    }

    /// The tokens the answer reports (OpenAI's `usage`, or Workers AI's
    /// `result.usage`).
    pub fn usage(&self) -> LineUsage {
        let usage = self
            .body
            .get("usage")
            .or_else(|| self.body.get("result").and_then(|r| r.get("usage")));
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let Some(u) = usage else {
            return LineUsage::default();
        };
        LineUsage {
            prompt: n(u.get("prompt_tokens")),
            cached: n(u
                .get("prompt_tokens_details")
                .and_then(|d| d.get("cached_tokens"))),
            completion: n(u.get("completion_tokens")),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineUsage {
    pub prompt: u64,
    pub cached: u64,
    pub completion: u64,
}
