//! q5_0 × q8_0 with AVX-512 VNNI: two blocks per register; the two 32-bit `qh` words form
//! a 64-bit byte mask that sets bit 4, then `vpdpbusd` on the unsigned 5-bit values with
//! 16·Σa subtracted.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_0::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{load_256, nibbles_32, scale_product};
use crate::quant::simd::avx512::{dot_offset, dot_offset_256, join, pair_scales, sum_block_pairs};
use crate::types::WeightType;

/// AVX-512 twin of [`super::scalar::vec_dot_q5_0_q8_0`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q5_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q5_0, n, w, a);
    sum_block_pairs::<BLOCK, Q8_BLOCK>(
        w,
        a,
        |[x0, x1], [y0, y1]| {
            let qh0 = u32::from_le_bytes(*sub(x0, 2));
            let qh1 = u32::from_le_bytes(*sub(x1, 2));
            let mask = u64::from(qh1) << 32 | u64::from(qh0);
            let high = _mm512_maskz_mov_epi8(mask, _mm512_set1_epi8(0x10));
            let nib = join(nibbles_32(sub(x0, 6)), nibbles_32(sub(x1, 6)));
            let qy = join(load_256(sub(y0, 2)), load_256(sub(y1, 2)));
            let d = pair_scales([sub(x0, 0), sub(x1, 0)], [sub(y0, 0), sub(y1, 0)]);
            (d, dot_offset(_mm512_or_si512(nib, high), qy, 16))
        },
        |x, y| {
            let qh = u32::from_le_bytes(*sub(x, 2));
            let high = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
            let q = _mm256_or_si256(nibbles_32(sub(x, 6)), high);
            (
                scale_product(sub(x, 0), sub(y, 0)),
                dot_offset_256(q, load_256(sub(y, 2)), 16),
            )
        },
    )
}
