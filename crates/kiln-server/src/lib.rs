//! Kiln's OpenAI-compatible HTTP server (axum on tokio).
//!
//! [`app`] builds the router over an [`AppState`] (the served models, API keys, limits);
//! [`serve`] loads the pinned models in the background, serves, and shuts down
//! gracefully. Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `POST /v1/embeddings`, `GET /v1/models`, `POST /tokenize`, `POST /detokenize`,
//! `POST /ai/run/{model}` (Workers AI style, for every task), OpenAI's Responses API
//! (`/v1/responses`, over [`kiln_responses`]), `GET /admin/usage`,
//! `GET /health`, `GET /ready`, `GET /metrics` (Prometheus).
//!
//! This crate keeps routes, extraction, the mapping between the wire and typed
//! requests, SSE framing and middleware. The work below HTTP is the generation
//! service's ([`kiln_generate::Generator`]: model leases, prompts, grammars, sampling
//! checks, admission, metering), and the services' own crates'; the binary builds
//! them over one generator, and no service reaches back into the server.
//!
//! Request flow: [`extract`] parses the body (errors name the field), a route maps it to
//! a typed request for the generator, which starts it on the engine and hands back its
//! events, and the route collects them into the endpoint's JSON or streams them as SSE
//! ([`stream`]). Every failure is an [`ApiError`], which wraps the services' classified
//! errors; `kiln-http` turns it into OpenAI's error body.

mod app;
mod auth;
mod batch_runner;
mod body_limit;
mod chat_file_search;
pub mod error;
pub mod extract;
pub mod gate;
pub mod lease;
pub mod middleware;
mod routes;
pub mod serve;
pub mod state;
pub mod stream;

pub use app::app;
pub use batch_runner::BatchLines;
pub use error::{ApiError, Error, Result};
pub use gate::Gates;
pub use gate::{CacheSettings, GuardSettings};
pub use kiln_agents::ScheduleLimits as AgentScheduleLimits;
pub use kiln_generate::ServingOptions;
pub use kiln_host::{
    Encoder, EncoderWeights, HostedModel, Lease, LoadedModel, LoraConfig, ModelKind, ModelSource,
    ModelStatus,
};
pub use kiln_http::{ApiKey, ConnectionLimits, CorsPolicy};
pub use kiln_responses::Limits as ResponseLimits;
pub use lease::{CallContext, Caller, WARM_HEADER};
pub use serve::{serve, shutdown_signal, ServeOptions};
pub use state::{AppState, Colo, ServerConfig, Services};
