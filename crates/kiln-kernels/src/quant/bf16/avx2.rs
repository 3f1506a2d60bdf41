//! bf16 · f32 with AVX2: weights widened by zero-extending to 32 bits and shifting
//! into the high half (exact), then FMA.

use std::arch::x86_64::*;

use crate::quant::block::{check_dot, f32_at, sub};
use crate::quant::simd::avx2::{hsum_ps, load_128, load_ps_bytes};
use crate::types::WeightType;

/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
fn widen(b: &[u8; 16]) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load_128(b))))
}

/// AVX2 twin of [`super::scalar::vec_dot_bf16_f32`].
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn vec_dot_bf16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::BF16, n, w, a);
    let (wc, wt) = w.as_chunks::<64>();
    let (ac, at) = a.as_chunks::<128>();
    let mut acc = [_mm256_setzero_ps(); 4];
    for (x, y) in wc.iter().zip(ac) {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm256_fmadd_ps(widen(sub(x, 16 * k)), load_ps_bytes(sub(y, 32 * k)), *s);
        }
    }
    let (w8, w1) = wt.as_chunks::<16>();
    let (a8, a1) = at.as_chunks::<32>();
    for (x, y) in w8.iter().zip(a8) {
        acc[0] = _mm256_fmadd_ps(widen(x), load_ps_bytes(y), acc[0]);
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum_ps(total);
    for i in 0..w1.len() / 2 {
        let wv = f32::from_bits(u32::from(u16::from_le_bytes([w1[2 * i], w1[2 * i + 1]])) << 16);
        sum += wv * f32_at(a1, 4 * i);
    }
    sum
}
