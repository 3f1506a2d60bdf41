//! One sequence as the scheduler sees it: its tokens, progress and blocks.

use std::sync::Arc;

use kiln_model::LoraAdapter;

use crate::kv::SeqBlocks;

/// A sequence id, unique within an engine.
pub type SeqId = u64;

pub struct Sequence {
    pub id: SeqId,
    /// Lower runs first (vLLM's convention); ties go to the earlier arrival.
    pub priority: i32,
    /// Arrival order, for FCFS.
    pub arrival: u64,
    /// Prompt then generated tokens.
    pub tokens: Vec<u32>,
    pub num_prompt_tokens: usize,
    /// Tokens whose K/V are in the cache.
    pub num_computed_tokens: usize,
    /// Extra prefix-cache key material (adapter id, cache salt).
    pub cache_key: Vec<u8>,
    /// The LoRA adapter its rows run with.
    pub adapter: Option<Arc<LoraAdapter>>,
    pub blocks: SeqBlocks,
    /// Prompt tokens found in the prefix cache at admission (for `usage`).
    pub num_cached_tokens: usize,
    pub num_preemptions: u32,
    /// For completions 2..n of one request: the first completion, whose computed prompt
    /// this one waits for so it can reuse the prompt's KV blocks from the prefix cache.
    pub prompt_leader: Option<SeqId>,
    /// Alternatives to report with each prompt token's log-probability, if asked.
    pub prompt_logprobs: Option<usize>,
    /// Next prompt position whose log-probability is still to be reported (from 1: the
    /// first token has no context). Survives preemption so nothing is reported twice.
    pub prompt_logprob_next: usize,
    /// Tokens proposed to follow `tokens` this step, verified by the step (see
    /// [`crate::spec`]); empty between steps. Sized once for the longest draft.
    pub draft: Vec<u32>,
}

impl Sequence {
    pub fn num_output_tokens(&self) -> usize {
        self.tokens.len() - self.num_prompt_tokens
    }

    /// Tokens still to compute before the next one can be sampled.
    pub fn num_pending(&self) -> usize {
        self.tokens.len() - self.num_computed_tokens
    }

    pub fn is_decoding(&self) -> bool {
        self.num_pending() == 1 && self.num_computed_tokens > 0
    }

    /// Whether some prompt log-probabilities are still to be computed. Such a sequence
    /// skips the prefix cache (cached positions would have no logits) and its prefill
    /// chunks are bounded by the step's prompt-logits rows.
    pub fn wants_prompt_logprobs(&self) -> bool {
        self.prompt_logprobs.is_some() && self.prompt_logprob_next < self.num_prompt_tokens
    }

    pub(crate) fn order_key(&self) -> (i32, u64) {
        (self.priority, self.arrival)
    }
}
