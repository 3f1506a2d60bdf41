//! q8_1 (`d: f16, s: f16, qs: [i8; 32]`, s = d·Σq), the activation type of q4_1:
//! reference kernels.

use crate::quant::block::{check_act, f16_at, f32_to_f16};
use crate::types::ActType;

pub(crate) const BLOCK: usize = 36;

/// Quantizes f32 activations to q8_1 as llama.cpp does at run time on x86 (see
/// [`crate::quant::q8_0::scalar::quantize_row_q8_0`]), plus `s = d·Σq`.
pub fn quantize_row_q8_1(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_1, x, out);
    for (xb, yb) in x.chunks_exact(32).zip(out.chunks_exact_mut(BLOCK)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in yb[4..].iter_mut().zip(xb) {
            let qi = (v * id).round_ties_even() as i8;
            sum += i32::from(qi);
            *q = qi as u8;
        }
        yb[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        yb[2..4].copy_from_slice(&f32_to_f16(sum as f32 * d).to_le_bytes());
    }
}

/// Expands a q8_1 activation row to f32 (`s` is redundant and ignored).
pub fn dequantize_act_q8_1(a: &[u8], out: &mut [f32]) {
    check_act(ActType::Q8_1, out, a);
    for (x, y) in a.chunks_exact(BLOCK).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(x, 0);
        for (o, &q) in y.iter_mut().zip(&x[4..]) {
            *o = f32::from(q as i8) * d;
        }
    }
}
