//! q5_K super-blocks (`d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]`):
//! like q4_K with a fifth bit per element from `qh` (bit 2j for the low nibbles of pair
//! j, bit 2j+1 for the high nibbles). Reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at, f32_at, scales_mins_k4, sub};
use crate::quant::q4_k::scalar::min_term;
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::types::{WeightType, QK_K};

pub(crate) const BLOCK: usize = 176;
pub(crate) const SCALES: usize = 4;
pub(crate) const QH: usize = 16;
pub(crate) const QS5: usize = 48;

/// The 256 unsigned 5-bit values of one super-block, in element order.
#[inline(always)]
fn unpack(x: &[u8]) -> [u8; QK_K] {
    let (qh, qs) = (&x[QH..QS5], &x[QS5..BLOCK]);
    let mut q = [0u8; QK_K];
    for j in 0..QK_K / 64 {
        for l in 0..32 {
            let b = qs[32 * j + l];
            q[64 * j + l] = (b & 0x0f) | (((qh[l] >> (2 * j)) & 1) << 4);
            q[64 * j + 32 + l] = (b >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
        }
    }
    q
}

/// Dot product of a q5_K weight row with a q8_K activation row.
pub fn vec_dot_q5_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q5_K, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(Q8K_BLOCK)) {
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        let (q, q8) = (unpack(x), &y[QS..BSUMS]);
        let mut sumi = 0i32;
        for (s, (qc, yc)) in q.chunks_exact(32).zip(q8.chunks_exact(32)).enumerate() {
            let dot: i32 = qc
                .iter()
                .zip(yc)
                .map(|(&p, &b)| i32::from(p) * i32::from(b as i8))
                .sum();
            sumi += i32::from(sc[s]) * dot;
        }
        let dy = f32_at(y, 0);
        sumf += f16_at(x, 0) * dy * sumi as f32 - f16_at(x, 2) * dy * min_term(&mn, y) as f32;
    }
    sumf
}

/// Expands a q5_K row to f32.
pub fn dequantize_row_q5_k(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q5_K, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(x, 0), f16_at(x, 2));
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        let q = unpack(x);
        for (s, (yc, qc)) in y.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
            let (ds, ms) = (d * f32::from(sc[s]), dmin * f32::from(mn[s]));
            for (o, &v) in yc.iter_mut().zip(qc) {
                *o = ds * f32::from(v) - ms;
            }
        }
    }
}
