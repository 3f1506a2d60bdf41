//! Activation functions and the gated feed-forward combinations built on them.

use super::check_len;

/// √(2/π), as ggml spells it.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// SiLU: `x / (1 + e^−x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation: `½x(1 + tanh(√(2/π)·x·(1 + 0.044715x²)))`.
///
/// ggml evaluates the same formula (its f32 path may round the input through an f16
/// lookup table; this computes it directly, which is slightly more accurate).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// [`silu`] over a slice.
pub fn silu_inplace(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = silu(*v));
}

/// [`gelu_tanh`] over a slice.
pub fn gelu_tanh_inplace(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_tanh(*v));
}

/// SwiGLU: `out[i] = silu(gate[i]) · up[i]`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    check_len("swiglu", "up", gate.len(), up.len());
    check_len("swiglu", "out", gate.len(), out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// [`swiglu`] writing into `gate`.
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    check_len("swiglu_inplace", "up", gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// GeGLU with tanh GELU: `out[i] = gelu_tanh(gate[i]) · up[i]`.
pub fn geglu_tanh(gate: &[f32], up: &[f32], out: &mut [f32]) {
    check_len("geglu_tanh", "up", gate.len(), up.len());
    check_len("geglu_tanh", "out", gate.len(), out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = gelu_tanh(g) * u;
    }
}

/// [`geglu_tanh`] writing into `gate`.
pub fn geglu_tanh_inplace(gate: &mut [f32], up: &[f32]) {
    check_len("geglu_tanh_inplace", "up", gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((silu(-20.0)).abs() < 1e-7);
        assert_eq!(gelu_tanh(0.0), 0.0);
        // Reference values of the tanh approximation, computed in f64.
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-6);
        assert!((gelu_tanh(-1.0) + 0.158_808).abs() < 1e-6);
        assert_eq!(gelu_tanh(20.0), 20.0);
    }

    #[test]
    fn gated_forms_agree() {
        let gate = [-1.5f32, 0.0, 0.5, 2.0];
        let up = [2.0f32, 3.0, -1.0, 0.25];
        let mut out = [0.0; 4];
        swiglu(&gate, &up, &mut out);
        let mut g = gate;
        swiglu_inplace(&mut g, &up);
        assert_eq!(g, out);
        assert_eq!(out[3], silu(2.0) * 0.25);
        geglu_tanh(&gate, &up, &mut out);
        let mut g = gate;
        geglu_tanh_inplace(&mut g, &up);
        assert_eq!(g, out);
        assert_eq!(out[0], gelu_tanh(-1.5) * 2.0);
    }
}
