//! Activation functions and the gated feed-forward combinations built on them.

use std::sync::OnceLock;

use half::f16;

use super::check_len;
use super::exp::exp_inplace;

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
/// The exact formula, in f32; see [`gelu_tanh_f16`] for the precision llama.cpp uses.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// GELU at f16 precision, as llama.cpp's CPU backend computes it: for |x| < 10 the input
/// is rounded to f16 and the result read from a table of f16 values of [`gelu_tanh`];
/// beyond that GELU is x or 0. Kiln matches it because its greedy tokens are checked
/// against llama.cpp's, and f16-level differences visibly move small models' logits.
#[inline]
pub fn gelu_tanh_f16(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let table = GELU_F16.get_or_init(|| {
            (0..=u16::MAX)
                .map(|bits| f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32())).to_bits())
                .collect()
        });
        f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32()
    }
}

/// [`gelu_tanh`] of every f16 value, built once on first use (128 KiB).
static GELU_F16: OnceLock<Box<[u16]>> = OnceLock::new();

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
    out.copy_from_slice(gate);
    swiglu_inplace(out, up);
}

/// [`swiglu`] writing into `gate`; bit-identical to [`silu`] per element, with the
/// exponentials taken sixteen at a time ([`exp_inplace`]).
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    check_len("swiglu_inplace", "up", gate.len(), up.len());
    const CHUNK: usize = 64;
    let mut e = [0f32; CHUNK];
    for (g, u) in gate.chunks_mut(CHUNK).zip(up.chunks(CHUNK)) {
        let e = &mut e[..g.len()];
        for (e, &g) in e.iter_mut().zip(g.iter()) {
            *e = -g;
        }
        exp_inplace(e);
        for ((g, &e), &u) in g.iter_mut().zip(e.iter()).zip(u) {
            *g = *g / (1.0 + e) * u;
        }
    }
}

/// GeGLU with tanh GELU at llama.cpp's precision: `out[i] = gelu_tanh_f16(gate[i]) · up[i]`.
pub fn geglu_tanh(gate: &[f32], up: &[f32], out: &mut [f32]) {
    check_len("geglu_tanh", "up", gate.len(), up.len());
    check_len("geglu_tanh", "out", gate.len(), out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = gelu_tanh_f16(g) * u;
    }
}

/// [`geglu_tanh`] writing into `gate`.
pub fn geglu_tanh_inplace(gate: &mut [f32], up: &[f32]) {
    check_len("geglu_tanh_inplace", "up", gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh_f16(*g) * u;
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
        // The chunked form equals `silu` per element, bit for bit, past one chunk.
        let wide_gate: Vec<f32> = (0..150).map(|i| (i as f32 - 75.0) * 0.37).collect();
        let wide_up: Vec<f32> = (0..150).map(|i| 1.0 - i as f32 * 0.01).collect();
        let mut g = wide_gate.clone();
        swiglu_inplace(&mut g, &wide_up);
        for ((&got, &x), &u) in g.iter().zip(&wide_gate).zip(&wide_up) {
            assert_eq!(got.to_bits(), (silu(x) * u).to_bits());
        }
        geglu_tanh(&gate, &up, &mut out);
        let mut g = gate;
        geglu_tanh_inplace(&mut g, &up);
        assert_eq!(g, out);
        assert_eq!(out[0], gelu_tanh_f16(-1.5) * 2.0);
    }

    #[test]
    fn f16_gelu_is_the_f16_rounded_formula() {
        for x in [
            -12.0f32, -10.0, -3.3, -0.001, 0.0, 0.1234, 1.0, 2.5, 9.99, 10.0, 31.0,
        ] {
            let want = if x <= -10.0 {
                0.0
            } else if x >= 10.0 {
                x
            } else {
                let r = f16::from_f32(x).to_f32();
                f16::from_f32(gelu_tanh(r)).to_f32()
            };
            assert_eq!(gelu_tanh_f16(x), want, "x = {x}");
            assert!((gelu_tanh_f16(x) - gelu_tanh(x)).abs() <= 2e-3 * x.abs().max(1.0));
        }
    }
}
