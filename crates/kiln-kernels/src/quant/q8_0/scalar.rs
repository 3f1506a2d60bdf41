//! q8_0 (`d: f16, qs: [i8; 32]`, x = d·q), both a weight and an activation type:
//! reference kernels.

use crate::quant::block::{check_act, check_dequant, check_dot, f16_at, f32_to_f16};
use crate::types::{ActType, WeightType};

pub(crate) const BLOCK: usize = 34;

/// Dot product of a q8_0 weight row with a q8_0 activation row.
pub fn vec_dot_q8_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q8_0, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(BLOCK)) {
        let sumi: i32 = x[2..]
            .iter()
            .zip(&y[2..])
            .map(|(&p, &q)| i32::from(p as i8) * i32::from(q as i8))
            .sum();
        sumf += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sumf
}

/// Expands a q8_0 weight row to f32.
pub fn dequantize_row_q8_0(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q8_0, w, out);
    expand(w, out);
}

/// Expands a q8_0 activation row to f32.
pub fn dequantize_act_q8_0(a: &[u8], out: &mut [f32]) {
    check_act(ActType::Q8_0, out, a);
    expand(a, out);
}

fn expand(b: &[u8], out: &mut [f32]) {
    for (x, y) in b.chunks_exact(BLOCK).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(x, 0);
        for (o, &q) in y.iter_mut().zip(&x[2..]) {
            *o = f32::from(q as i8) * d;
        }
    }
}

/// Quantizes f32 activations to q8_0 as llama.cpp does at run time on x86 (its SIMD
/// `quantize_row_q8_0`, not the `_ref` one): d = amax/127 (stored as f16),
/// q = round-half-to-even(x · 127/amax). Matching it matters: a quant that rounds the
/// other way moves a whole block's contribution, and small quantized models amplify that.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_0, x, out);
    for (xb, yb) in x.chunks_exact(32).zip(out.chunks_exact_mut(BLOCK)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        yb[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in yb[2..].iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8 as u8;
        }
    }
}
