//! q8_K quantization with AVX2, bit-identical to the scalar reference: the same
//! signed-max selection (first element of largest magnitude), the same `−127/max`
//! multiply, and round-half-to-even, which is AVX's native rounding.

use std::arch::x86_64::*;

use super::scalar::{BLOCK, BSUMS, QS};
use crate::quant::block::{check_act, sub, sub_mut};
use crate::quant::simd::avx2::{hmax_ps, load_ps, pack_i32_to_i8, store_256, sums_of_16};
use crate::types::{ActType, QK_K};

/// AVX2 twin of [`super::scalar::quantize_row_q8_k`].
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize_row_q8_k(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_K, x, out);
    let sign = _mm256_set1_ps(-0.0);
    for (xb, yb) in x
        .as_chunks::<QK_K>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<BLOCK>().0)
    {
        let v: [__m256; 32] = std::array::from_fn(|i| load_ps(sub(xb, 8 * i)));
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &x| {
            _mm256_max_ps(m, _mm256_andnot_ps(sign, x))
        });
        let amax = hmax_ps(m);
        if amax == 0.0 {
            yb.fill(0);
            continue;
        }
        // The first element whose magnitude is amax: that is the one the scalar scan keeps.
        let target = _mm256_set1_ps(amax);
        let first = v.iter().enumerate().find_map(|(i, &x)| {
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(
                _mm256_andnot_ps(sign, x),
                target,
            ));
            (hit != 0).then(|| 8 * i + hit.trailing_zeros() as usize)
        });
        let max = xb[first.unwrap_or(0)];
        let iscale = -127.0 / max;
        let vs = _mm256_set1_ps(iscale);
        let cap = _mm256_set1_epi32(127);
        let quant = |x: __m256| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(vs, x),
            );
            _mm256_min_epi32(_mm256_cvtps_epi32(r), cap)
        };
        let q: [__m256i; 8] = std::array::from_fn(|k| {
            pack_i32_to_i8([
                quant(v[4 * k]),
                quant(v[4 * k + 1]),
                quant(v[4 * k + 2]),
                quant(v[4 * k + 3]),
            ])
        });
        for (k, &qk) in q.iter().enumerate() {
            store_256(sub_mut(yb, QS + 32 * k), qk);
        }
        store_256(sub_mut(yb, BSUMS), sums_of_16(q));
        yb[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
