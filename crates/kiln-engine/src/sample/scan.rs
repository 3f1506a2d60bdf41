//! One pass over a logits row that both picks and checks it.
//!
//! A row holding a NaN or an infinity (broken weights) must end its sequence instead of
//! making a token. Checking that in a scan of its own costs a whole extra read of every
//! row: at Gemma's 262,144-token vocabulary the rows of a step no longer fit in cache, so
//! that scan was a memory pass worth 4–7% of throughput. Every way of sampling already
//! reads each logit once (the greedy argmax, the candidate fill of a draw, the max of
//! the log-sum-exp), so the check rides along in that read.
//!
//! The sampler's edits before the pick (logit bias, penalties) keep a non-finite value
//! non-finite, and forbidden tokens (banned, masked by a grammar) are skipped rather than
//! overwritten with −∞, so the pass sees every raw non-finite value.

/// A logits row held a NaN or an infinity: no token or logprob may be made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonFiniteRow;

/// Which tokens a pick may choose: those a grammar's `mask` allows (bit `t` of the words:
/// token `t`; tokens past it are forbidden) that are not `banned`.
#[derive(Clone, Copy)]
pub(crate) struct Allowed<'a> {
    pub mask: Option<&'a [u32]>,
    pub banned: &'a [u32],
}

impl Allowed<'_> {
    pub const ALL: Allowed<'static> = Allowed {
        mask: None,
        banned: &[],
    };

    fn is_all(&self) -> bool {
        self.mask.is_none() && self.banned.is_empty()
    }
}

/// Lanes the fast scan keeps: independent accumulators vectorise.
const LANES: usize = 16;

/// The first index of the largest allowed logit (llama.cpp's greedy tie rule), and
/// whether every logit of the row is finite. With nothing allowed the pick is token 0,
/// which a grammar then reads as "nothing more may follow".
pub(crate) fn argmax_checked(logits: &[f32], allowed: Allowed<'_>) -> Result<u32, NonFiniteRow> {
    let (best, finite) = if allowed.is_all() {
        argmax_all(logits)
    } else {
        argmax_some(logits, allowed)
    };
    if finite {
        Ok(best as u32)
    } else {
        Err(NonFiniteRow)
    }
}

/// Every token allowed: per chunk, lane-wise maxima and `x·0` (0 for a finite `x`, NaN
/// otherwise), then the chunk's first maximum only when it beats the best so far.
fn argmax_all(logits: &[f32]) -> (usize, bool) {
    const CHUNK: usize = 256;
    let mut best = (0usize, f32::NEG_INFINITY);
    let mut poison = [0f32; LANES];
    for (c, chunk) in logits.chunks(CHUNK).enumerate() {
        let top = max_and_poison(chunk, &mut poison);
        if top > best.1 {
            // The chunk's first occurrence of its maximum.
            if let Some(i) = chunk.iter().position(|&x| x == top) {
                best = (c * CHUNK + i, top);
            }
        }
    }
    (best.0, poison.iter().all(|p| p.is_finite()))
}

/// A grammar mask or banned tokens: per element, checking every logit and choosing
/// among the allowed ones (the banned list, a few tokens, is read only on a new best).
fn argmax_some(logits: &[f32], allowed: Allowed<'_>) -> (usize, bool) {
    let mut best = (0usize, f32::NEG_INFINITY);
    let mut finite = true;
    for (w, chunk) in logits.chunks(32).enumerate() {
        let word = match allowed.mask {
            None => u32::MAX,
            Some(m) => m.get(w).copied().unwrap_or(0),
        };
        for (b, &x) in chunk.iter().enumerate() {
            finite &= x.is_finite();
            if word & (1 << b) != 0 && x > best.1 {
                let i = w * 32 + b;
                if !allowed.banned.contains(&(i as u32)) {
                    best = (i, x);
                }
            }
        }
    }
    (best.0, finite)
}

/// The largest of `xs` (NaNs ignored), adding each `x·0` into `poison` (0 for a
/// finite `x`, NaN otherwise) in independent lanes, which vectorise.
fn max_and_poison(xs: &[f32], poison: &mut [f32; LANES]) -> f32 {
    let mut hi = [f32::NEG_INFINITY; LANES];
    let lanes = xs.chunks_exact(LANES);
    let tail = lanes.remainder();
    for v in lanes {
        for l in 0..LANES {
            hi[l] = if v[l] > hi[l] { v[l] } else { hi[l] };
            poison[l] += v[l] * 0.0;
        }
    }
    let mut top = hi.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &x in tail {
        top = if x > top { x } else { top };
        poison[0] += x * 0.0;
    }
    top
}

/// The row's maximum, or [`NonFiniteRow`] if any logit is not finite.
pub(crate) fn max_checked(logits: &[f32]) -> Result<f32, NonFiniteRow> {
    let mut poison = [0f32; LANES];
    let top = max_and_poison(logits, &mut poison);
    if poison.iter().all(|p| p.is_finite()) {
        Ok(top)
    } else {
        Err(NonFiniteRow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Allowed<'_> {
        fn allows(&self, token: usize) -> bool {
            let by_mask = self.mask.is_none_or(|m| {
                m.get(token / 32)
                    .is_some_and(|w| w & (1 << (token % 32)) != 0)
            });
            by_mask && !self.banned.contains(&(token as u32))
        }
    }

    /// The plain definition: first index of the largest allowed value, finiteness of all.
    fn reference(logits: &[f32], allowed: Allowed<'_>) -> Result<u32, NonFiniteRow> {
        if logits.iter().any(|x| !x.is_finite()) {
            return Err(NonFiniteRow);
        }
        let mut best = (0, f32::NEG_INFINITY);
        for (i, &x) in logits.iter().enumerate() {
            if allowed.allows(i) && x > best.1 {
                best = (i, x);
            }
        }
        Ok(best.0 as u32)
    }

    proptest::proptest! {
        #[test]
        fn the_fused_pick_matches_the_plain_definition(
            row in proptest::collection::vec(-4i8..4, 0..1200),
            bad_at in proptest::option::of(0usize..1200),
            bad in 0usize..3,
            mask_seed in proptest::option::of(proptest::collection::vec(proptest::num::u32::ANY, 0..40)),
            banned in proptest::collection::vec(0u32..1200, 0..3),
        ) {
            // Few distinct values, so ties are common.
            let mut logits: Vec<f32> = row.iter().map(|&v| v as f32 * 0.5).collect();
            if let Some(i) = bad_at.filter(|&i| i < logits.len()) {
                logits[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][bad];
            }
            for allowed in [
                Allowed::ALL,
                Allowed { mask: mask_seed.as_deref(), banned: &banned },
                Allowed { mask: None, banned: &banned },
            ] {
                proptest::prop_assert_eq!(
                    argmax_checked(&logits, allowed),
                    reference(&logits, allowed)
                );
            }
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            match max_checked(&logits) {
                Ok(m) => proptest::prop_assert_eq!(m, max),
                Err(NonFiniteRow) => proptest::prop_assert!(logits.iter().any(|x| !x.is_finite())),
            }
        }
    }

    #[test]
    fn one_bad_logit_makes_the_row_non_finite() {
        let mut row = vec![1.5f32; 1000];
        assert_eq!(argmax_checked(&row, Allowed::ALL), Ok(0));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            row[617] = bad;
            assert_eq!(argmax_checked(&row, Allowed::ALL), Err(NonFiniteRow));
            assert_eq!(max_checked(&row), Err(NonFiniteRow));
        }
        assert_eq!(argmax_checked(&[f32::MAX, f32::MIN], Allowed::ALL), Ok(0));
    }
}
