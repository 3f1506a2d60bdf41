//! Speculative decoding without a draft model: a decoding sequence proposes tokens it has
//! seen follow its own recent tokens ([`index`]), and the step verifies them.
//!
//! A sequence with a draft of `k` tokens runs `k + 1` rows in the step, like a small
//! prefill chunk on the same kernels: its last token and the draft. Every row gives
//! logits; the sampler then goes row by row exactly as it would one step at a time, and
//! stops at the first row whose sampled token differs from the draft token fed after it.
//! The sampled tokens up to and including that one are emitted; the K/V of the rejected
//! draft rows is dropped by moving the sequence's computed length back (the blocks past
//! it are freed, and a block is only hashed into the prefix cache once its tokens are
//! final).
//!
//! Why this is exact. Each emitted token is what the sampler draws from the target
//! distribution at its position, after the same penalties, grammar mask and random draw
//! it would have had without speculation: a draft only decides how many positions are
//! computed in one pass. So greedy output is byte-identical, seeded output reproduces,
//! and a grammar never sees a token it forbids. For a deterministic draft token `d`,
//! "draw `x ~ p`, accept if `x == d`" accepts with probability `p(d)` and, on rejection,
//! emits `x` from `p` with `d` removed and renormalised: the standard speculative
//! sampling rule, with the draw shared with the non-speculative path.
//!
//! Drafts come from the sequence's own tokens first, else from the recent outputs of
//! other requests with the same prefix-cache key ([`recent`]).
//! [`policy`] decides how long each draft is, from measured step times and acceptance.

pub mod index;
pub mod policy;
pub mod recent;

pub use index::{Match, NgramIndex};
pub use policy::{
    allot, bucket, Candidate, GlobalAcceptance, SeqAcceptance, StepCosts, BUCKETS, MAX_DRAFT,
};
pub use recent::{key_tag, RecentOutputs};

/// Whether the engine speculates (`kiln serve --speculative`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecMode {
    /// Draft while the policy expects it to pay.
    #[default]
    Auto,
    Off,
}

/// One sequence's speculation state (None in [`crate::core`] when it opted out).
pub struct SeqSpec {
    /// Built the first time the sequence may draft.
    pub index: Option<NgramIndex>,
    pub acceptance: SeqAcceptance,
    /// The acceptance group of this step's draft.
    pub bucket: usize,
    /// Its prefix-cache key's tag: it drafts only from recent outputs with the same.
    pub tag: u64,
}

impl SeqSpec {
    pub fn new(prior: [f32; BUCKETS], tag: u64) -> Self {
        Self {
            index: None,
            acceptance: SeqAcceptance::new(prior),
            bucket: 0,
            tag,
        }
    }
}

/// Draft tokens a sequence verified and how many were accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftCounts {
    pub drafted: u64,
    pub accepted: u64,
}
