//! q4_K super-blocks (`d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`): 8 sub-blocks
//! of 32 with 6-bit scale `sc` and min `m`, x = d·sc·q − dmin·m. Reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at, f32_at, scales_mins_k4, sub};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::types::{WeightType, QK_K};

pub(crate) const BLOCK: usize = 144;
pub(crate) const SCALES: usize = 4;
pub(crate) const QS4: usize = 16;

/// Σ over the 16 q8_K groups of `mins[g/2] · bsums[g]`: the min term of a k-quant dot.
#[inline(always)]
pub(crate) fn min_term(mins: &[u8; 8], y: &[u8]) -> i32 {
    (0..QK_K / 16)
        .map(|g| {
            let b = i16::from_le_bytes([y[BSUMS + 2 * g], y[BSUMS + 2 * g + 1]]);
            i32::from(mins[g / 2]) * i32::from(b)
        })
        .sum()
}

/// Dot product of a q4_K weight row with a q8_K activation row.
pub fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_K, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(Q8K_BLOCK)) {
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        let (q4, q8) = (&x[QS4..BLOCK], &y[QS..BSUMS]);
        let mut sumi = 0i32;
        for j in 0..QK_K / 64 {
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                let q = q4[32 * j + l];
                lo += i32::from(q & 0x0f) * i32::from(q8[64 * j + l] as i8);
                hi += i32::from(q >> 4) * i32::from(q8[64 * j + 32 + l] as i8);
            }
            sumi += i32::from(sc[2 * j]) * lo + i32::from(sc[2 * j + 1]) * hi;
        }
        let dy = f32_at(y, 0);
        sumf += f16_at(x, 0) * dy * sumi as f32 - f16_at(x, 2) * dy * min_term(&mn, y) as f32;
    }
    sumf
}

/// Expands a q4_K row to f32 (same operation order as ggml and gguf-py).
pub fn dequantize_row_q4_k(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q4_K, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(x, 0), f16_at(x, 2));
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        for j in 0..QK_K / 64 {
            let (d1, m1) = (d * f32::from(sc[2 * j]), dmin * f32::from(mn[2 * j]));
            let (d2, m2) = (
                d * f32::from(sc[2 * j + 1]),
                dmin * f32::from(mn[2 * j + 1]),
            );
            for l in 0..32 {
                let q = x[QS4 + 32 * j + l];
                y[64 * j + l] = d1 * f32::from(q & 0x0f) - m1;
                y[64 * j + 32 + l] = d2 * f32::from(q >> 4) - m2;
            }
        }
    }
}
