//! Per-sequence sampler state: its random stream and the token counts penalties need.

use std::collections::HashMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::SamplingParams;

/// Owned by one sequence for its whole life, so its samples never depend on which other
/// sequences share a batch.
pub struct SeqSamplingState {
    pub(crate) rng: ChaCha8Rng,
    /// Occurrences of each token in the output so far.
    pub(crate) output_counts: HashMap<u32, u32>,
    /// Tokens of the prompt (for the repetition penalty), deduplicated and sorted.
    pub(crate) prompt_tokens: Vec<u32>,
    /// Whether any penalty needs the counts (otherwise nothing is recorded).
    track: bool,
}

impl SeqSamplingState {
    /// `seed` is the request's seed or, if it gave none, one drawn by the engine.
    pub fn new(params: &SamplingParams, seed: u64, prompt: &[u32]) -> Self {
        let mut prompt_tokens = Vec::new();
        if params.repetition_penalty != 1.0 {
            prompt_tokens.extend_from_slice(prompt);
            prompt_tokens.sort_unstable();
            prompt_tokens.dedup();
        }
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            output_counts: HashMap::new(),
            prompt_tokens,
            track: params.has_penalties(),
        }
    }

    /// Records a generated token (for presence/frequency/repetition penalties).
    pub fn record(&mut self, token: u32) {
        if self.track {
            *self.output_counts.entry(token).or_insert(0) += 1;
        }
    }
}
