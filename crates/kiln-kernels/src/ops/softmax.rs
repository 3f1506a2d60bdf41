//! Numerically stable softmax.

/// Softmax over `x` in place: `exp(x − max) / Σ`, the sum accumulated in f64 (ggml).
/// `-inf` entries (masked positions) become 0; an empty slice is left alone.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        // Everything masked (or empty): no distribution to form; return zeros.
        x.fill(0.0);
        return;
    }
    for v in x.iter_mut() {
        *v -= max;
    }
    // Sixteen (or eight) at a time, each bit for bit `f32::exp` (see `exp.rs`).
    super::exp_inplace(x);
    let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_to_one_and_ignores_masked() {
        let mut x = [1.0f32, 2.0, f32::NEG_INFINITY, 3.0];
        softmax_inplace(&mut x);
        assert_eq!(x[2], 0.0);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] > x[1] && x[1] > x[0]);
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        assert!((x[0] - e[0] / (e[0] + e[1] + e[2])).abs() < 1e-6);
    }

    #[test]
    fn large_inputs_do_not_overflow() {
        let mut x = [1000.0f32, 1000.0];
        softmax_inplace(&mut x);
        assert_eq!(x, [0.5, 0.5]);
    }

    #[test]
    fn fully_masked_row_is_zero() {
        let mut x = [f32::NEG_INFINITY; 3];
        softmax_inplace(&mut x);
        assert_eq!(x, [0.0; 3]);
    }
}
