//! Kiln's OpenAI-compatible HTTP server (axum on tokio).
//!
//! [`app`] builds the router over an [`AppState`] (the served models, API keys, limits);
//! [`run`] binds, loads the pinned models in the background, serves, and shuts down
//! gracefully. Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `POST /v1/embeddings`, `GET /v1/models`, `POST /tokenize`, `POST /detokenize`,
//! `POST /ai/run/{model}` (Workers AI style, for every task), `GET /admin/usage`,
//! `GET /health`, `GET /ready`, `GET /metrics` (Prometheus).
//!
//! Models live in [`ModelSlot`]s under one memory budget ([`pool`]): unpinned ones load
//! on their first request and the least recently used idle ones are unloaded to make
//! room. A handler takes a [`Lease`] on its model, which keeps it loaded, sets the
//! `x-kiln-warm` header, and records the request's usage ([`kiln_usage`]).
//!
//! Request flow: [`extract`] parses the body (errors name the field), [`validate`]
//! range-checks it into an engine request, [`prompt`] renders and tokenizes, admission
//! ([`admission`]) bounds the queue, [`generation`] runs it on the engine, and the
//! response is either collected or streamed as SSE ([`stream`]). Encoder models
//! (embeddings, text classification; [`encoder`]) skip the engine: a request is one
//! forward pass on a blocking thread. Every failure is an [`ApiError`], which alone
//! knows HTTP statuses.

pub mod admission;
mod app;
mod auth;
pub mod encoder;
pub mod error;
pub mod extract;
pub mod generation;
pub mod kind;
pub mod lease;
mod logprobs;
pub mod lora;
pub mod metrics;
pub mod middleware;
pub mod pool;
pub mod prompt;
mod routes;
pub mod serve;
pub mod slot;
pub mod source;
pub mod state;
pub mod stream;
mod structured;
mod tool_calls;
pub mod validate;

pub use app::app;
pub use encoder::{Encoder, EncoderWeights};
pub use error::{ApiError, Error, Result};
pub use kiln_engine::ServingOptions;
pub use kind::ModelKind;
pub use lease::{CallContext, Caller, Lease, WARM_HEADER};
pub use serve::{run, serve, shutdown_signal, ServeOptions};
pub use slot::{LoadedModel, ModelSlot, SlotStatus};
pub use source::ModelSource;
pub use state::{ApiKey, AppState, ServerConfig};
