//! q8_0 with AVX-512 VNNI: two blocks per 512-bit register. Weights are flipped to
//! unsigned (w ⊕ 0x80 = w + 128) for `vpdpbusd`, and 128·Σa is subtracted back: exact
//! for every i8 input, unlike the sign trick.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::simd::avx2::{load_256, scale_product};
use crate::quant::simd::avx512::{dot_offset, dot_offset_256, join, pair_scales, sum_block_pairs};
use crate::types::WeightType;

/// AVX-512 twin of [`super::scalar::vec_dot_q8_0_q8_0`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q8_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q8_0, n, w, a);
    sum_block_pairs::<BLOCK, BLOCK>(
        w,
        a,
        |[x0, x1], [y0, y1]| {
            let qx = join(load_256(sub(x0, 2)), load_256(sub(x1, 2)));
            let qy = join(load_256(sub(y0, 2)), load_256(sub(y1, 2)));
            let s = dot_offset(_mm512_xor_si512(qx, _mm512_set1_epi8(-128)), qy, 128);
            let d = pair_scales([sub(x0, 0), sub(x1, 0)], [sub(y0, 0), sub(y1, 0)]);
            (d, s)
        },
        |x, y| {
            let qx = _mm256_xor_si256(load_256(sub(x, 2)), _mm256_set1_epi8(-128));
            let s = dot_offset_256(qx, load_256(sub(y, 2)), 128);
            (scale_product(sub(x, 0), sub(y, 0)), s)
        },
    )
}
