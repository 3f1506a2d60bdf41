//! AVX-512 VNNI packed kernels: `vpdpbusd` of 16 interleaved weight rows against one
//! broadcast activation word, for up to [`TILE_TOKENS`] tokens per call (a const-generic
//! tile, so accumulators stay in registers).

use std::arch::x86_64::*;

use super::{check_gemm, PackedType, PACK_ROWS, TILE_TOKENS};

type Out = [[f32; PACK_ROWS]; TILE_TOKENS];

/// Dispatches a checked call to the tile kernel for exactly `n` tokens.
macro_rules! by_tokens {
    ($kernel:ident, $n:expr, $($arg:expr),*) => {
        match $n {
            1 => $kernel::<1>($($arg),*),
            2 => $kernel::<2>($($arg),*),
            3 => $kernel::<3>($($arg),*),
            4 => $kernel::<4>($($arg),*),
            5 => $kernel::<5>($($arg),*),
            6 => $kernel::<6>($($arg),*),
            7 => $kernel::<7>($($arg),*),
            8 => $kernel::<8>($($arg),*),
            _ => {}
        }
    };
}

/// AVX-512 twin of [`super::scalar::gemm_q4_1`].
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
pub(crate) unsafe fn gemm_q4_1(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut Out,
) {
    check_gemm(
        PackedType::Q4_1,
        cols,
        group,
        acts,
        act_row_bytes,
        scales,
        n_tokens,
    );
    let nb = cols / 32;
    // SAFETY: the sizes were checked above; the tile reads `nb` packed blocks and, per
    // token, `nb` activation blocks and scales.
    unsafe {
        by_tokens!(
            tile_q4_1,
            n_tokens,
            nb,
            group.as_ptr(),
            acts.as_ptr(),
            act_row_bytes,
            scales.as_ptr(),
            out
        )
    }
}

/// AVX-512 twin of [`super::scalar::gemm_q8_0`].
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
pub(crate) unsafe fn gemm_q8_0(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut Out,
) {
    check_gemm(
        PackedType::Q8_0,
        cols,
        group,
        acts,
        act_row_bytes,
        scales,
        n_tokens,
    );
    let nb = cols / 32;
    // SAFETY: as in `gemm_q4_1`.
    unsafe {
        by_tokens!(
            tile_q8_0,
            n_tokens,
            nb,
            group.as_ptr(),
            acts.as_ptr(),
            act_row_bytes,
            scales.as_ptr(),
            out
        )
    }
}

/// Eight activation words (bytes `4g..4g+4` of one block's values) against eight
/// weight vectors; two accumulator chains, added at the end (integer, so exact).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn block_dot(w: &[__m512i; 8], a: *const u8) -> __m512i {
    let word = |g: usize| {
        // SAFETY: the caller passes a block's 32 activation values at `a`.
        _mm512_set1_epi32(unsafe { a.add(4 * g).cast::<i32>().read_unaligned() })
    };
    let mut lo = _mm512_setzero_si512();
    let mut hi = _mm512_setzero_si512();
    for g in 0..4 {
        lo = _mm512_dpbusd_epi32(lo, w[g], word(g));
        hi = _mm512_dpbusd_epi32(hi, w[g + 4], word(g + 4));
    }
    _mm512_add_epi32(lo, hi)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn tile_q4_1<const T: usize>(
    nb: usize,
    group: *const u8,
    acts: *const u8,
    act_row: usize,
    scales: *const [f32; 2],
    out: &mut Out,
) {
    let mask = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY (whole block): within the checked group, activation rows and scales.
        unsafe {
            let blk = group.add(b * PackedType::Q4_1.block_bytes());
            let p = [0, 1, 2, 3].map(|i| _mm512_loadu_si512(blk.add(64 * i).cast()));
            let w = [
                _mm512_and_si512(p[0], mask),
                _mm512_and_si512(p[1], mask),
                _mm512_and_si512(p[2], mask),
                _mm512_and_si512(p[3], mask),
                _mm512_and_si512(_mm512_srli_epi16::<4>(p[0]), mask),
                _mm512_and_si512(_mm512_srli_epi16::<4>(p[1]), mask),
                _mm512_and_si512(_mm512_srli_epi16::<4>(p[2]), mask),
                _mm512_and_si512(_mm512_srli_epi16::<4>(p[3]), mask),
            ];
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(256).cast()));
            let mx = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(288).cast()));
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let isum = block_dot(&w, acts.add(t * act_row + b * 36 + 4));
                let [dy, sy] = *scales.add(t * nb + b);
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(dy));
                *acc_t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, *acc_t);
                *acc_t = _mm512_fmadd_ps(mx, _mm512_set1_ps(sy), *acc_t);
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 writable f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn tile_q8_0<const T: usize>(
    nb: usize,
    group: *const u8,
    acts: *const u8,
    act_row: usize,
    scales: *const [f32; 2],
    out: &mut Out,
) {
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY (whole block): within the checked group, activation rows and scales.
        unsafe {
            let blk = group.add(b * PackedType::Q8_0.block_bytes());
            let w = [0, 1, 2, 3, 4, 5, 6, 7].map(|g| _mm512_loadu_si512(blk.add(64 * g).cast()));
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(512).cast()));
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let isum = block_dot(&w, acts.add(t * act_row + b * 34 + 2));
                let [dy, offset] = *scales.add(t * nb + b);
                // Exact: both are integers below 2^24.
                let v = _mm512_sub_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(offset));
                *acc_t = _mm512_fmadd_ps(v, _mm512_mul_ps(dx, _mm512_set1_ps(dy)), *acc_t);
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 writable f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}
