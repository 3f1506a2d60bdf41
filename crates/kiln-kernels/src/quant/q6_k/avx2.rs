//! q6_K × q8_K with AVX2: the unsigned 6-bit values (0..64) go through `maddubs`, each
//! 16-element group is weighted by its scale with `madd`, and the −32 offset is applied
//! once per super-block as 32·Σ scale·bsum.

use std::arch::x86_64::*;

use super::scalar::{BLOCK, D, QH, SCALES};
use crate::quant::block::{check_dot, f32_at, sub};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::quant::simd::avx2::{f16_at, hsum_ps, load_256, q6k_scaled_bsums};
use crate::types::WeightType;

/// AVX2 twin of [`super::scalar::vec_dot_q6_k_q8_k`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q6_K, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8K_BLOCK>().0);
    let (low4, bits45) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    let mut acc = _mm256_setzero_ps();
    for (x, y) in wb.iter().zip(ab) {
        let sc: &[u8; 16] = sub(x, SCALES);
        let offset = 32 * q6k_scaled_bsums(sc, sub(y, BSUMS));
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let ql0 = load_256(sub(x, 64 * h));
            let ql1 = load_256(sub(x, 64 * h + 32));
            let qh = load_256(sub(x, QH + 32 * h));
            // Chunk k of this half takes qh bits 2k..2k+2 into value bits 4..6.
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, low4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(qh), bits45),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, low4),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(qh), bits45),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low4),
                    _mm256_and_si256(qh, bits45),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), bits45),
                ),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let c = 4 * h + k;
                let p = _mm256_maddubs_epi16(qk, load_256(sub(y, QS + 32 * c)));
                let s = _mm256_set_m128i(
                    _mm_set1_epi16(i16::from(sc[2 * c + 1] as i8)),
                    _mm_set1_epi16(i16::from(sc[2 * c] as i8)),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        // Fold the offset into one lane so the super-block total stays exact.
        let sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(offset, 0, 0, 0, 0, 0, 0, 0));
        let d = _mm256_set1_ps(f16_at(x, D) * f32_at(y, 0));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}
