//! f32 weights and f32 activations: reference kernels.

use crate::quant::block::{check_act, check_dequant, check_dot, f32_at};
use crate::types::{ActType, WeightType};

/// Lanes of independent partial sums: lets the compiler vectorize, and keeps the
/// summation order close to the SIMD kernels.
const LANES: usize = 8;

/// `Σ w[i]·a[i]` over f32 weight and activation rows.
pub fn vec_dot_f32_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::F32, n, w, a);
    let mut acc = [0f32; LANES];
    let (wc, ac) = (w.chunks_exact(4 * LANES), a.chunks_exact(4 * LANES));
    let (wt, at) = (wc.remainder(), ac.remainder());
    for (wb, ab) in wc.zip(ac) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += f32_at(wb, 4 * l) * f32_at(ab, 4 * l);
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for i in 0..wt.len() / 4 {
        sum += f32_at(wt, 4 * i) * f32_at(at, 4 * i);
    }
    sum
}

/// Copies an f32 weight row out of its little-endian bytes.
pub fn dequantize_row_f32(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::F32, w, out);
    bytes_to_f32(w, out);
}

/// Writes an f32 activation row as little-endian bytes.
pub fn quantize_row_f32(x: &[f32], out: &mut [u8]) {
    check_act(ActType::F32, x, out);
    for (b, v) in out.chunks_exact_mut(4).zip(x) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// Reads an f32 activation row back from its bytes.
pub fn dequantize_act_f32(a: &[u8], out: &mut [f32]) {
    check_act(ActType::F32, out, a);
    bytes_to_f32(a, out);
}

fn bytes_to_f32(b: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
        *o = f32_at(c, 0);
    }
}
