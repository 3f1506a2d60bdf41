//! f16 weights with f32 activations: reference kernels (weights widened on the fly).

use crate::quant::block::{check_dequant, check_dot, f16_at, f32_at};
use crate::types::WeightType;

const LANES: usize = 8;

/// `Σ w[i]·a[i]` for an f16 weight row and an f32 activation row.
pub fn vec_dot_f16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::F16, n, w, a);
    let mut acc = [0f32; LANES];
    let (wc, ac) = (w.chunks_exact(2 * LANES), a.chunks_exact(4 * LANES));
    let (wt, at) = (wc.remainder(), ac.remainder());
    for (wb, ab) in wc.zip(ac) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += f16_at(wb, 2 * l) * f32_at(ab, 4 * l);
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for i in 0..wt.len() / 2 {
        sum += f16_at(wt, 2 * i) * f32_at(at, 4 * i);
    }
    sum
}

/// Widens an f16 weight row to f32 (exact).
pub fn dequantize_row_f16(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::F16, w, out);
    for (o, c) in out.iter_mut().zip(w.chunks_exact(2)) {
        *o = f16_at(c, 0);
    }
}
