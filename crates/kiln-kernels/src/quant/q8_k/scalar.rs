//! q8_K (`d: f32, qs: [i8; 256], bsums: [i16; 16]`), the activation type of the k-quants:
//! reference kernels.

use crate::quant::block::{check_act, f32_at};
use crate::types::{ActType, QK_K};

pub(crate) const BLOCK: usize = 4 + QK_K + 32;
/// Byte offset of `qs` and of `bsums` within a block.
pub(crate) const QS: usize = 4;
pub(crate) const BSUMS: usize = 4 + QK_K;

/// Quantizes f32 activations to q8_K like ggml's `quantize_row_q8_K_ref`: the scale comes
/// from the signed value of largest magnitude (first one on ties), d = max/−127, quants
/// round half to even. An all-zero block gets d = 0 and zero quants and sums.
pub fn quantize_row_q8_k(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_K, x, out);
    for (xb, yb) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(BLOCK)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            yb.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in yb[QS..BSUMS].iter_mut().zip(xb) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8 as u8;
        }
        write_bsums(yb);
        yb[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// Fills `bsums` from the block's quants.
#[inline]
fn write_bsums(yb: &mut [u8]) {
    for g in 0..QK_K / 16 {
        let s: i16 = yb[QS + 16 * g..QS + 16 * g + 16]
            .iter()
            .map(|&q| i16::from(q as i8))
            .sum();
        yb[BSUMS + 2 * g..BSUMS + 2 * g + 2].copy_from_slice(&s.to_le_bytes());
    }
}

/// Expands a q8_K activation row to f32.
pub fn dequantize_act_q8_k(a: &[u8], out: &mut [f32]) {
    check_act(ActType::Q8_K, out, a);
    for (x, y) in a.chunks_exact(BLOCK).zip(out.chunks_exact_mut(QK_K)) {
        let d = f32_at(x, 0);
        for (o, &q) in y.iter_mut().zip(&x[QS..BSUMS]) {
            *o = f32::from(q as i8) * d;
        }
    }
}
