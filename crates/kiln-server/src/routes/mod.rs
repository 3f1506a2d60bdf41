//! One module per endpoint (Workers AI's encoder tasks apart), plus what the generation
//! endpoints share.

pub mod admin;
pub mod agents;
pub mod batches;
pub mod chat;
pub mod completions;
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
use kiln_host::{Collected, Generation, HostError, HostedModel, Permit};

use crate::cutoff::CutoffSignal;
use crate::error::ApiError;
use crate::lease::api_usage;

/// Admits `seqs` sequences to `hosted`'s queue, counting refusals in the metrics.
pub fn admit(hosted: &HostedModel, seqs: usize, reject_if_busy: bool) -> Result<Permit, ApiError> {
    let admitted = hosted
        .admission
        .try_admit(&hosted.name, seqs, reject_if_busy)
        .inspect_err(|e| match e {
            HostError::QueueFull { .. } => hosted.metrics.rejected_queue_full.add(1),
            HostError::Busy { .. } => hosted.metrics.rejected_busy.add(1),
            _ => {}
        });
    Ok(admitted?)
}

/// Runs `gen` to the end ([`kiln_host::collect`]): each choice's output and the usage.
/// A 503 if the shutdown deadline passes first.
pub async fn collect(
    gen: Generation,
    mut cutoff: CutoffSignal,
) -> Result<(Vec<Collected>, Usage), ApiError> {
    let (out, usage) = tokio::select! {
        r = kiln_host::collect(gen) => r?,
        () = cutoff.passed() => return Err(ApiError::ShutdownCut),
    };
    Ok((out, api_usage(usage)))
}

/// OpenAI's `finish_reason` for a choice.
pub fn finish_reason(r: Option<kiln_engine::FinishReason>) -> Option<String> {
    r.map(|r| r.as_str().to_string())
}
