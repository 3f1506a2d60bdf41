//! q6_K × q8_K with AVX-512 VNNI: 64 values per step (two 32-element chunks that share
//! `qh` bytes), `maddubs` with the activations, then `vpdpwssd` with the four group
//! scales of the step, broadcast by `vpermw`. The −32 offset is applied once per
//! super-block as 32·Σ scale·bsum.

use std::arch::x86_64::*;

use super::scalar::{BLOCK, D, QH, SCALES};
use crate::quant::block::{check_dot, f32_at, sub};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::quant::simd::avx2::{f16_at, load_128, load_256, q6k_scaled_bsums};
use crate::quant::simd::avx512::{hsum_ps, join, load_512};
use crate::types::WeightType;

/// i16 lane l of a step's products covers values 2l, 2l+1, i.e. group l/8 of the step.
const GROUP_OF_LANE: [u8; 32] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
];

/// AVX-512 twin of [`super::scalar::vec_dot_q6_k_q8_k`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q6_K, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8K_BLOCK>().0);
    let (low4, bits45) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    let group_of_lane = _mm512_cvtepu8_epi16(load_256(&GROUP_OF_LANE));
    // Per-half shifts that bring qh bits (0,1)/(2,3) resp. (4,5)/(6,7) to bits 4,5.
    let shl_lo = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    let shr_hi = _mm512_mask_blend_epi64(0xf0, _mm512_setzero_si512(), _mm512_set1_epi16(2));
    let mut acc = _mm512_setzero_ps();
    for (x, y) in wb.iter().zip(ab) {
        let sc: &[u8; 16] = sub(x, SCALES);
        let scales = _mm512_cvtepi8_epi16(_mm256_zextsi128_si256(load_128(sc)));
        let offset = 32 * q6k_scaled_bsums(sc, sub(y, BSUMS));
        let mut sumi = _mm512_maskz_set1_epi32(1, -offset);
        for h in 0..2 {
            let ql = load_512(sub(x, 64 * h));
            let qh = load_256(sub(x, QH + 32 * h));
            let qh = join(qh, qh);
            // Step 0: chunks 4h, 4h+1 (low nibbles); step 1: chunks 4h+2, 4h+3 (high).
            let steps = [
                _mm512_or_si512(
                    _mm512_and_si512(ql, low4),
                    _mm512_and_si512(_mm512_sllv_epi16(qh, shl_lo), bits45),
                ),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4),
                    _mm512_and_si512(_mm512_srlv_epi16(qh, shr_hi), bits45),
                ),
            ];
            for (s, q) in steps.into_iter().enumerate() {
                let first = 8 * h + 4 * s; // first of the step's four groups
                let p = _mm512_maddubs_epi16(q, load_512(sub(y, QS + 64 * (2 * h + s))));
                let idx = _mm512_add_epi16(group_of_lane, _mm512_set1_epi16(first as i16));
                sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, scales));
            }
        }
        let d = _mm512_set1_ps(f16_at(x, D) * f32_at(y, 0));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}
