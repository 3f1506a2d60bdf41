//! Kiln's generation service: typed requests in, a typed stream of events out, no HTTP.
//!
//! A [`Generator`] owns the served models ([`kiln_host::Host`]) together with what every
//! request on them needs besides the model: metering, the per-key token buckets and the
//! shutdown deadline. [`Generator::chat`], [`Generator::complete`], [`Generator::embed`]
//! and [`Generator::classify`] take a typed request and do the work between a parsed
//! request and the engine: the model's lease (loading it if needed), the chat template
//! and tokenization ([`prompt`]), output and tool grammars ([`structured`] over
//! `kiln-constrain`), the sampling checks ([`sampling`]), admission, and starting the
//! engine; a text request comes back as a [`kiln_host::Generation`] (its events) with
//! what formatting them needs. Every failure is a [`GenerateError`], classified for
//! clients through [`kiln_api::ClassifiedError`].
//!
//! The services that generate get an `Arc<Generator>` when they are built: the HTTP
//! routes, the Responses API's rounds ([`Rounds`]), batch lines, the vector stores'
//! embedder ([`StoreEmbedder`]) and the firewall's classifier ([`InjectionClassifier`]).
//!
//! A crate of its own rather than part of `kiln-host`: hosting keeps models loaded and
//! knows nothing of requests; this crate speaks the API's vocabulary (messages, tools,
//! sampling fields, metering by caller) and sits between the two, so the HTTP server
//! depends on neither the engine, the tokenizer, the encoders nor the grammar compiler.

pub mod call;
pub mod chat;
mod classifier;
pub mod complete;
pub mod cutoff;
mod embedder;
pub mod encode;
mod encode_checks;
pub mod error;
pub mod generator;
pub mod output;
pub mod prompt;
pub mod request;
mod rounds;
pub mod sampling;
pub mod structured;
pub mod tokenize;
pub mod workers_ai;

pub use call::{Call, RequestClass, Warmth};
pub use chat::{ChatInput, ChatRequest, ChatStream};
pub use classifier::InjectionClassifier;
pub use complete::{CompleteRequest, CompletionStream, PromptInput, MAX_BATCH};
pub use cutoff::{Cutoff, CutoffSignal};
pub use embedder::StoreEmbedder;
pub use encode::{Classified, ClassifyRequest, EmbedRequest, Embedded, EncodeInput, Truncation};
pub use encode_checks::{check_count, MAX_INPUTS};
pub use error::GenerateError;
pub use generator::Generator;
pub use request::{OutputFields, ToolFields};
pub use rounds::Rounds;
pub use sampling::SamplingFields;
pub use tokenize::{TokenizeRequest, Tokenized};

pub use kiln_constrain::ToolFormat;
/// What the engine streams and how a choice ends, as the generator's callers see them.
pub use kiln_engine::output::TextEvent;
pub use kiln_engine::{FinishReason, ServingModel, ServingOptions, StatsSnapshot, TokenLogprobs};
pub use kiln_host::{ChoiceEvent, Collected, Generation, TokenUsage};
pub use kiln_tokenizer::Tokenizer;
