//! q5_0 (`d: f16, qh: u32, qs: [u8; 16]`, x = d·(q − 16), bit j of `qh` is bit 4 of
//! element j): reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at};
use crate::types::WeightType;

pub(crate) const BLOCK: usize = 22;

/// The 32 signed 5-bit values of one block, in element order.
#[inline(always)]
fn unpack(x: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    let mut q = [0i32; 32];
    for (j, &b) in x[6..22].iter().enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        q[j] = (u32::from(b & 0x0f) | h0) as i32 - 16;
        q[j + 16] = (u32::from(b >> 4) | h1) as i32 - 16;
    }
    q
}

/// Dot product of a q5_0 weight row with a q8_0 activation row.
pub fn vec_dot_q5_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q5_0, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(34)) {
        let q = unpack(x);
        let sumi: i32 = q
            .iter()
            .zip(&y[2..34])
            .map(|(&q, &b)| q * i32::from(b as i8))
            .sum();
        sumf += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sumf
}

/// Expands a q5_0 row to f32.
pub fn dequantize_row_q5_0(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q5_0, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(x, 0);
        for (o, q) in y.iter_mut().zip(unpack(x)) {
            *o = q as f32 * d;
        }
    }
}
