//! The engine's [`Constraint`] over an llguidance `Matcher`.

use std::sync::Arc;

use kiln_engine::constraint::MaskWords;
use kiln_engine::{Constraint, ConstraintError, ConstraintFactory};
use llguidance::{Matcher, TokenParser};

use crate::error::{Error, Result};

/// A compiled grammar; each sequence starts from its own copy of the parser.
pub struct LlgFactory {
    parser: TokenParser,
    /// Tokens the tokenizer knows; mask bits from here on are always clear.
    known: usize,
    /// Every end-of-generation id (the trie's EOS tokens).
    eos: Arc<[u32]>,
}

impl LlgFactory {
    /// Checks that the grammar can start (some grammars fail only on their first step).
    pub(crate) fn new(parser: TokenParser, known: usize, eos: Arc<[u32]>) -> Result<Self> {
        let factory = Self { parser, known, eos };
        let mut probe = factory.matcher();
        if let Some(e) = probe.get_error() {
            return Err(Error::Grammar(llg_message(&e)));
        }
        probe
            .compute_mask()
            .map_err(|e| Error::Grammar(llg_message(&e.to_string())))?;
        Ok(factory)
    }

    fn matcher(&self) -> Matcher {
        Matcher::new(Ok(self.parser.deep_clone()))
    }
}

impl std::fmt::Debug for LlgFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgFactory")
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

impl ConstraintFactory for LlgFactory {
    fn start(&self) -> std::result::Result<Box<dyn Constraint>, ConstraintError> {
        let matcher = self.matcher();
        match matcher.get_error() {
            Some(e) => Err(ConstraintError(llg_message(&e))),
            None => Ok(Box::new(LlgConstraint {
                matcher,
                known: self.known,
                eos: self.eos.clone(),
                eos_after_stop: 0,
            })),
        }
    }
}

/// One sequence's position in its grammar.
pub struct LlgConstraint {
    matcher: Matcher,
    known: usize,
    eos: Arc<[u32]>,
    /// EOS tokens accepted after the grammar stopped (llguidance takes none then).
    eos_after_stop: usize,
}

impl std::fmt::Debug for LlgConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgConstraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Constraint for LlgConstraint {
    fn fill_mask(&mut self, mask: &mut MaskWords) -> std::result::Result<(), ConstraintError> {
        // The trie's EOS set is every end-of-generation id, so where the grammar may end
        // they are all allowed; a stopped grammar (complete, nothing may follow) allows
        // only them.
        let vob = self.matcher.compute_mask_or_eos().map_err(err)?;
        let words = vob.as_slice();
        let n = words.len().min(mask.len());
        mask[..n].copy_from_slice(&words[..n]);
        mask[n..].fill(0);
        clear_from(mask, self.known);
        Ok(())
    }

    fn accept(&mut self, token: u32) -> std::result::Result<(), ConstraintError> {
        // A stopped grammar's mask is the EOS set, but its parser takes nothing more:
        // count the EOS so a rollback can undo it.
        if self.matcher.is_stopped()
            && self.matcher.get_error().is_none()
            && self.eos.contains(&token)
        {
            self.eos_after_stop += 1;
            return Ok(());
        }
        // Any end-of-generation id is one of the trie's EOS tokens: it ends the grammar.
        self.matcher.consume_token(token).map_err(err)
    }

    fn rollback(&mut self, tokens: usize) -> std::result::Result<(), ConstraintError> {
        // Those EOS tokens were the last accepted.
        let counted = tokens.min(self.eos_after_stop);
        self.eos_after_stop -= counted;
        self.matcher.rollback(tokens - counted).map_err(err)
    }

    fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn forced_tokens(&mut self) -> Vec<u32> {
        self.matcher.compute_ff_tokens()
    }
}

/// Clears every bit from token `from` on (the words past the tokenizer's vocabulary, and
/// the trie's spare bit past its end).
fn clear_from(mask: &mut MaskWords, from: usize) {
    let word = from / 32;
    if let Some(w) = mask.get_mut(word) {
        *w &= (1u32 << (from % 32)) - 1;
    }
    if let Some(rest) = mask.get_mut(word + 1..) {
        rest.fill(0);
    }
}

fn err(e: impl std::fmt::Display) -> ConstraintError {
    ConstraintError(llg_message(&e.to_string()))
}

/// llguidance's message without the marker it appends to non-verbose errors.
pub(crate) fn llg_message(msg: &str) -> String {
    msg.trim_end()
        .trim_end_matches("<non-verbose/>")
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_from_keeps_only_lower_tokens() {
        let mut m = vec![u32::MAX; 4];
        clear_from(&mut m, 40);
        assert_eq!(m, vec![u32::MAX, 0xFF, 0, 0]);
        let mut m = vec![u32::MAX; 2];
        clear_from(&mut m, 64);
        assert_eq!(m, vec![u32::MAX; 2]);
        clear_from(&mut m, 32);
        assert_eq!(m, vec![u32::MAX, 0]);
    }

    #[test]
    fn llg_message_drops_the_non_verbose_marker() {
        assert_eq!(llg_message("bad token\n<non-verbose/>"), "bad token");
        assert_eq!(llg_message("plain"), "plain");
    }
}
