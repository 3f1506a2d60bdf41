//! q6_K super-blocks (`ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`): 16 groups
//! of 16 with an 8-bit scale, x = d·sc·(q − 32), q 6-bit. Reference kernels.

use crate::quant::block::{check_dequant, check_dot, f16_at, f32_at};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::types::{WeightType, QK_K};

pub(crate) const BLOCK: usize = 210;
pub(crate) const QH: usize = 128;
pub(crate) const SCALES: usize = 192;
pub(crate) const D: usize = 208;

/// The 256 signed 6-bit values of one super-block, in element order.
#[inline(always)]
fn unpack(x: &[u8]) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for h in 0..2 {
        let (ql, qh) = (&x[64 * h..64 * h + 64], &x[QH + 32 * h..QH + 32 * h + 32]);
        let y = &mut q[128 * h..128 * h + 128];
        for l in 0..32 {
            y[l] = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
            y[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    q
}

/// Dot product of a q6_K weight row with a q8_K activation row.
pub fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q6_K, n, w, a);
    let mut sumf = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(Q8K_BLOCK)) {
        let (q, q8) = (unpack(x), &y[QS..BSUMS]);
        let mut sumi = 0i32;
        for (g, (qc, yc)) in q.chunks_exact(16).zip(q8.chunks_exact(16)).enumerate() {
            let dot: i32 = qc
                .iter()
                .zip(yc)
                .map(|(&p, &b)| i32::from(p) * i32::from(b as i8))
                .sum();
            sumi += i32::from(x[SCALES + g] as i8) * dot;
        }
        sumf += f16_at(x, D) * f32_at(y, 0) * sumi as f32;
    }
    sumf
}

/// Expands a q6_K row to f32 (`(d·sc)·q`, as ggml and gguf-py).
pub fn dequantize_row_q6_k(w: &[u8], out: &mut [f32]) {
    check_dequant(WeightType::Q6_K, w, out);
    for (x, y) in w.chunks_exact(BLOCK).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(x, D);
        let q = unpack(x);
        for (g, (yc, qc)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let ds = d * f32::from(x[SCALES + g] as i8);
            for (o, &v) in yc.iter_mut().zip(qc) {
                *o = ds * f32::from(v);
            }
        }
    }
}
