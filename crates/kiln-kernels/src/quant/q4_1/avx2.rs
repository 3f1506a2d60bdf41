//! q4_1 × q8_1 with AVX2: unsigned nibbles times activations, plus the min term `m·s`
//! from the activation's stored block sum. The four f16 fields of a block pair (`d, m`
//! and `d, s`) are widened by one F16C instruction; two blocks in flight.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_1::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{f16x4, hsum_ps, load_256, mul_sum_u8_i8, nibbles_32};
use crate::types::WeightType;

/// Adds one block to the accumulators: `acc += d_x·d_y·(q·a)` per lane and
/// `mins += [_, m·s, _, _]`.
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block(x: &[u8; BLOCK], y: &[u8; Q8_BLOCK], acc: &mut __m256, mins: &mut __m128) {
    let h = f16x4(sub(x, 0), sub(y, 0)); // [dx, mx, dy, sy]
    let prod = _mm_mul_ps(h, _mm_movehl_ps(h, h)); // [dx·dy, mx·sy, ..]
    *mins = _mm_add_ps(*mins, prod);
    let p = mul_sum_u8_i8(nibbles_32(sub(x, 4)), load_256(sub(y, 4)));
    *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), _mm256_cvtepi32_ps(p), *acc);
}

/// AVX2 twin of [`super::scalar::vec_dot_q4_1_q8_1`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q4_1_q8_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_1, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8_BLOCK>().0);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut mins = [_mm_setzero_ps(); 2];
    let (wp, ap) = (wb.chunks_exact(2), ab.chunks_exact(2));
    let (wt, at) = (wp.remainder(), ap.remainder());
    for (xs, ys) in wp.zip(ap) {
        for k in 0..2 {
            block(&xs[k], &ys[k], &mut acc[k], &mut mins[k]);
        }
    }
    if let (Some(x), Some(y)) = (wt.first(), at.first()) {
        block(x, y, &mut acc[0], &mut mins[0]);
    }
    let m = _mm_add_ps(mins[0], mins[1]);
    hsum_ps(_mm256_add_ps(acc[0], acc[1])) + _mm_cvtss_f32(_mm_movehdup_ps(m))
}
