//! Rotary position embedding, computed like ggml's `rope` (no YaRN/frequency scaling).

use super::check_len;

/// Which elements of a head form a rotated pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: GGUF `llama`-family models (ggml `ROPE_TYPE_NORMAL`).
    Norm,
    /// Split halves `(i, i + n_rot/2)`: GPT-NeoX, Qwen2, Gemma (ggml `ROPE_TYPE_NEOX`).
    Neox,
}

/// Rotates the first `n_rot` dimensions of each of the `n_heads` heads of `x` (laid out
/// head after head, `head_dim` apart) by the angles of `position`; the remaining
/// dimensions are left unchanged.
///
/// Pair `i` rotates by `θ_i = position · freq_base^(−2i/n_rot)`. As in ggml, `θ` is built
/// in f32 by repeated multiplication with `freq_base^(−2/n_rot)`, and `cos`/`sin` are f32.
///
/// # Panics
/// If `x.len() != n_heads · head_dim`, or `n_rot` is odd or larger than `head_dim`
/// (shapes come from the model config, so this is an internal bug).
pub fn rope_inplace(
    x: &mut [f32],
    n_heads: usize,
    head_dim: usize,
    n_rot: usize,
    position: u32,
    freq_base: f32,
    style: RopeStyle,
) {
    check_len("rope_inplace", "x", n_heads * head_dim, x.len());
    assert!(
        n_rot.is_multiple_of(2) && n_rot <= head_dim,
        "rope_inplace: n_rot {n_rot} must be even and at most head_dim {head_dim}"
    );
    if n_rot == 0 {
        return;
    }
    let theta_scale = freq_base.powf(-2.0 / n_rot as f32);
    let half = n_rot / 2;
    let mut theta = position as f32;
    for i in 0..half {
        let (sin, cos) = (theta.sin(), theta.cos());
        let (i0, i1) = match style {
            RopeStyle::Norm => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + half),
        };
        for head in x.chunks_exact_mut(head_dim) {
            let (x0, x1) = (head[i0], head[i1]);
            head[i0] = x0 * cos - x1 * sin;
            head[i1] = x0 * sin + x1 * cos;
        }
        theta *= theta_scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity() {
        let orig: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            let mut x = orig.clone();
            rope_inplace(&mut x, 2, 8, 8, 0, 10_000.0, style);
            assert_eq!(x, orig);
        }
    }

    #[test]
    fn rotates_the_right_pairs_by_the_right_angles() {
        // One head of 8, rotating the first 4 dims; base 100 → θ_0 = p, θ_1 = p/10.
        let p = 3u32;
        let src = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let rot = |a: f32, b: f32, t: f32| (a * t.cos() - b * t.sin(), a * t.sin() + b * t.cos());

        let mut x = src;
        rope_inplace(&mut x, 1, 8, 4, p, 100.0, RopeStyle::Norm);
        let (a, b) = rot(1.0, 2.0, 3.0);
        let (c, d) = rot(3.0, 4.0, 0.3);
        let want = [a, b, c, d, 5.0, 6.0, 7.0, 8.0];
        for (g, w) in x.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{x:?} vs {want:?}");
        }

        let mut x = src;
        rope_inplace(&mut x, 1, 8, 4, p, 100.0, RopeStyle::Neox);
        let (a, c) = rot(1.0, 3.0, 3.0);
        let (b, d) = rot(2.0, 4.0, 0.3);
        let want = [a, b, c, d, 5.0, 6.0, 7.0, 8.0];
        for (g, w) in x.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{x:?} vs {want:?}");
        }
    }

    #[test]
    fn preserves_norm_per_pair() {
        let mut x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let before: f32 = x.iter().map(|v| v * v).sum();
        rope_inplace(&mut x, 2, 32, 32, 4095, 1_000_000.0, RopeStyle::Neox);
        let after: f32 = x.iter().map(|v| v * v).sum();
        assert!((before - after).abs() < 1e-4);
    }
}
