//! What callers submit to the engine and what comes back.

use std::sync::Arc;
use std::time::Instant;

use kiln_model::LoraAdapter;

use crate::constraint::ConstraintFactory;
use crate::sample::SamplingParams;
use crate::spec::DraftCounts;

/// When a sequence stops, besides `max_tokens`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StopConditions {
    /// Most tokens to generate (already bounded by the context by the caller).
    pub max_tokens: usize,
    /// EOS and stop tokens are suppressed until this many tokens are out.
    pub min_tokens: usize,
    /// Keep going past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// Extra token ids that end the sequence (reported as `stop`).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end the sequence, matched on the detokenized text and never emitted.
    pub stop_strings: Vec<String>,
}

/// A generation request (already tokenized and validated).
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    pub stop: StopConditions,
    /// Independent completions of the same prompt; they share its KV through the prefix
    /// cache. Completion `i` uses seed `seed + i` when a seed is given.
    pub n: usize,
    /// Lower runs first; equal priorities are served in arrival order.
    pub priority: i32,
    /// Extra prefix-cache key (a cache salt): same tokens, different KV. The adapter's
    /// identity is added by the engine.
    pub cache_key: Vec<u8>,
    /// The LoRA adapter to run with (loaded for this engine's model).
    pub adapter: Option<Arc<LoraAdapter>>,
    /// Restricts which tokens each sequence may produce (a grammar), if set.
    pub constraint: Option<Arc<dyn ConstraintFactory>>,
    /// Whether the engine may verify drafts for this request (`"speculative": false`
    /// opts out; the output is the same either way, see [`crate::spec`]).
    pub speculative: bool,
}

impl GenerateRequest {
    /// A greedy request with defaults for everything else.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            sampling: SamplingParams::greedy(),
            stop: StopConditions {
                max_tokens,
                ..StopConditions::default()
            },
            n: 1,
            priority: 0,
            cache_key: Vec::new(),
            adapter: None,
            constraint: None,
            speculative: true,
        }
    }
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-sequence token, a stop token or a stop string.
    Stop,
    /// `max_tokens` or the context length.
    Length,
    /// Cancelled by the caller (or the client went away).
    Abort,
    /// The model's logits for the sequence held a NaN or an infinity (corrupt weights):
    /// nothing was sampled from them.
    NonFinite,
}

impl FinishReason {
    /// The OpenAI spelling (`abort` is vLLM's).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::NonFinite => "error",
        }
    }
}

/// Timestamps of one sequence, for latency metrics.
#[derive(Debug, Clone, Copy)]
pub struct SeqTimings {
    pub arrived: Instant,
    /// First scheduled (end of queueing).
    pub scheduled: Option<Instant>,
    pub first_token: Option<Instant>,
    pub finished: Instant,
}

/// A token's log-probability and the most likely alternatives (raw model distribution).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Raw events from the engine thread for one request.
#[derive(Debug, Clone)]
pub enum EngineEvent {
    /// The sequence's prompt was admitted; `cached_tokens` came from the prefix cache.
    Scheduled { index: usize, cached_tokens: usize },
    /// The log-probability of prompt token `position` (from 1), in position order and
    /// before completion `index`'s first token; only the first completion reports them.
    PromptLogprob {
        index: usize,
        position: usize,
        token: u32,
        logprobs: TokenLogprobs,
    },
    /// A new token of completion `index`.
    Token {
        index: usize,
        token: u32,
        logprobs: Option<TokenLogprobs>,
    },
    /// Completion `index` ended.
    Finished {
        index: usize,
        reason: FinishReason,
        timings: SeqTimings,
        /// Draft tokens this completion verified, and how many were accepted.
        drafts: DraftCounts,
    },
}
