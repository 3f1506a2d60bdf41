//! q4_0 (`d: f16, qs: [u8; 16]`, x = d·(q − 8)): reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at};
use crate::types::WeightType;

pub(crate) const BLOCK: usize = 18;

/// Dot product of a q4_0 weight row with a q8_0 activation row.
pub fn vec_dot_q4_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_0, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(34)) {
        let (qs, q8) = (&x[2..18], &y[2..34]);
        let mut sumi = 0i32;
        for j in 0..16 {
            let lo = i32::from(qs[j] & 0x0f) - 8;
            let hi = i32::from(qs[j] >> 4) - 8;
            sumi += lo * i32::from(q8[j] as i8) + hi * i32::from(q8[j + 16] as i8);
        }
        sumf += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sumf
}

/// Expands a q4_0 row to f32.
pub fn dequantize_row_q4_0(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q4_0, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(x, 0);
        for (j, &q) in x[2..18].iter().enumerate() {
            y[j] = (i32::from(q & 0x0f) - 8) as f32 * d;
            y[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}
