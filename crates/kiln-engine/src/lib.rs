//! Kiln's engine: requests, the scheduler, KV-block bookkeeping, the sampler, and the
//! step loop on its own thread behind an [`EngineHandle`].
//!
//! Continuous batching with chunked prefill over a paged KV cache with prefix reuse:
//! every step the [`scheduler`] picks sequences under one token budget, the
//! [`core::EngineCore`] fills pre-built buffers ([`plan`]) and runs the model once over
//! the flat batch, then samples, updates, and emits token events. The engine knows
//! nothing of HTTP or JSON.

pub mod config;
pub mod constraint;
pub mod core;
mod error;
pub mod handle;
pub mod kv;
mod masks;
pub mod output;
pub mod plan;
pub mod request;
pub mod sample;
pub mod scheduler;
pub mod sequence;
pub mod serving;
pub mod spec;
pub mod stats;
mod stats_log;
pub mod stop;

pub use config::EngineConfig;
pub use constraint::{Constraint, ConstraintError, ConstraintFactory};
pub use error::{Error, Result};
pub use handle::{spawn, EngineHandle, EngineThread, RequestEvents};
pub use request::{
    EngineEvent, FinishReason, GenerateRequest, SeqTimings, StopConditions, TokenLogprobs,
};
pub use serving::{ServingModel, ServingOptions};
pub use spec::{DraftCounts, SpecMode};
pub use stats::{EngineStats, ProfileEntry, SpecDecodeStats, StatsSnapshot};
