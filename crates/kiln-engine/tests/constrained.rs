//! Constrained sequences on the real default model: every token obeys its mask, the
//! grammar ends the sequence, rollback and errors are honoured, and constrained output is
//! the same alone or in a batch, greedy or seeded.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use kiln_engine::constraint::{mask_words, MaskWords};
use kiln_engine::sample::SamplingParams;
use kiln_engine::{Constraint, ConstraintError, ConstraintFactory, FinishReason, GenerateRequest};

/// Allows only tokens `t` with `t % modulus == residue`, for `length` tokens; then it
/// is finished. Counts mask computations.
#[derive(Debug)]
struct Residue {
    modulus: u32,
    residue: u32,
    length: usize,
    vocab: usize,
    masks: Arc<AtomicUsize>,
}

struct ResidueState {
    spec: Residue,
    accepted: Vec<u32>,
}

impl ConstraintFactory for Residue {
    fn start(&self) -> Result<Box<dyn Constraint>, ConstraintError> {
        Ok(Box::new(ResidueState {
            spec: Residue {
                masks: self.masks.clone(),
                ..*self
            },
            accepted: Vec::new(),
        }))
    }
}

impl Constraint for ResidueState {
    fn fill_mask(&mut self, mask: &mut MaskWords) -> Result<(), ConstraintError> {
        self.spec.masks.fetch_add(1, Ordering::Relaxed);
        mask.fill(0);
        for t in (0..self.spec.vocab as u32).filter(|t| t % self.spec.modulus == self.spec.residue)
        {
            mask[t as usize / 32] |= 1 << (t % 32);
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if token % self.spec.modulus != self.spec.residue {
            return Err(ConstraintError(format!("token {token} is not allowed")));
        }
        self.accepted.push(token);
        Ok(())
    }

    fn rollback(&mut self, tokens: usize) -> Result<(), ConstraintError> {
        let keep = self
            .accepted
            .len()
            .checked_sub(tokens)
            .ok_or_else(|| ConstraintError("rolled back past the start".into()))?;
        self.accepted.truncate(keep);
        Ok(())
    }

    fn is_finished(&self) -> bool {
        self.accepted.len() >= self.spec.length
    }
}

/// SmolLM2's vocabulary.
const VOCAB: usize = 49_152;

fn residue(modulus: u32, residue: u32, length: usize, masks: &Arc<AtomicUsize>) -> Arc<Residue> {
    Arc::new(Residue {
        modulus,
        residue,
        length,
        vocab: VOCAB,
        masks: masks.clone(),
    })
}

fn constrained(i: usize, c: Arc<Residue>, sampling: SamplingParams) -> GenerateRequest {
    let mut req = GenerateRequest::greedy(prompt(i, 20 + i * 3), 40);
    req.sampling = sampling;
    req.constraint = Some(c);
    req
}

#[test]
fn every_token_obeys_the_mask_and_the_grammar_ends_the_sequence() {
    let masks = Arc::new(AtomicUsize::new(0));
    let mut core = core(256);
    assert_eq!(core.model().config().vocab_size, VOCAB);
    let mut rx = add(
        &mut core,
        1,
        constrained(0, residue(7, 3, 12, &masks), SamplingParams::greedy()),
    );
    run_to_completion(&mut core);
    let (toks, fin) = collect(&mut rx);
    assert_eq!(toks[0].len(), 12, "{toks:?}");
    assert!(toks[0].iter().all(|t| t % 7 == 3), "{toks:?}");
    assert_eq!(fin, vec![Some(FinishReason::Stop)]);
    assert_eq!(
        masks.load(Ordering::Relaxed),
        12,
        "one mask per sampled token"
    );
    assert_eq!(core.stats.snapshot().constrained_seqs, 1);
    assert!(core.stats.snapshot().mask_time > std::time::Duration::ZERO);
}

#[test]
fn constrained_output_is_the_same_alone_and_in_a_batch() {
    let masks = Arc::new(AtomicUsize::new(0));
    let seeded = SamplingParams {
        temperature: 0.9,
        seed: Some(42),
        ..SamplingParams::default()
    };
    let alone = {
        let mut core = core(512);
        let mut rx = add(
            &mut core,
            1,
            constrained(1, residue(5, 1, 30, &masks), seeded.clone()),
        );
        run_to_completion(&mut core);
        collect(&mut rx).0
    };
    let mut core = core(512);
    let mut rxs = Vec::new();
    for i in 0..6u64 {
        let req = if i == 3 {
            constrained(1, residue(5, 1, 30, &masks), seeded.clone())
        } else if i % 2 == 0 {
            constrained(
                i as usize + 2,
                residue(3, 0, 25, &masks),
                SamplingParams::greedy(),
            )
        } else {
            GenerateRequest::greedy(prompt(i as usize + 10, 33), 30)
        };
        rxs.push(add(&mut core, i, req));
    }
    run_to_completion(&mut core);
    let batched: Vec<_> = rxs.iter_mut().map(|rx| collect(rx).0).collect();
    assert_eq!(
        batched[3], alone,
        "seeded constrained output changed in a batch"
    );
    assert!(alone[0].iter().all(|t| t % 5 == 1));
    for i in [0, 2, 4] {
        assert!(batched[i][0].iter().all(|t| t % 3 == 0), "{:?}", batched[i]);
    }
}

#[test]
fn each_completion_gets_its_own_constraint() {
    let masks = Arc::new(AtomicUsize::new(0));
    let mut core = core(256);
    let mut req = constrained(
        2,
        residue(4, 2, 9, &masks),
        SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..SamplingParams::default()
        },
    );
    req.n = 3;
    let mut rx = add(&mut core, 1, req);
    run_to_completion(&mut core);
    let (toks, fin) = collect(&mut rx);
    assert_eq!(toks.len(), 3);
    for t in &toks {
        assert_eq!(
            t.len(),
            9,
            "each completion ends after its own 9 tokens: {toks:?}"
        );
        assert!(t.iter().all(|x| x % 4 == 2));
    }
    assert!(fin.iter().all(|f| *f == Some(FinishReason::Stop)));
}

#[test]
fn mask_words_cover_the_vocabulary() {
    assert_eq!(mask_words(0), 0);
    assert_eq!(mask_words(32), 1);
    assert_eq!(mask_words(33), 2);
    assert_eq!(mask_words(49_152), 1536);
}
