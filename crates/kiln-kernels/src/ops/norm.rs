//! RMS normalisation.

use super::check_len;

/// `out[i] = x[i] / sqrt(mean(x²) + eps) · weight[i]` (ggml `rms_norm` then `mul`).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    check_len("rms_norm", "weight", x.len(), weight.len());
    check_len("rms_norm", "out", x.len(), out.len());
    let scale = inv_rms(x, eps);
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// [`rms_norm`] writing over its input.
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    check_len("rms_norm_inplace", "weight", x.len(), weight.len());
    let scale = inv_rms(x, eps);
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = (*v * scale) * w;
    }
}

/// `1 / sqrt(mean(x²) + eps)`, with the sum of squares in f64 as ggml does.
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_to_unit_rms_then_scales() {
        let x = [3.0f32, -4.0];
        let mut out = [0.0; 2];
        rms_norm(&x, &[1.0, 2.0], 0.0, &mut out);
        let r = (12.5f32).sqrt();
        assert!((out[0] - 3.0 / r).abs() < 1e-6);
        assert!((out[1] + 8.0 / r).abs() < 1e-6);
        let mut y = x;
        rms_norm_inplace(&mut y, &[1.0, 2.0], 0.0);
        assert_eq!(y, out);
    }

    #[test]
    #[should_panic(expected = "rms_norm: weight has length 1, expected 2")]
    fn rejects_mismatched_weight() {
        rms_norm(&[1.0, 2.0], &[1.0], 1e-5, &mut [0.0; 2]);
    }
}
