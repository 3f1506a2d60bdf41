//! Row-wise f32 operations the encoder ops need beyond kiln-kernels' decoder set.
//!
//! Sums are accumulated in f64: these run once per row, not per weight, so the cost is
//! nothing and the results stay within an ulp or two of PyTorch's.

/// PyTorch `LayerNorm` over one row: `(x − mean) / sqrt(var + eps) · weight + bias`,
/// with the biased variance.
pub(crate) fn layer_norm(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let n = x.len().max(1) as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x
        .iter()
        .map(|&v| {
            let d = f64::from(v) - mean;
            d * d
        })
        .sum::<f64>()
        / n;
    let inv = 1.0 / (var + f64::from(eps)).sqrt();
    for ((v, &w), &b) in x.iter_mut().zip(weight).zip(bias) {
        *v = ((f64::from(*v) - mean) * inv) as f32 * w + b;
    }
}

/// PyTorch `F.rms_norm` without a weight: `x / sqrt(mean(x²) + eps)`.
pub(crate) fn rms_norm(x: &mut [f32], eps: f32) {
    let n = x.len().max(1) as f64;
    let mean_sq = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n;
    let inv = (1.0 / (mean_sq + f64::from(eps)).sqrt()) as f32;
    kiln_kernels::ops::scale_inplace(x, inv);
}

/// nanochat's rotation of one head at position `pos`: the two halves `(x1, x2)` become
/// `(x1·cos + x2·sin, −x1·sin + x2·cos)`, with `cos` and `sin` tables of `head.len()/2`
/// floats per position.
pub(crate) fn rotate_halves(head: &mut [f32], cos: &[f32], sin: &[f32], pos: usize) {
    let half = head.len() / 2;
    let cos = &cos[pos * half..(pos + 1) * half];
    let sin = &sin[pos * half..(pos + 1) * half];
    let (x1, x2) = head.split_at_mut(half);
    for j in 0..half {
        let (a, b) = (x1[j], x2[j]);
        x1[j] = a * cos[j] + b * sin[j];
        x2[j] = a * -sin[j] + b * cos[j];
    }
}

/// The error function, from the complementary one.
fn erf(x: f64) -> f64 {
    1.0 - erfc(x)
}

/// Complementary error function by its Chebyshev fit (Numerical Recipes' `erfcc`),
/// relative error below 1.2e-7 everywhere: below f32's resolution for GELU.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Exact (erf) GELU, PyTorch's default and BERT's `gelu`: `½x(1 + erf(x/√2))`, in place.
pub(crate) fn gelu_erf_inplace(x: &mut [f32]) {
    for v in x.iter_mut() {
        let xf = f64::from(*v);
        *v = (0.5 * xf * (1.0 + erf(xf * std::f64::consts::FRAC_1_SQRT_2))) as f32;
    }
}

/// `relu(x)²`, in place.
pub(crate) fn relu_squared_inplace(x: &mut [f32]) {
    for v in x.iter_mut() {
        let r = v.max(0.0);
        *v = r * r;
    }
}

/// `x / max(‖x‖₂, 1e-12)` (PyTorch `F.normalize`), in place.
pub(crate) fn l2_normalize(x: &mut [f32]) {
    let norm = x
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    let inv = (1.0 / norm.max(1e-12)) as f32;
    kiln_kernels::ops::scale_inplace(x, inv);
}

/// The mean of `rows` rows of width `dim`, accumulated in f64.
pub(crate) fn mean_rows(x: &[f32], dim: usize, out: &mut [f32]) {
    let mut acc = vec![0f64; dim];
    let mut n = 0usize;
    for row in x.chunks_exact(dim) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a += f64::from(v);
        }
        n += 1;
    }
    let inv = 1.0 / n.max(1) as f64;
    for (o, a) in out.iter_mut().zip(acc) {
        *o = (a * inv) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2), erf(-1.5) to 9 digits.
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_878),
            (1.0, 0.842_700_793),
            (2.0, 0.995_322_265),
            (-1.5, -0.966_105_146),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn gelu_of_known_points() {
        let mut x = [-3.0f32, -1.0, 0.0, 1.0, 3.0];
        gelu_erf_inplace(&mut x);
        let want: [f64; 5] = [-0.004_049_69, -0.158_655_25, 0.0, 0.841_344_75, 2.995_950_3];
        for (g, w) in x.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn norms_and_pooling() {
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        layer_norm(&mut x, &[1.0; 4], &[0.5; 4], 0.0);
        let mean: f32 = x.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        assert!((x[3] - 0.5 - 3.0 / 5f32.sqrt()).abs() < 1e-6);

        let mut r = [3.0f32, -4.0];
        rms_norm(&mut r, 0.0);
        assert!((r[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-6);

        let mut v = [3.0f32, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = [0.0f32; 3];
        l2_normalize(&mut zero);
        assert_eq!(zero, [0.0; 3]);

        let mut q = [-2.0f32, 0.5, 3.0];
        relu_squared_inplace(&mut q);
        assert_eq!(q, [0.0, 0.25, 9.0]);

        let mut m = [0f32; 2];
        mean_rows(&[1.0, 2.0, 3.0, 6.0], 2, &mut m);
        assert_eq!(m, [2.0, 4.0]);
    }
}
