//! AVX2 + FMA helpers.

use std::arch::x86_64::*;

use crate::quant::block::sub;

/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_256(b: &[u8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_128(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Eight little-endian f32 from 32 bytes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_ps_bytes(b: &[u8; 32]) -> __m256 {
    // SAFETY: `b` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }
}

/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_ps(x: &[f32; 8]) -> __m256 {
    // SAFETY: `x` is 8 readable f32.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn store_256(out: &mut [u8; 32], v: __m256i) {
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
}

/// The f16 stored little-endian at `b[off..off + 2]`, widened by F16C (exact; two
/// instructions instead of the portable bit manipulation, which matters when a kernel
/// converts two or four scales per 32 values).
///
/// # Safety
/// Needs AVX2 and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    let h = u16::from_le_bytes([b[off], b[off + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// The four f16 at `x[0..4]` and `y[0..4]` widened at once: `[x0, x1, y0, y1]`
/// (q4_1's `d, m` with q8_1's `d, s`).
///
/// # Safety
/// Needs AVX2 and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16x4(x: &[u8; 4], y: &[u8; 4]) -> __m128 {
    let bits = u64::from(u32::from_le_bytes(*y)) << 32 | u64::from(u32::from_le_bytes(*x));
    _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64))
}

/// `dx · dy` in lane 0, from the f16 scales of a weight and an activation block
/// (widened together by one F16C instruction).
///
/// # Safety
/// Needs AVX2 and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn scale_product(dx: &[u8; 2], dy: &[u8; 2]) -> __m128 {
    let bits = u32::from(u16::from_le_bytes(*dy)) << 16 | u32::from(u16::from_le_bytes(*dx));
    let h = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)); // [dx, dy, 0, 0]
    _mm_mul_ps(h, _mm_movehdup_ps(h))
}

/// `Σ_blocks scale · Σ lanes` for 32-element blocks, where `block(x, y)` returns a
/// block's scale (lane 0) and its integer dot as 8 × i32 partial sums. Pairs of blocks
/// feed two independent FMA chains so the loop is not bound by FMA latency.
///
/// # Safety
/// Needs AVX2 and FMA: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn sum_blocks<const WB: usize, const AB: usize>(
    w: &[u8],
    a: &[u8],
    block: impl Fn(&[u8; WB], &[u8; AB]) -> (__m128, __m256i),
) -> f32 {
    let (wb, ab) = (w.as_chunks::<WB>().0, a.as_chunks::<AB>().0);
    let mut acc = [_mm256_setzero_ps(); 2];
    let (wp, ap) = (wb.chunks_exact(2), ab.chunks_exact(2));
    let (wt, at) = (wp.remainder(), ap.remainder());
    for (xs, ys) in wp.zip(ap) {
        for (k, s) in acc.iter_mut().enumerate() {
            let (d, p) = block(&xs[k], &ys[k]);
            *s = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm256_cvtepi32_ps(p), *s);
        }
    }
    if let (Some(x), Some(y)) = (wt.first(), at.first()) {
        let (d, p) = block(x, y);
        acc[0] = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm256_cvtepi32_ps(p), acc[0]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// Sum of the 8 lanes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Largest of the 8 lanes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hmax_ps(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
}

/// Sum of the 4 lanes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32_128(v: __m128i) -> i32 {
    let s = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
}

/// Sum of the 8 lanes.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    hsum_epi32_128(_mm_add_epi32(
        _mm256_castsi256_si128(v),
        _mm256_extracti128_si256::<1>(v),
    ))
}

/// `u8 × i8` products summed in groups of four into 8 × i32. The pairwise i16 step
/// saturates only if |u·s| pairs exceed 32767, which our operand ranges never reach
/// (at most 128·127·2).
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn mul_sum_u8_i8(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// `i8 × i8` products summed in groups of four, via |x| · (y · sign x). Exact unless
/// `y` holds −128 where `x` is negative; our quantizers keep activations in ±127.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn mul_sum_i8_i8(x: __m256i, y: __m256i) -> __m256i {
    mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// The 16 bytes of a 4-bit block as 32 values: low nibbles (elements 0..16) then high
/// nibbles (elements 16..32), ggml's order.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn nibbles_32(b: &[u8; 16]) -> __m256i {
    let v = load_128(b);
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// Byte `j` is 0xff where bit `j` of `bits` is set, else 0.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bits_to_bytes(bits: u32) -> __m256i {
    // Spread byte k of `bits` over bytes 8k..8k+8, then test one bit per byte.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select)
}

/// `Σ_s mins[s] · (bsums[2s] + bsums[2s+1])`: the min term of a q4_K/q5_K super-block
/// against q8_K's 16-element sums (i16 pairs summed: at most 2·16·127, no overflow).
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn k_min_term(mins: &[u8; 8], bsums: &[u8; 32]) -> i32 {
    let (lo, hi) = (load_128(sub(bsums, 0)), load_128(sub(bsums, 16)));
    let per_sub = _mm_hadd_epi16(lo, hi);
    let m = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(*mins)));
    hsum_epi32_128(_mm_madd_epi16(m, per_sub))
}

/// `Σ_g scales[g] · bsums[g]` over the 16 groups of a q6_K super-block.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn q6k_scaled_bsums(scales: &[u8; 16], bsums: &[u8; 32]) -> i32 {
    let sc = _mm256_cvtepi8_epi16(load_128(scales));
    hsum_epi32(_mm256_madd_epi16(sc, load_256(bsums)))
}

/// Packs 4 × 8 i32 (each within i8 range) into 32 bytes in lane order.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn pack_i32_to_i8(v: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(v[0], v[1]);
    let b = _mm256_packs_epi32(v[2], v[3]);
    // The packs interleave 128-bit lanes; restore element order.
    _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(a, b),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
    )
}

/// q8_K's 16 block sums (each the sum of 16 consecutive quants, as i16 in order) of a
/// block whose 256 quants are the eight 32-byte vectors `q`: from the registers, where a
/// scalar pass over the stored bytes took about a third of the AVX2 quantizer's time.
///
/// # Safety
/// Needs AVX2: calling it from code that does not enable that feature is `unsafe`, and
/// the caller must ensure the CPU supports it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn sums_of_16(q: [__m256i; 8]) -> __m256i {
    let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    // Lane j of s[k]: quants 4j..4j+4 of vector k (lanes 0–3 are its first 16, 4–7 the rest).
    let s = q.map(|v| _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16));
    // Two rounds of `vphaddd` (per 128-bit half): [G0 G2 G4 G6 | G1 G3 G5 G7] and the next
    // four vectors' [G8 … G14 | G9 … G15].
    let a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    let b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    // Sums are within ±2,048, so the pack is exact: [G0 G2 … G14 | G1 G3 … G15].
    let p = _mm256_packs_epi32(a, b);
    let (even, odd) = (_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
    _mm256_set_m128i(_mm_unpackhi_epi16(even, odd), _mm_unpacklo_epi16(even, odd))
}
