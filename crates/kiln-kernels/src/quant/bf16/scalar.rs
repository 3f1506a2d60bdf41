//! bf16 weights with f32 activations: reference kernels (weights widened on the fly).

use crate::quant::block::{check_dequant, check_dot, f32_at};
use crate::types::WeightType;

const LANES: usize = 8;

/// bf16 at `b[off..off + 2]` as f32: the bits are the top half of an f32 (exact).
#[inline(always)]
fn bf16_at(b: &[u8], off: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[off], b[off + 1]])) << 16)
}

/// `Σ w[i]·a[i]` for a bf16 weight row and an f32 activation row.
pub fn vec_dot_bf16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::BF16, n, w, a);
    let mut acc = [0f32; LANES];
    let (wc, ac) = (w.chunks_exact(2 * LANES), a.chunks_exact(4 * LANES));
    let (wt, at) = (wc.remainder(), ac.remainder());
    for (wb, ab) in wc.zip(ac) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += bf16_at(wb, 2 * l) * f32_at(ab, 4 * l);
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for i in 0..wt.len() / 2 {
        sum += bf16_at(wt, 2 * i) * f32_at(at, 4 * i);
    }
    sum
}

/// Widens a bf16 weight row to f32 (exact).
pub fn dequantize_row_bf16(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::BF16, w, out);
    for (o, c) in out.iter_mut().zip(w.chunks_exact(2)) {
        *o = bf16_at(c, 0);
    }
}
