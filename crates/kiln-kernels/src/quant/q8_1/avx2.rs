//! q8_1 quantization with AVX2 (the q8_0 block quantizer plus the block sum).

use std::arch::x86_64::*;

use super::scalar::BLOCK;
use crate::quant::block::{check_act, f32_to_f16};
use crate::quant::q8_0::avx2::quantize_block;
use crate::quant::simd::avx2::{hsum_epi32, pack_i32_to_i8, store_256};
use crate::types::ActType;

/// AVX2 twin of [`super::scalar::quantize_row_q8_1`] (bit-identical output).
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize_row_q8_1(x: &[f32], out: &mut [u8]) {
    check_act(ActType::Q8_1, x, out);
    for (xb, yb) in x
        .as_chunks::<32>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<BLOCK>().0)
    {
        let (d, q) = quantize_block(xb);
        let sum = hsum_epi32(_mm256_add_epi32(
            _mm256_add_epi32(q[0], q[1]),
            _mm256_add_epi32(q[2], q[3]),
        ));
        let (head, qs) = yb.split_at_mut(4);
        head[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        head[2..].copy_from_slice(&f32_to_f16(sum as f32 * d).to_le_bytes());
        if let Some(qs) = qs.first_chunk_mut::<32>() {
            store_256(qs, pack_i32_to_i8(q));
        }
    }
}
