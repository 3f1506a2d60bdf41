//! One module per endpoint (Workers AI's encoder tasks apart), plus what the generation
//! endpoints share.

pub mod admin;
pub mod agents;
pub mod batches;
pub mod chat;
pub mod completions;
pub mod dashboard;
pub mod embeddings;
pub mod files;
pub mod firewall;
pub mod health;
pub mod metrics;
pub mod models;
pub mod responses;
pub mod tokenize;
pub mod vector_stores;
pub mod vectorize;
pub mod workers_ai;
pub mod workers_ai_encoders;
pub mod workers_ai_queue;

use kiln_api::Usage;
use kiln_generate::{Collected, FinishReason, Generation, Generator};

use crate::error::ApiError;
use crate::lease::api_usage;

/// Runs `gen` to the end: each choice's output and the usage (a 503 if the shutdown
/// deadline passes first).
pub async fn collect(
    generator: &Generator,
    gen: Generation,
) -> Result<(Vec<Collected>, Usage), ApiError> {
    let (out, usage) = generator.collect(gen).await?;
    Ok((out, api_usage(usage)))
}

/// OpenAI's `finish_reason` for a choice.
pub fn finish_reason(r: Option<FinishReason>) -> Option<String> {
    r.map(|r| r.as_str().to_string())
}
