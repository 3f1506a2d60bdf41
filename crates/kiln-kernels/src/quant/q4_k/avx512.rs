//! q4_K × q8_K with AVX-512 VNNI: each 32 bytes of nibbles become 64 values (low nibbles
//! in the lower half, high in the upper: sub-blocks 2j and 2j+1 in element order), one
//! 64-byte activation load, `maddubs`, then `vpdpwssd` with the two sub-block scales.
//! The min term comes from q8_K's 16-element sums.

use std::arch::x86_64::*;

use super::scalar::{BLOCK, QS4, SCALES};
use crate::quant::block::{check_dot, f32_at, scales_mins_k4, sub};
use crate::quant::q8_k::scalar::{BLOCK as Q8K_BLOCK, BSUMS, QS};
use crate::quant::simd::avx2::{f16_at, k_min_term};
use crate::quant::simd::avx512::{hsum_ps, k_pair_scales, k_scales, load_512, nibbles_64};
use crate::types::WeightType;

/// AVX-512 twin of [`super::scalar::vec_dot_q4_k_q8_k`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_K, n, w, a);
    let (wb, ab) = (w.as_chunks::<BLOCK>().0, a.as_chunks::<Q8K_BLOCK>().0);
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = 0f32;
    for (x, y) in wb.iter().zip(ab) {
        let (sc, mn) = scales_mins_k4(sub(x, SCALES));
        let dy = f32_at(y, 0);
        acc_min += f16_at(x, 2) * dy * k_min_term(&mn, sub(y, BSUMS)) as f32;
        let scales = k_scales(&sc);
        let mut sumi = _mm512_setzero_si512();
        for j in 0..4 {
            let q = nibbles_64(sub(x, QS4 + 32 * j));
            let p = _mm512_maddubs_epi16(q, load_512(sub(y, QS + 64 * j)));
            sumi = _mm512_dpwssd_epi32(sumi, p, k_pair_scales(scales, j));
        }
        let d = _mm512_set1_ps(f16_at(x, 0) * dy);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - acc_min
}
