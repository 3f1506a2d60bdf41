//! Kiln's OpenAI-compatible HTTP server (axum on tokio).
//!
//! [`app`] builds the router over an [`AppState`] (the served models, API keys, limits);
//! [`run`] binds, loads the pinned models in the background, serves, and shuts down
//! gracefully. Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `POST /v1/embeddings`, `GET /v1/models`, `POST /tokenize`, `POST /detokenize`,
//! `POST /ai/run/{model}` (Workers AI style, for every task), OpenAI's Responses API
//! (`/v1/responses`, over [`kiln_responses`]), `GET /admin/usage`,
//! `GET /health`, `GET /ready`, `GET /metrics` (Prometheus).
//!
//! Models are hosted by [`kiln_host`] (loading on demand under one memory budget,
//! admission, leases, adapters, encoders); this crate keeps only routes and mapping. A
//! handler takes a lease on its model ([`AppState::lease_hosted`]), which keeps it
//! loaded, sets the `x-kiln-warm` header, and meters the request's usage
//! ([`kiln_usage`]).
//!
//! Request flow: [`extract`] parses the body (errors name the field), [`prompt`] renders
//! and tokenizes, [`validate`] range-checks it into an engine request, admission bounds
//! the queue, a [`kiln_host::Generation`] runs it on the engine, and the response is
//! either collected or streamed as SSE ([`stream`]). Encoder models (embeddings, text
//! classification) skip the engine: a request is one forward pass on a blocking thread.
//! Every failure is an [`ApiError`], which alone knows HTTP statuses; hosting's typed
//! errors map to it in [`error`].

mod app;
mod auth;
mod batch_runner;
mod chat_file_search;
pub mod cutoff;
pub mod encoder;
pub mod error;
pub mod extract;
pub mod gate;
pub mod lease;
mod logprobs;
pub mod metrics;
pub mod middleware;
pub mod prompt;
mod rag_embedder;
mod responses_chat;
mod routes;
pub mod serve;
pub mod state;
pub mod stream;
mod structured;
mod tool_calls;
pub mod validate;

pub use app::app;
pub use error::{ApiError, Error, Result};
pub use gate::{CacheSettings, GuardSettings};
pub use kiln_agents::ScheduleLimits as AgentScheduleLimits;
pub use kiln_engine::ServingOptions;
pub use kiln_host::{
    Encoder, EncoderWeights, HostedModel, Lease, LoadedModel, LoraConfig, ModelKind, ModelSource,
    ModelStatus,
};
pub use kiln_http::{ConnectionLimits, CorsPolicy};
pub use kiln_responses::Limits as ResponseLimits;
pub use lease::{CallContext, Caller, WARM_HEADER};
pub use serve::{run, serve, shutdown_signal, ServeOptions};
pub use state::{ApiKey, AppState, ServerConfig};
