//! The scoring math of perplexity: one token's negative log-likelihood from a row of
//! logits, and the running estimate over every scored token.

/// `-log softmax(logits)[target]`, computed as llama.cpp's perplexity tool does so the
/// numbers compare: the maximum is subtracted in f32, each `exp` is taken in f32 and
/// their sum is kept in f64; the result is `ln(sum) - (logits[target] - max)`.
///
/// `logits` must be non-empty and `target` within it (the caller checks both).
pub fn nll(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    sum.ln() - f64::from(logits[target] - max)
}

/// Sums of the negative log-likelihoods of the tokens scored so far (and of their
/// squares), from which perplexity and its uncertainty follow.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimate {
    /// Σ nll.
    pub sum: f64,
    /// Σ nll².
    pub sum_sq: f64,
    /// Tokens scored.
    pub count: usize,
}

impl Estimate {
    /// Adds one scored token.
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum_sq += nll * nll;
        self.count += 1;
    }

    /// Mean negative log-likelihood (NaN before any token).
    pub fn mean_nll(&self) -> f64 {
        self.sum / self.count as f64
    }

    /// Perplexity so far: `exp(mean nll)`.
    pub fn ppl(&self) -> f64 {
        self.mean_nll().exp()
    }

    /// The standard error of the perplexity, `ppl · sqrt(var(nll) / (n - 1))` with the
    /// population variance of the nll (llama.cpp's formula); `None` with fewer than two
    /// tokens or no spread, where llama.cpp reports no estimate either.
    pub fn uncertainty(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum_sq / n - mean * mean;
        (var > 0.0).then(|| (var / (n - 1.0)).sqrt() * self.ppl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        // The logits are f32: their own rounding is ~1e-7 relative.
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn nll_is_minus_log_softmax() {
        // softmax([0, ln 2, ln 3, ln 4]) = [1, 2, 3, 4] / 10.
        let logits = [0.0, 2f32.ln(), 3f32.ln(), 4f32.ln()];
        for (t, p) in [0.1, 0.2, 0.3, 0.4].into_iter().enumerate() {
            assert!(close(nll(&logits, t), -f64::ln(p)), "target {t}");
        }
        // Uniform over 8: ln 8 whatever the offset (shift invariance).
        assert!(close(nll(&[5.0; 8], 3), 8f64.ln()));
        assert!(close(nll(&[-1000.0; 8], 7), 8f64.ln()));
    }

    #[test]
    fn nll_survives_large_logits() {
        // Naive exp(1000) overflows; subtracting the maximum keeps it finite.
        let logits = [1000.0, 999.0, -1000.0];
        let want = (1.0 + (-1f64).exp()).ln();
        assert!(close(nll(&logits, 0), want));
        assert!(close(nll(&logits, 1), want + 1.0));
        assert!(nll(&logits, 2) > 1999.0 && nll(&logits, 2).is_finite());
    }

    #[test]
    fn estimate_follows_llama_cpp() {
        // nll of 1, 2, 3: mean 2, population variance 2/3.
        let mut e = Estimate::default();
        assert_eq!(e.uncertainty(), None);
        e.add(1.0);
        assert!(close(e.ppl(), 1f64.exp()));
        assert_eq!(e.uncertainty(), None);
        e.add(2.0);
        e.add(3.0);
        assert_eq!(e.count, 3);
        assert!(close(e.ppl(), 2f64.exp()));
        let want = (2.0 / 3.0 / 2.0f64).sqrt() * 2f64.exp();
        assert!(close(e.uncertainty().unwrap_or(f64::NAN), want));
        // Every token equally likely: no spread, no estimate.
        let mut flat = Estimate::default();
        (0..4).for_each(|_| flat.add(0.5));
        assert_eq!(flat.uncertainty(), None);
    }

    #[test]
    fn estimate_from_hand_made_logits() {
        // Two rows over a vocabulary of 3; the targets have probabilities 1/2 and 1/4.
        let rows: [([f32; 3], usize); 2] = [
            ([2f32.ln(), 1f32.ln(), 1f32.ln()], 0),
            ([2f32.ln(), 1f32.ln(), 1f32.ln()], 1),
        ];
        let mut e = Estimate::default();
        for (logits, target) in &rows {
            e.add(nll(logits, *target));
        }
        // PPL = exp(mean(ln 2, ln 4)) = sqrt(8).
        assert!(close(e.ppl(), 8f64.sqrt()));
        // var = (ln 2)² / 4 over two tokens: uncertainty = ppl · (ln 2 / 2).
        let want = 8f64.sqrt() * 2f64.ln() / 2.0;
        assert!(close(e.uncertainty().unwrap_or(f64::NAN), want));
    }
}
