//! q5_K × q8_K with AVX2: as q4_K, with bit 4 of each value taken from `qh` by a
//! walking one-bit mask (bit 2j for the low nibbles of pair j, 2j+1 for the high).

use std::arch::x86_64::*;

use super::scalar::{BLOCK, QH, QS5, SCALES};
use crate::quant::block::{check_dot, f32_at, scales_mins_k4, sub};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::quant::simd::avx2::{f16_at, hsum_ps, k_min_term, load_256};
use crate::types::WeightType;

/// AVX2 twin of [`super::scalar::vec_dot_q5_k_q8_k`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q5_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q5_K, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8K_BLOCK>().0);
    let (low4, bit4) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x10));
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0f32;
    for (x, y) in wb.iter().zip(ab) {
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        let dy = f32_at(y, 0);
        acc_min += f16_at(x, 2) * dy * k_min_term(&mn, sub(y, BSUMS)) as f32;
        let qh = load_256(sub(x, QH));
        let mut bit = _mm256_set1_epi8(1);
        let mut high = || {
            let h = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
            bit = _mm256_add_epi8(bit, bit);
            _mm256_and_si256(h, bit4)
        };
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q = load_256(sub(x, QS5 + 32 * j));
            let lo = _mm256_or_si256(_mm256_and_si256(q, low4), high());
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q), low4), high());
            let plo = _mm256_maddubs_epi16(lo, load_256(sub(y, QS + 64 * j)));
            let phi = _mm256_maddubs_epi16(hi, load_256(sub(y, QS + 64 * j + 32)));
            let plo = _mm256_madd_epi16(plo, _mm256_set1_epi16(i16::from(sc[2 * j])));
            let phi = _mm256_madd_epi16(phi, _mm256_set1_epi16(i16::from(sc[2 * j + 1])));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        let d = _mm256_set1_ps(f16_at(x, 0) * dy);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - acc_min
}
