//! q8_0 with AVX2: products via the sign trick (|w| · a·sign w), two blocks in flight.

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_act, check_dot, f32_to_f16, sub};
use crate::quant::simd::avx2::{
    hmax_ps, load_256, load_ps, mul_sum_i8_i8, pack_i32_to_i8, scale_product, store_256, sum_blocks,
};
use crate::types::{ActType, WeightType};

/// AVX2 twin of [`super::scalar::vec_dot_q8_0_q8_0`].
///
/// # Safety
/// Needs AVX2, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q8_0_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(WeightType::Q8_0, n, w, a);
    sum_blocks::<BLOCK, BLOCK>(w, a, |x, y| {
        let d = scale_product(sub(x, 0), sub(y, 0));
        (d, mul_sum_i8_i8(load_256(sub(x, 2)), load_256(sub(y, 2))))
    })
}

/// One block's quantization: `(d = max |x| / 127, the 32 rounded quants as i32)`.
/// Shared with q8_1; bit-identical to the scalar reference (same multiply by 127/amax,
/// round half to even — AVX's native rounding, as in llama.cpp).
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize_block(xb: &[f32; 32]) -> (f32, [__m256i; 4]) {
    let v: [__m256; 4] = std::array::from_fn(|i| load_ps(sub(xb, 8 * i)));
    let abs = |x| _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
    let m = _mm256_max_ps(
        _mm256_max_ps(abs(v[0]), abs(v[1])),
        _mm256_max_ps(abs(v[2]), abs(v[3])),
    );
    let amax = hmax_ps(m);
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let q = v.map(|x| {
        _mm256_cvtps_epi32(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(_mm256_mul_ps(x, id)))
    });
    (d, q)
}

/// AVX2 twin of [`super::scalar::quantize_row_q8_0`] (bit-identical output).
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_0, x, out);
    for (xb, yb) in x
        .as_chunks::<32>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<BLOCK>().0)
    {
        let (d, q) = quantize_block(xb);
        let (head, qs) = yb.split_at_mut(2);
        head.copy_from_slice(&f32_to_f16(d).to_le_bytes());
        if let Some(qs) = qs.first_chunk_mut::<32>() {
            store_256(qs, pack_i32_to_i8(q));
        }
    }
}
