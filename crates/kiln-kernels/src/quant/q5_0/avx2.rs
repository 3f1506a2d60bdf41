//! q5_0 × q8_0 with AVX2: the fifth bits expanded to bytes, values re-centred to ±16,
//! two blocks in flight.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_0::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{
    bits_to_bytes, load_256, mul_sum_i8_i8, nibbles_32, scale_product, sum_blocks,
};
use crate::types::WeightType;

/// The 32 signed values of a q5_0 block as bytes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
fn unpack(x: &[u8; BLOCK]) -> __m256i {
    let qh = u32::from_le_bytes(*sub(x, 2));
    // q − 16 = nibble | (bit ? 0x10 : 0) − 16: the nibble itself when the bit is set,
    // nibble − 16 = nibble | 0xf0 (two's complement) when it is clear.
    let clear_hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(0xf0u8 as i8));
    _mm256_or_si256(nibbles_32(sub(x, 6)), clear_hi)
}

/// AVX2 twin of [`super::scalar::vec_dot_q5_0_q8_0`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q5_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q5_0, n, w, a);
    sum_blocks::<BLOCK, Q8_BLOCK>(w, a, |x, y| {
        let d = scale_product(sub(x, 0), sub(y, 0));
        (d, mul_sum_i8_i8(unpack(x), load_256(sub(y, 2))))
    })
}
