//! Logits → one token, in vLLM's order: logit bias, penalties, banned tokens, then greedy
//! argmax or temperature → top-k → top-p → min-p → a draw from the request's own stream.
//!
//! Buffers live in the [`Sampler`] and are reused, so sampling allocates nothing once
//! warm (except the alternatives list when a request asks for logprobs).

use rand::Rng;

use super::scan::{argmax_checked, max_checked, Allowed, NonFiniteRow};
use super::{SamplingParams, SeqSamplingState};
use crate::request::TokenLogprobs;

/// Candidates kept before falling back to a full sort for top-p: the mass of the top few
/// hundred tokens almost always reaches p.
const PARTIAL_SORT: usize = 256;

/// The chosen token and, if asked, log-probabilities from the raw model distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub token: u32,
    pub logprob: Option<f32>,
    pub top_logprobs: Vec<(u32, f32)>,
}

#[derive(Default)]
pub struct Sampler {
    /// (logit, token) candidates.
    cand: Vec<(f32, u32)>,
    /// The untouched logits, kept only for requests that want logprobs.
    raw: Vec<f32>,
}

/// The lowest log-probability reported, OpenAI's figure for an impossible token: JSON
/// has no `-inf`, and a 200 must carry numbers.
pub const MIN_LOGPROB: f32 = -9999.0;

/// `lp` floored at [`MIN_LOGPROB`] (a NaN becomes the floor too).
fn floored(lp: f32) -> f32 {
    lp.max(MIN_LOGPROB)
}

impl Sampler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Picks the next token from `logits` (modified in place). `banned` tokens (e.g. EOS
    /// before `min_tokens`) can't be picked. A row holding a NaN or an infinity makes no
    /// token: the pass that picks also checks (see [`scan`](super::scan)).
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        params: &SamplingParams,
        state: &mut SeqSamplingState,
        banned: &[u32],
    ) -> Result<Sampled, NonFiniteRow> {
        self.sample_masked(logits, params, state, banned, None)
    }

    /// [`sample`](Self::sample) among the tokens a constraint's `mask` allows (bit `t`
    /// of the words: token `t`). Logprobs still describe the raw model distribution.
    pub fn sample_masked(
        &mut self,
        logits: &mut [f32],
        params: &SamplingParams,
        state: &mut SeqSamplingState,
        banned: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Sampled, NonFiniteRow> {
        let (lse, top_logprobs) = match params.logprobs {
            Some(n) => self.raw_logprobs(logits, n)?,
            None => (f32::NAN, Vec::new()),
        };
        // Bias and penalties keep a NaN or an infinity what it was, so the pick's pass
        // still sees every raw non-finite value.
        for &(t, b) in &params.logit_bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if params.has_penalties() {
            apply_penalties(logits, params, state);
        }
        let allowed = Allowed { mask, banned };
        let token = if params.is_greedy() {
            argmax_checked(logits, allowed)?
        } else {
            self.draw(logits, params, state, allowed)?
        };
        Ok(Sampled {
            token,
            logprob: params
                .logprobs
                .map(|_| floored(self.raw[token as usize] - lse)),
            top_logprobs,
        })
    }

    /// The log-probability of `token` under `logits` and the `n` most likely tokens (for
    /// prompt log-probabilities: nothing is sampled).
    pub fn logprobs_of(
        &mut self,
        logits: &[f32],
        token: u32,
        n: usize,
    ) -> Result<TokenLogprobs, NonFiniteRow> {
        let (lse, top) = self.raw_logprobs(logits, n)?;
        let logit = logits
            .get(token as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        Ok(TokenLogprobs {
            logprob: floored(logit - lse),
            top,
        })
    }

    /// Saves the untouched logits and returns their log-sum-exp and the `n` most likely
    /// tokens with their log-probabilities; the max's pass checks the row.
    fn raw_logprobs(
        &mut self,
        logits: &[f32],
        n: usize,
    ) -> Result<(f32, Vec<(u32, f32)>), NonFiniteRow> {
        let max = max_checked(logits)?;
        self.raw.clear();
        self.raw.extend_from_slice(logits);
        let lse = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
        let mut top = Vec::with_capacity(n);
        if n > 0 {
            self.fill_candidates(logits);
            let k = n.min(self.cand.len());
            self.partial_sort_desc(k);
            top.extend(self.cand[..k].iter().map(|&(l, t)| (t, floored(l - lse))));
        }
        Ok((lse, top))
    }

    fn fill_candidates(&mut self, logits: &[f32]) {
        self.cand.clear();
        self.cand
            .extend(logits.iter().enumerate().map(|(i, &l)| (l, i as u32)));
    }

    /// Moves the `k` largest candidates to the front, sorted descending (ties by id).
    fn partial_sort_desc(&mut self, k: usize) {
        let cmp = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if k == 0 {
            return;
        }
        if k < self.cand.len() {
            self.cand.select_nth_unstable_by(k - 1, cmp);
        }
        self.cand[..k].sort_unstable_by(cmp);
    }

    fn draw(
        &mut self,
        logits: &[f32],
        p: &SamplingParams,
        state: &mut SeqSamplingState,
        allowed: Allowed<'_>,
    ) -> Result<u32, NonFiniteRow> {
        let inv_t = 1.0 / p.temperature;
        self.cand.clear();
        let mut finite = true;
        for (w, chunk) in logits.chunks(32).enumerate() {
            let word = match allowed.mask {
                None => u32::MAX,
                Some(m) => m.get(w).copied().unwrap_or(0),
            };
            for (b, &l) in chunk.iter().enumerate() {
                finite &= l.is_finite();
                if word & (1 << b) != 0 {
                    self.cand.push((l * inv_t, (w * 32 + b) as u32));
                }
            }
        }
        if !finite {
            return Err(NonFiniteRow);
        }
        if !allowed.banned.is_empty() {
            self.cand.retain(|c| !allowed.banned.contains(&c.1));
        }
        if self.cand.is_empty() {
            return argmax_checked(logits, allowed);
        }
        // Sorting descending is needed for top-k/top-p and makes the draw independent of
        // the vocabulary's order; sort only as much as the filters need.
        let mut keep = self.cand.len();
        if p.top_k > 0 {
            keep = keep.min(p.top_k);
        }
        let sorted = if p.top_p < 1.0 {
            let k = keep.min(PARTIAL_SORT);
            self.partial_sort_desc(k);
            if k < keep && mass_of_prefix(&self.cand, k) < p.top_p {
                self.partial_sort_desc(keep);
                keep
            } else {
                k
            }
        } else {
            self.partial_sort_desc(keep);
            keep
        };
        keep = keep.min(sorted);
        let max = self.cand[0].0;
        // Probabilities (unnormalised) of the kept prefix.
        let mut total = 0.0f64;
        let mut cut = keep;
        let norm: f64 = if p.top_p < 1.0 || p.min_p > 0.0 {
            self.cand[..keep]
                .iter()
                .map(|c| ((c.0 - max) as f64).exp())
                .sum()
        } else {
            1.0
        };
        for (i, c) in self.cand[..keep].iter().enumerate() {
            let w = ((c.0 - max) as f64).exp();
            if p.min_p > 0.0 && w < p.min_p as f64 && i > 0 {
                cut = i;
                break;
            }
            total += w;
            if p.top_p < 1.0 && total / norm >= p.top_p as f64 {
                cut = i + 1;
                break;
            }
        }
        let kept = &self.cand[..cut.max(1)];
        let mass: f64 = kept.iter().map(|c| ((c.0 - max) as f64).exp()).sum();
        let mut u = state.rng.random::<f64>() * mass;
        for c in kept {
            u -= ((c.0 - max) as f64).exp();
            if u <= 0.0 {
                return Ok(c.1);
            }
        }
        Ok(kept[kept.len() - 1].1)
    }
}

/// Softmax mass of the first `k` (sorted) candidates relative to all of them.
fn mass_of_prefix(cand: &[(f32, u32)], k: usize) -> f32 {
    let max = cand[0].0;
    let head: f64 = cand[..k].iter().map(|c| ((c.0 - max) as f64).exp()).sum();
    let all: f64 = head
        + cand[k..]
            .iter()
            .map(|c| ((c.0 - max) as f64).exp())
            .sum::<f64>();
    (head / all) as f32
}

fn apply_penalties(logits: &mut [f32], p: &SamplingParams, s: &SeqSamplingState) {
    let rep = p.repetition_penalty;
    let penalize = |l: &mut f32| {
        *l = if *l > 0.0 { *l / rep } else { *l * rep };
    };
    if rep != 1.0 {
        for &t in &s.prompt_tokens {
            if let Some(l) = logits.get_mut(t as usize) {
                penalize(l);
            }
        }
    }
    for (&t, &n) in &s.output_counts {
        let Some(l) = logits.get_mut(t as usize) else {
            continue;
        };
        if rep != 1.0 && s.prompt_tokens.binary_search(&t).is_err() {
            penalize(l);
        }
        *l -= p.presence_penalty + p.frequency_penalty * n as f32;
    }
}

/// Index of the largest logit (the first one on ties, as llama.cpp's greedy sampler),
/// or [`NonFiniteRow`] if the row holds a NaN or an infinity.
pub fn argmax(logits: &[f32]) -> Result<u32, NonFiniteRow> {
    argmax_checked(logits, Allowed::ALL)
}
