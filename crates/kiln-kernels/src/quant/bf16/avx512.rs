//! bf16 · f32 with AVX-512: sixteen weights widened per step, four accumulators.

use std::arch::x86_64::*;

use crate::quant::block::{check_dot, f32_at, sub};
use crate::quant::simd::avx2::load_256;
use crate::quant::simd::avx512::{hsum_ps, load_ps_bytes};
use crate::types::WeightType;

/// # Safety
/// Needs AVX-512F and AVX2: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn widen(b: &[u8; 32]) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(load_256(b))))
}

/// AVX-512 twin of [`super::scalar::vec_dot_bf16_f32`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2 and FMA: calling it from code
/// that does not enable these features is `unsafe`, and the caller must ensure the CPU
/// supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(crate) fn vec_dot_bf16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::BF16, n, w, a);
    let (wc, wt) = w.as_chunks::<128>();
    let (ac, at) = a.as_chunks::<256>();
    let mut acc = [_mm512_setzero_ps(); 4];
    for (x, y) in wc.iter().zip(ac) {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm512_fmadd_ps(widen(sub(x, 32 * k)), load_ps_bytes(sub(y, 64 * k)), *s);
        }
    }
    let (w16, w1) = wt.as_chunks::<32>();
    let (a16, a1) = at.as_chunks::<64>();
    for (x, y) in w16.iter().zip(a16) {
        acc[0] = _mm512_fmadd_ps(widen(x), load_ps_bytes(y), acc[0]);
    }
    let total = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    let mut sum = hsum_ps(total);
    for i in 0..w1.len() / 2 {
        let wv = f32::from_bits(u32::from(u16::from_le_bytes([w1[2 * i], w1[2 * i + 1]])) << 16);
        sum += wv * f32_at(a1, 4 * i);
    }
    sum
}
