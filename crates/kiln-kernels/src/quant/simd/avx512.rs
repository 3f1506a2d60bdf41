//! AVX-512 (F, BW, VL, VNNI) helpers.

use std::arch::x86_64::*;

/// # Safety
/// Needs AVX-512F: calling it from code that does not enable that feature is `unsafe`,
/// and the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn load_512(b: &[u8; 64]) -> __m512i {
    // SAFETY: `b` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Sixteen little-endian f32 from 64 bytes.
///
/// # Safety
/// Needs AVX-512F: calling it from code that does not enable that feature is `unsafe`,
/// and the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn load_ps_bytes(b: &[u8; 64]) -> __m512 {
    // SAFETY: `b` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(b.as_ptr().cast()) }
}

/// `lo` in bytes 0..32, `hi` in bytes 32..64.
///
/// # Safety
/// Needs AVX-512F: calling it from code that does not enable that feature is `unsafe`,
/// and the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Per-lane scales for two 32-element blocks sharing a register: `dx0·dy0` in lanes
/// 0..8 and `dx1·dy1` in lanes 8..16, from the four f16 scales (one F16C conversion).
///
/// # Safety
/// Needs AVX-512F, AVX2 and F16C: calling it from code that does not enable these
/// features is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx2,f16c")]
pub(crate) fn pair_scales(dx: [&[u8; 2]; 2], dy: [&[u8; 2]; 2]) -> __m512 {
    let h = |b: &[u8; 2]| u64::from(u16::from_le_bytes(*b));
    let bits = h(dy[1]) << 48 | h(dx[1]) << 32 | h(dy[0]) << 16 | h(dx[0]);
    let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64)); // [dx0, dy0, dx1, dy1]
    let p = _mm_mul_ps(v, _mm_movehdup_ps(v)); // [dx0·dy0, _, dx1·dy1, _]
    let idx = _mm512_mask_blend_epi32(0xff00, _mm512_setzero_si512(), _mm512_set1_epi32(2));
    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p))
}

/// The 32 bytes of a k-quant nibble pair as 64 values: low nibbles in bytes 0..32,
/// high nibbles in bytes 32..64 (one broadcast, one per-half variable shift).
///
/// # Safety
/// Needs AVX-512F, AVX-512BW and AVX2: calling it from code that does not enable these
/// features is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(crate) fn nibbles_64(b: &[u8; 32]) -> __m512i {
    let shift = _mm512_mask_blend_epi64(0xf0, _mm512_setzero_si512(), _mm512_set1_epi16(4));
    let both = _mm512_broadcast_i64x4(super::avx2::load_256(b));
    _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(0x0f))
}

/// The eight 6-bit sub-block scales of a q4_K/q5_K super-block as i16 lanes 0..8.
///
/// # Safety
/// Needs AVX-512F, AVX-512BW and AVX2: calling it from code that does not enable these
/// features is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(crate) fn k_scales(sc: &[u8; 8]) -> __m512i {
    let bytes = _mm_cvtsi64_si128(i64::from_le_bytes(*sc));
    _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(bytes))
}

/// Scales of sub-blocks `2j` (i16 lanes 0..16) and `2j+1` (lanes 16..32) from
/// [`k_scales`], matching the `maddubs` products of [`nibbles_64`] × 64 activations.
///
/// # Safety
/// Needs AVX-512F and AVX-512BW: calling it from code that does not enable these features
/// is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn k_pair_scales(scales: __m512i, j: usize) -> __m512i {
    let idx = _mm512_mask_blend_epi16(
        0xffff_0000,
        _mm512_set1_epi16(2 * j as i16),
        _mm512_set1_epi16(2 * j as i16 + 1),
    );
    _mm512_permutexvar_epi16(idx, scales)
}

/// `Σ u·s` of unsigned × signed bytes in groups of four (VNNI; no saturation), minus
/// `Σ c·s` for the constant byte `c`: the dot of `u − c` with `s`, for weights stored
/// with an offset (`c` = 8 for q4_0, 16 for q5_0, 128 for xor-flipped q8_0).
///
/// # Safety
/// Needs AVX-512F and AVX-512VNNI: calling it from code that does not enable these
/// features is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
pub(crate) fn dot_offset(u: __m512i, s: __m512i, c: u8) -> __m512i {
    let zero = _mm512_setzero_si512();
    _mm512_sub_epi32(
        _mm512_dpbusd_epi32(zero, u, s),
        _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(c as i8), s),
    )
}

/// The 256-bit form of [`dot_offset`], for an odd trailing block.
///
/// # Safety
/// Needs AVX-512VL and AVX-512VNNI: calling it from code that does not enable these
/// features is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512vl,avx512vnni")]
pub(crate) fn dot_offset_256(u: __m256i, s: __m256i, c: u8) -> __m256i {
    let zero = _mm256_setzero_si256();
    _mm256_sub_epi32(
        _mm256_dpbusd_epi32(zero, u, s),
        _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(c as i8), s),
    )
}

/// `Σ_blocks scale · Σ lanes` for 32-element blocks, two blocks per 512-bit register:
/// `pair(x, y)` returns per-lane scales and the integer dots of blocks `x[0]`/`y[0]`
/// (lanes 0..8) and `x[1]`/`y[1]` (lanes 8..16); `single` handles an odd last block
/// (scale in lane 0).
/// Two pairs per step feed two independent FMA chains.
///
/// # Safety
/// Needs AVX-512F, AVX2 and FMA: calling it from code that does not enable these features
/// is `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) fn sum_block_pairs<const WB: usize, const AB: usize>(
    w: &[u8],
    a: &[u8],
    pair: impl Fn([&[u8; WB]; 2], [&[u8; AB]; 2]) -> (__m512, __m512i),
    single: impl Fn(&[u8; WB], &[u8; AB]) -> (__m128, __m256i),
) -> f32 {
    let (wb, ab) = (w.as_chunks::<WB>().0, a.as_chunks::<AB>().0);
    let mut acc = [_mm512_setzero_ps(); 2];
    let (wq, aq) = (wb.chunks_exact(4), ab.chunks_exact(4));
    let (wt, at) = (wq.remainder(), aq.remainder());
    for (xs, ys) in wq.zip(aq) {
        for (k, s) in acc.iter_mut().enumerate() {
            let (d, p) = pair([&xs[2 * k], &xs[2 * k + 1]], [&ys[2 * k], &ys[2 * k + 1]]);
            *s = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *s);
        }
    }
    // 0..=3 blocks remain: at most one more pair, then at most one single block.
    let mut done = 0;
    if wt.len() >= 2 && at.len() >= 2 {
        let (d, p) = pair([&wt[0], &wt[1]], [&at[0], &at[1]]);
        acc[0] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[0]);
        done = 2;
    }
    let mut sum = hsum_ps(_mm512_add_ps(acc[0], acc[1]));
    if let (Some(x), Some(y)) = (wt.get(done), at.get(done)) {
        let (d, p) = single(x, y);
        sum += _mm_cvtss_f32(d) * super::avx2::hsum_epi32(p) as f32;
    }
    sum
}

/// Sum of the 16 lanes.
///
/// # Safety
/// Needs AVX-512F: calling it from code that does not enable that feature is `unsafe`,
/// and the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn hsum_ps(v: __m512) -> f32 {
    _mm512_reduce_add_ps(v)
}
