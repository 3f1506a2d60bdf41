//! Kiln's HTTP wire types: the OpenAI-compatible requests and responses of
//! `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings` and `/v1/models`, their
//! stream chunks, structured output and tools (`structured`), vLLM's `/tokenize` and `/detokenize`, the Workers AI-style
//! `/ai/run/{model}`, OpenAI's Responses API (`responses`), Files (`files`) and Batch API (`batches`, with
//! Workers AI's queued requests), Cloudflare Vectorize (`vectorize`), vector stores (`vector_stores`) and its error body.
//!
//! Only serde: the server, the router and the benchmark client share these types, and
//! the engine never sees them. Requests accept `null` wherever OpenAI does and ignore
//! fields they don't know (as vLLM does), so SDKs that send newer fields keep working;
//! values of the wrong type are rejected by serde, and the server reports the field.

pub mod agents;
pub mod batches;
pub mod caller;
pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod endpoints;
pub mod error;
pub mod files;
pub mod firewall;
pub mod models;
pub mod observe;
pub mod responses;
pub mod structured;
pub mod tokenize;
pub mod vector_stores;
pub mod vectorize;
pub mod workers_ai;

pub use caller::{key_id, Caller, ANONYMOUS};
pub use common::{PromptTokensDetails, SpeculativeUsage, StopSequences, StreamOptions, Usage};
pub use error::{without_paths, ClassifiedError, ErrorBody, ErrorKind, ErrorResponse};
