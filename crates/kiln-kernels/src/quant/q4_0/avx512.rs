//! q4_0 × q8_0 with AVX-512 VNNI: two blocks per register, unsigned nibbles through
//! `vpdpbusd` with 8·Σa subtracted.

use super::scalar::BLOCK;
use crate::quant::block::{check_dot, sub};
use crate::quant::q8_0::scalar::BLOCK as Q8_BLOCK;
use crate::quant::simd::avx2::{load_256, nibbles_32, scale_product};
use crate::quant::simd::avx512::{dot_offset, dot_offset_256, join, pair_scales, sum_block_pairs};
use crate::types::WeightType;

/// AVX-512 twin of [`super::scalar::vec_dot_q4_0_q8_0`].
///
/// # Safety
/// Needs AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI, AVX2, FMA and F16C: calling it from
/// code that does not enable these features is `unsafe`, and the caller must ensure the
/// CPU supports them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_q4_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q4_0, n, w, a);
    sum_block_pairs::<BLOCK, Q8_BLOCK>(
        w,
        a,
        |[x0, x1], [y0, y1]| {
            let qx = join(nibbles_32(sub(x0, 2)), nibbles_32(sub(x1, 2)));
            let qy = join(load_256(sub(y0, 2)), load_256(sub(y1, 2)));
            let d = pair_scales([sub(x0, 0), sub(x1, 0)], [sub(y0, 0), sub(y1, 0)]);
            (d, dot_offset(qx, qy, 8))
        },
        |x, y| {
            let s = dot_offset_256(nibbles_32(sub(x, 2)), load_256(sub(y, 2)), 8);
            (scale_product(sub(x, 0), sub(y, 0)), s)
        },
    )
}
