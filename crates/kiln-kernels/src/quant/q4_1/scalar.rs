//! q4_1 (`d: f16, m: f16, qs: [u8; 16]`, x = d·q + m): reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at};
use crate::types::WeightType;

pub(crate) const BLOCK: usize = 20;

/// Dot product of a q4_1 weight row with a q8_1 activation row. The min term uses the
/// activation's stored block sum `s = d·Σq`, as ggml does.
pub fn vec_dot_q4_1_q8_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_1, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(36)) {
        let (qs, q8) = (&x[4..20], &y[4..36]);
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += i32::from(qs[j] & 0x0f) * i32::from(q8[j] as i8)
                + i32::from(qs[j] >> 4) * i32::from(q8[j + 16] as i8);
        }
        sumf += (f16_at(x, 0) * f16_at(y, 0)) * sumi as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    sumf
}

/// Expands a q4_1 row to f32.
pub fn dequantize_row_q4_1(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q4_1, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(32)) {
        let (d, m) = (f16_at(x, 0), f16_at(x, 2));
        for (j, &q) in x[4..20].iter().enumerate() {
            y[j] = f32::from(q & 0x0f) * d + m;
            y[j + 16] = f32::from(q >> 4) * d + m;
        }
    }
}
