//! Model hosting: keeps models loaded and serves them, without HTTP.
//!
//! A [`Host`] holds every [`HostedModel`] (its names, where to load it from, its life
//! from unloaded to loaded, its admission queue and metrics). [`Residency`] keeps them
//! under one memory budget: an unpinned model loads on its first request and the least
//! recently used idle ones are unloaded to make room. A caller takes a [`Lease`] on a
//! model, which keeps it loaded while the request runs and reports what the request
//! consumed to the caller's [`UsageSink`]. Text models run on the engine through a
//! [`Generation`]; encoders (embeddings, classification) run one blocking pass per
//! request ([`Encoder`]). LoRA adapters are found and cached per model ([`lora`]).
//! Every failure is a typed [`HostError`]; the HTTP server maps them to statuses.

pub mod admission;
pub mod encoder;
mod encoder_pass;
pub mod error;
pub mod generation;
pub mod host;
pub mod hosted;
pub mod kind;
pub mod lease;
pub mod loaded;
pub mod lora;
pub mod metrics;
pub mod residency;
pub mod source;

pub use admission::{Admission, Permit};
pub use encoder::{Encoder, EncoderWeights, CONCURRENT_PASSES};
pub use error::HostError;
pub use generation::{collect, ChoiceEvent, Collected, Generation};
pub use host::{AdaptedModel, Host, SetupError};
pub use hosted::{HostedModel, ModelStatus};
pub use kind::ModelKind;
pub use lease::{Lease, TokenUsage, UsageSink};
pub use loaded::LoadedModel;
pub use lora::{AdapterCache, LoraConfig};
pub use residency::Residency;
pub use source::ModelSource;
