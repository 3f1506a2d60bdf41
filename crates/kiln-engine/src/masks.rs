//! Token masks of constrained sequences, computed beside the forward pass.
//!
//! A sequence's next mask depends only on the tokens its constraint has accepted, which
//! are all known when a step starts; so the step computes the masks of the sequences it
//! will sample on a second thread while the model runs, and the sampler only applies
//! them. A step without constrained sequences starts no thread.

use std::time::{Duration, Instant};

use crate::constraint::{mask_words, Constraint, ConstraintError};

/// One sequence's constraint and its mask buffer (sized once, at admission).
pub(crate) struct SeqConstraint {
    constraint: Box<dyn Constraint>,
    mask: Vec<u32>,
    /// The step samples this sequence: compute its mask beside the forward pass.
    due: bool,
    /// The mask for the next sample is in `mask` (or the constraint failed).
    filled: Option<Result<(), ConstraintError>>,
}

impl SeqConstraint {
    pub(crate) fn new(constraint: Box<dyn Constraint>, vocab: usize) -> Self {
        Self {
            constraint,
            mask: vec![0; mask_words(vocab)],
            due: false,
            filled: None,
        }
    }

    pub(crate) fn mark_due(&mut self) {
        self.due = true;
    }

    fn fill_due(&mut self) {
        if std::mem::take(&mut self.due) && self.filled.is_none() {
            self.filled = Some(self.constraint.fill_mask(&mut self.mask));
        }
    }

    /// The mask for the next sample (computed now if the step didn't), or the
    /// constraint's error if it can't go on.
    pub(crate) fn mask(&mut self) -> Result<&[u32], ConstraintError> {
        let filled = match self.filled.take() {
            Some(f) => f,
            None => self.constraint.fill_mask(&mut self.mask),
        };
        self.filled = Some(filled.clone());
        filled.map(|()| self.mask.as_slice())
    }

    /// Advances past the sampled `token`; the next sample needs a new mask.
    pub(crate) fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.filled = None;
        self.constraint.accept(token)
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.constraint.is_finished()
    }
}

/// Computes every due mask; returns the time it took.
pub(crate) fn fill_due<'a>(constraints: impl Iterator<Item = &'a mut SeqConstraint>) -> Duration {
    let t0 = Instant::now();
    for c in constraints {
        c.fill_due();
    }
    t0.elapsed()
}
