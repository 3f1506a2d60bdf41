//! Kiln's OpenAI-compatible HTTP server (axum on tokio).
//!
//! [`app`] builds the router over an [`AppState`] (the served models, API keys, limits);
//! [`run`] binds, loads models in the background, serves, and shuts down gracefully.
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
//! `POST /tokenize`, `POST /detokenize`, `POST /ai/run/{model}` (Workers AI style),
//! `GET /health`, `GET /ready`, `GET /metrics` (Prometheus).
//!
//! Request flow: [`extract`] parses the body (errors name the field), [`validate`]
//! range-checks it into an engine request, [`prompt`] renders and tokenizes, admission
//! ([`admission`]) bounds the queue, [`generation`] runs it on the engine, and the
//! response is either collected or streamed as SSE ([`stream`]). Every failure is an
//! [`ApiError`], which alone knows HTTP statuses.

pub mod admission;
mod app;
mod auth;
pub mod error;
pub mod extract;
pub mod generation;
mod logprobs;
pub mod metrics;
pub mod middleware;
pub mod prompt;
mod routes;
pub mod serve;
pub mod state;
pub mod stream;
pub mod validate;

pub use app::app;
pub use error::{ApiError, Error, Result};
pub use kiln_engine::ServingOptions;
pub use serve::{run, serve, shutdown_signal, ModelSource, ServeOptions};
pub use state::{AppState, ModelSlot, ServerConfig};
