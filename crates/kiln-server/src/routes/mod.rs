//! One module per endpoint (Workers AI's encoder tasks apart), plus what the generation
//! endpoints share.

pub mod admin;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod health;
pub mod metrics;
pub mod models;
pub mod tokenize;
pub mod workers_ai;
pub mod workers_ai_encoders;

use crate::admission::Permit;
use crate::error::ApiError;
use crate::slot::ModelSlot;

/// Admits `seqs` sequences to `slot`'s queue, counting refusals in the metrics.
pub fn admit(slot: &ModelSlot, seqs: usize, reject_if_busy: bool) -> Result<Permit, ApiError> {
    slot.admission
        .try_admit(&slot.name, seqs, reject_if_busy)
        .inspect_err(|e| match e {
            ApiError::QueueFull { .. } => slot.metrics.rejected_queue_full.add(1),
            ApiError::Busy { .. } => slot.metrics.rejected_busy.add(1),
            _ => {}
        })
}

/// OpenAI's `finish_reason` for a choice.
pub fn finish_reason(r: Option<kiln_engine::FinishReason>) -> Option<String> {
    r.map(|r| r.as_str().to_string())
}
