//! q4_0 × q8_0 with AVX2: nibbles re-centred to ±8, sign-trick products, two blocks in
//! flight.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_0::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{load_256, mul_sum_i8_i8, nibbles_32, scale_product, sum_blocks};
use crate::types::WeightType;

/// AVX2 twin of [`super::scalar::vec_dot_q4_0_q8_0`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q4_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_0, n, w, a);
    sum_blocks::<BLOCK, Q8_BLOCK>(w, a, |x, y| {
        let qx = _mm256_sub_epi8(nibbles_32(sub(x, 2)), _mm256_set1_epi8(8));
        let d = scale_product(sub(x, 0), sub(y, 0));
        (d, mul_sum_i8_i8(qx, load_256(sub(y, 2))))
    })
}
