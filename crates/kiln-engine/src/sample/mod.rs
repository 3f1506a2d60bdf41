//! Turning logits into tokens: parameters, per-sequence state, and the sampler.

mod params;
mod sampler;
mod scan;
mod state;

pub use params::SamplingParams;
pub use sampler::{argmax, Sampled, Sampler};
pub use scan::NonFiniteRow;
pub use state::SeqSamplingState;
