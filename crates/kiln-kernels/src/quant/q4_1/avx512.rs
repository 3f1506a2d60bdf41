//! q4_1 × q8_1 with AVX-512 VNNI: two blocks per register through `vpdpbusd`, plus the
//! min terms `m·s`; the eight f16 fields of a block pair are widened by one F16C
//! instruction.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_1::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{f16x4, hsum_epi32, load_256, nibbles_32};
use crate::quant::simd::avx512::{hsum_ps, join};
use crate::types::WeightType;

/// Adds blocks `x[0]`/`y[0]` and `x[1]`/`y[1]` to the accumulators.
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn pair(x: [&[u8; BLOCK]; 2], y: [&[u8; Q8_BLOCK]; 2], acc: &mut __m512, mins: &mut __m128) {
    let h0 = f16x4(sub(x[0], 0), sub(y[0], 0)); // [dx, mx, dy, sy] of block 0
    let h1 = f16x4(sub(x[1], 0), sub(y[1], 0));
    let p0 = _mm_mul_ps(h0, _mm_movehl_ps(h0, h0)); // [dx·dy, mx·sy, ..]
    let p1 = _mm_mul_ps(h1, _mm_movehl_ps(h1, h1));
    *mins = _mm_add_ps(*mins, _mm_add_ps(p0, p1));
    let d = _mm512_mask_blend_ps(0xff00, _mm512_broadcastss_ps(p0), _mm512_broadcastss_ps(p1));
    let qx = join(nibbles_32(sub(x[0], 4)), nibbles_32(sub(x[1], 4)));
    let qy = join(load_256(sub(y[0], 4)), load_256(sub(y[1], 4)));
    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, qy);
    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), *acc);
}

/// AVX-512 twin of [`super::scalar::vec_dot_q4_1_q8_1`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q4_1_q8_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_1, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8_BLOCK>().0);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut mins = [_mm_setzero_ps(); 2];
    let (wq, aq) = (wb.chunks_exact(4), ab.chunks_exact(4));
    let (wt, at) = (wq.remainder(), aq.remainder());
    for (xs, ys) in wq.zip(aq) {
        for k in 0..2 {
            let (x, y) = ([&xs[2 * k], &xs[2 * k + 1]], [&ys[2 * k], &ys[2 * k + 1]]);
            pair(x, y, &mut acc[k], &mut mins[k]);
        }
    }
    let mut done = 0;
    if wt.len() >= 2 && at.len() >= 2 {
        pair(
            [&wt[0], &wt[1]],
            [&at[0], &at[1]],
            &mut acc[0],
            &mut mins[0],
        );
        done = 2;
    }
    let m = _mm_add_ps(mins[0], mins[1]);
    let mut sum = hsum_ps(_mm512_add_ps(acc[0], acc[1])) + _mm_cvtss_f32(_mm_movehdup_ps(m));
    if let (Some(x), Some(y)) = (wt.get(done), at.get(done)) {
        let h = f16x4(sub(x, 0), sub(y, 0));
        let s = _mm256_dpbusd_epi32(
            _mm256_setzero_si256(),
            nibbles_32(sub(x, 4)),
            load_256(sub(y, 4)),
        );
        let p = _mm_mul_ps(h, _mm_movehl_ps(h, h));
        sum += _mm_cvtss_f32(p) * hsum_epi32(s) as f32 + _mm_cvtss_f32(_mm_movehdup_ps(p));
    }
    sum
}
