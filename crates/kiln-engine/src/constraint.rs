//! Per-sequence constraints on the next token (grammars, JSON schemas, tool calls).
//!
//! The engine knows only this small interface; `kiln-constrain` implements it over
//! `llguidance`, so the grammar engine can change without touching the step loop. A
//! request carries a [`ConstraintFactory`]; each of its `n` sequences starts its own
//! [`Constraint`] at admission.
//!
//! The mask for a sequence's next token depends only on the tokens it has accepted, so
//! the engine computes it while the forward pass for the previous token runs (on another
//! thread), and applies it in the sampler before anything else.

use std::fmt::Debug;

/// A constraint failed (the grammar can't go on, or an internal error).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ConstraintError(pub String);

/// Bits over the vocabulary: bit `t % 32` of word `t / 32` is token `t`.
pub type MaskWords = [u32];

/// Words needed for a mask over `vocab` tokens.
pub fn mask_words(vocab: usize) -> usize {
    vocab.div_ceil(32)
}

/// Whether token `t` is set in `mask`.
pub fn mask_allows(mask: &MaskWords, t: u32) -> bool {
    mask.get(t as usize / 32)
        .is_some_and(|w| w & (1 << (t % 32)) != 0)
}

/// The state of one sequence's constraint.
pub trait Constraint: Send {
    /// Writes the tokens allowed next into `mask` (already sized by [`mask_words`] for
    /// the model's vocabulary; every word is overwritten). End-of-sequence tokens are
    /// allowed when the grammar may end here.
    fn fill_mask(&mut self, mask: &mut MaskWords) -> Result<(), ConstraintError>;
    /// Advances past `token`, which the last mask allowed.
    fn accept(&mut self, token: u32) -> Result<(), ConstraintError>;
    /// Undoes the last `tokens` accepted tokens.
    fn rollback(&mut self, tokens: usize) -> Result<(), ConstraintError>;
    /// Nothing more may be generated: the sequence ends (finish reason `stop`).
    fn is_finished(&self) -> bool;
    /// Tokens the grammar forces next, whatever the model would say (may be empty).
    /// The engine may append them without sampling.
    fn forced_tokens(&mut self) -> Vec<u32> {
        Vec::new()
    }
}

/// Starts a fresh [`Constraint`] for each sequence of a request.
pub trait ConstraintFactory: Send + Sync + Debug {
    fn start(&self) -> Result<Box<dyn Constraint>, ConstraintError>;
}
