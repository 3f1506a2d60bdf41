//! Turning logits into tokens: parameters, per-sequence state, and the sampler.

mod params;
mod sampler;
mod state;

pub use params::SamplingParams;
pub use sampler::{argmax, Sampled, Sampler};
pub use state::SeqSamplingState;
