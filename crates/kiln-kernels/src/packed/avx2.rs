//! AVX2 (+FMA, F16C) packed kernels over the same layout as the AVX-512 ones: each
//! 64-byte vector is two 8-row halves, run one after the other. With no `vpdpbusd`,
//! `vpmaddubsw` multiplies weight and activation bytes into int16 pairs, which add up in
//! int16 as far as they can't overflow and then widen through `vpmaddwd` — by ones, or by
//! the k-quants' row scales, which applies those for free. A call's tokens (up to
//! [`TILE_TOKENS`]) form one tile per half.

use std::arch::x86_64::*;

use super::{check_gemm, PackedType, PACK_ROWS, SUB, TILE_TOKENS};

type Out = [[f32; PACK_ROWS]; TILE_TOKENS];

/// Rows per half.
const HALF: usize = PACK_ROWS / 2;

/// Generates the checked entry point of one type.
macro_rules! entry {
    ($($name:ident: $ty:ident),* $(,)?) => {$(
        #[doc = concat!("AVX2 twin of [`super::scalar::", stringify!($name), "`].")]
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(
            cols: usize,
            group: &[u8],
            acts: &[u8],
            act_row_bytes: usize,
            scales: &[[f32; 2]],
            n_tokens: usize,
            out: &mut Out,
        ) {
            const TY: u8 = PackedType::$ty as u8;
            check_gemm(PackedType::$ty, cols, group, acts, act_row_bytes, scales, n_tokens);
            // SAFETY: the sizes were checked above.
            unsafe { gemm::<TY>(cols, group, acts, act_row_bytes, scales, n_tokens, out) }
        }
    )*};
}

entry!(
    gemm_q4_0: Q4_0,
    gemm_q4_1: Q4_1,
    gemm_q5_0: Q5_0,
    gemm_q8_0: Q8_0,
    gemm_q4_k: Q4_K,
    gemm_q5_k: Q5_K,
    gemm_q6_k: Q6_K,
);

/// Blocks, packed group, activation rows, activation row bytes, scales, and the half
/// (byte offset of its rows in a 64-byte vector).
type Args = (usize, *const u8, *const u8, usize, *const [f32; 2], usize);

/// # Safety
/// The CPU must support AVX2, FMA and F16C; the arguments must have passed `check_gemm`
/// for `TY`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm<const TY: u8>(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut Out,
) {
    let nb = cols / PackedType::from_u8(TY).block_elems();
    let args = |half: usize| -> Args {
        let (g, a, s) = (group.as_ptr(), acts.as_ptr(), scales.as_ptr());
        (nb, g, a, act_row, s, half)
    };
    if n_tokens == 1 {
        // Batch-1 decode streams the weights from memory: both halves of each block in
        // one pass, so each cache line is read once and wholly.
        // SAFETY: forwarded from the caller.
        unsafe { tile::<TY, 1, 2>(args(0), &mut out[..1]) };
        return;
    }
    // Each half takes the whole tile of up to `TILE_TOKENS` tokens, so its weights are
    // unpacked once per call. The tokens' int32 sums don't fit in 16 registers beside
    // the eight weight vectors, but the spilled ones are touched once per sub-block,
    // while each unpacking serves more tokens: 8 tokens against 4 made q6_K 7–16% faster
    // and q4_K 2–6% (session 28), 16 against 8 q4_K 5–9% more (session 33; both in
    // `docs/BENCHMARKS.md`).
    for half in 0..2 {
        let args = args(half);
        let dst = &mut out[..n_tokens];
        // SAFETY: forwarded from the caller; `check_gemm` bounds `n_tokens` by
        // `TILE_TOKENS`.
        unsafe {
            match n_tokens {
                2 => tile::<TY, 2, 1>(args, dst),
                3 => tile::<TY, 3, 1>(args, dst),
                4 => tile::<TY, 4, 1>(args, dst),
                5 => tile::<TY, 5, 1>(args, dst),
                6 => tile::<TY, 6, 1>(args, dst),
                7 => tile::<TY, 7, 1>(args, dst),
                8 => tile::<TY, 8, 1>(args, dst),
                9 => tile::<TY, 9, 1>(args, dst),
                10 => tile::<TY, 10, 1>(args, dst),
                11 => tile::<TY, 11, 1>(args, dst),
                12 => tile::<TY, 12, 1>(args, dst),
                13 => tile::<TY, 13, 1>(args, dst),
                14 => tile::<TY, 14, 1>(args, dst),
                15 => tile::<TY, 15, 1>(args, dst),
                16 => tile::<TY, 16, 1>(args, dst),
                // One token took the both-halves path above; none is nothing to do.
                _ => {}
            }
        }
    }
}

/// `T` tokens over `H` halves (1: the half `args.5`; 2: both, in one pass over the
/// blocks).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `args` must point into a group, `T`
/// activation rows and scales that passed `check_gemm`, and `args.5 + H` be at most 2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const TY: u8, const T: usize, const H: usize>(
    args: Args,
    out: &mut [[f32; PACK_ROWS]],
) {
    let acc = if PackedType::from_u8(TY).is_k() {
        // SAFETY: forwarded from the caller.
        unsafe { tile_k::<TY, T, H>(args) }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { tile_32::<TY, T, H>(args) }
    };
    for (h, acc_h) in acc.iter().enumerate() {
        for (o, a) in out.iter_mut().zip(acc_h) {
            // SAFETY: `o` has 16 f32, this half's 8 start at `HALF * half`.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(HALF * (args.5 + h)), *a) };
        }
    }
}

/// This half's 32 bytes of the 64-byte vector at `p`.
///
/// # Safety
/// The CPU must support AVX2; `p` must point to 64 readable bytes and `half` be 0 or 1.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load(p: *const u8, half: usize) -> __m256i {
    // SAFETY: the caller passes a 64-byte vector.
    unsafe { _mm256_loadu_si256(p.add(32 * half).cast()) }
}

/// This half's 8 of the 16 f16 at `p`, as f32.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `p` must point to 16 readable f16 and `half` be 0
/// or 1.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16x8(p: *const u8, half: usize) -> __m256 {
    // SAFETY: the caller passes 16 f16.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast())) }
}

/// This half's 8 of the 16 bytes at `p`, zero-extended to int32.
///
/// # Safety
/// The CPU must support AVX2; `p` must point to 16 readable bytes and `half` be 0 or 1.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn u8x8(p: *const u8, half: usize) -> __m256i {
    // SAFETY: the caller passes 16 bytes.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8 * half).cast())) }
}

/// The activation word (4 quants) at `p`, in every lane.
///
/// # Safety
/// The CPU must support AVX2; `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn word(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 4 readable bytes.
    _mm256_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

/// `v` (small non-negative int32 lanes) in both int16 halves of each lane.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn both_halves(v: __m256i) -> __m256i {
    _mm256_or_si256(v, _mm256_slli_epi32::<16>(v))
}

/// The eight weight vectors (this half) of sub-block `s`, as in the AVX-512 kernel.
///
/// # Safety
/// The CPU must support AVX2; `blk` must point to a whole packed block of type `TY`, `s`
/// be one of its sub-blocks (0 for 32-element types) and `half` be 0 or 1.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn weights<const TY: u8>(blk: *const u8, s: usize, half: usize) -> [__m256i; 8] {
    let ty = PackedType::from_u8(TY);
    // SAFETY (whole body): within the packed block, whose layout `ty` gives.
    unsafe {
        if ty == PackedType::Q8_0 {
            return [0, 1, 2, 3, 4, 5, 6, 7].map(|g| load(blk.add(64 * g), half));
        }
        let mask = _mm256_set1_epi8(0x0f);
        let p = [0, 1, 2, 3].map(|k| load(blk.add(256 * s + 64 * k), half));
        let mut w = [
            _mm256_and_si256(p[0], mask),
            _mm256_and_si256(p[1], mask),
            _mm256_and_si256(p[2], mask),
            _mm256_and_si256(p[3], mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(p[0]), mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(p[1]), mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(p[2]), mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(p[3]), mask),
        ];
        let high = blk.add(ty.high_offset() + 64 * ty.high_bits() * s);
        match ty.high_bits() {
            1 => {
                // Bit g of each byte, moved to bit 4 (16-bit shifts stay inside a byte
                // for the bit kept by the mask).
                let h = load(high, half);
                let top = [
                    _mm256_slli_epi16::<4>(h),
                    _mm256_slli_epi16::<3>(h),
                    _mm256_slli_epi16::<2>(h),
                    _mm256_slli_epi16::<1>(h),
                    h,
                    _mm256_srli_epi16::<1>(h),
                    _mm256_srli_epi16::<2>(h),
                    _mm256_srli_epi16::<3>(h),
                ];
                let m = _mm256_set1_epi8(0x10);
                for (wg, bits) in w.iter_mut().zip(top) {
                    *wg = _mm256_or_si256(*wg, _mm256_and_si256(bits, m));
                }
            }
            2 => {
                let m = _mm256_set1_epi8(0x30);
                for hv in 0..2 {
                    let h = load(high.add(64 * hv), half);
                    let top = [
                        _mm256_slli_epi16::<4>(h),
                        _mm256_slli_epi16::<2>(h),
                        h,
                        _mm256_srli_epi16::<2>(h),
                    ];
                    for (t, bits) in top.into_iter().enumerate() {
                        let wg = &mut w[4 * hv + t];
                        *wg = _mm256_or_si256(*wg, _mm256_and_si256(bits, m));
                    }
                }
            }
            _ => {}
        }
        w
    }
}

/// Weight vectors whose `vpmaddubsw` products can be summed in int16 without overflow
/// (activations are within ±127): 8 for 4-bit quants, 4 for 5-bit, 2 for 6-bit; q8_0
/// (signed, one vector at a time) is handled apart.
const fn i16_run(ty: PackedType) -> usize {
    match ty.high_bits() {
        0 => 8,
        1 => 4,
        _ => 2,
    }
}

/// Σ over vectors `g0..g0+n` of `w[g]` · activation word `g` at `a`, widened to int32
/// through `vpmaddwd` by `mult` (int16 pairs: ones, or a scale in both halves).
///
/// # Safety
/// The CPU must support AVX2; `a` must point to `4·w.len()` readable activation quants.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dot<const TY: u8>(w: &[__m256i], a: *const u8, mult: __m256i) -> __m256i {
    let ty = PackedType::from_u8(TY);
    let mut sum = _mm256_setzero_si256();
    // SAFETY (whole body): the caller passes 4·w.len() activation quants at `a`.
    unsafe {
        if ty == PackedType::Q8_0 {
            // Back to signed weights; |w|·(a signed like w) products stay within int16.
            let bias = _mm256_set1_epi8(-128);
            for (g, &wg) in w.iter().enumerate() {
                let ws = _mm256_xor_si256(wg, bias);
                let p = _mm256_maddubs_epi16(
                    _mm256_sign_epi8(ws, ws),
                    _mm256_sign_epi8(word(a.add(4 * g)), ws),
                );
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, mult));
            }
            return sum;
        }
        for (r, run) in w.chunks_exact(i16_run(ty).min(w.len())).enumerate() {
            let base = a.add(4 * r * run.len());
            let mut p = _mm256_setzero_si256();
            for (g, &wg) in run.iter().enumerate() {
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wg, word(base.add(4 * g))));
            }
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, mult));
        }
    }
    sum
}

/// 32-element blocks: one integer dot per block and token, then the block's float step
/// (as in the AVX-512 kernel; q8_0's dot is already signed, which equals the scalar's
/// unsigned dot minus its offset exactly).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `args` must point into a group, `T`
/// activation rows and scales that passed `check_gemm`, and `args.5 + H` be at most 2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_32<const TY: u8, const T: usize, const H: usize>(args: Args) -> [[__m256; T]; H] {
    let ty = PackedType::from_u8(TY);
    let (nb, group, acts, act_row, scales, first) = args;
    let act_block = ty.weight().act_type().block_bytes();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); T]; H];
    for b in 0..nb {
        for (h, acc) in acc.iter_mut().enumerate() {
            let half = first + h;
            // SAFETY (whole block): within the checked group, activation rows and scales.
            unsafe {
                let blk = group.add(b * ty.block_bytes());
                if half == 0 && T > 1 {
                    super::prefetch_block_ahead(ty, blk);
                }
                let w = weights::<TY>(blk, 0, half);
                let dx = f16x8(blk.add(ty.d_offset()), half);
                let mx = if ty == PackedType::Q4_1 {
                    f16x8(blk.add(ty.m_offset()), half)
                } else {
                    _mm256_setzero_ps()
                };
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let a = acts.add(t * act_row + b * act_block + ty.act_qs_offset());
                    let isum = _mm256_cvtepi32_ps(dot::<TY>(&w, a, ones));
                    let [dy, aux] = *scales.add(t * nb + b);
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(dy));
                    match ty {
                        PackedType::Q4_1 => {
                            *acc_t = _mm256_fmadd_ps(isum, d, *acc_t);
                            *acc_t = _mm256_fmadd_ps(mx, _mm256_set1_ps(aux), *acc_t);
                        }
                        PackedType::Q8_0 => *acc_t = _mm256_fmadd_ps(isum, d, *acc_t),
                        _ => {
                            let v = _mm256_sub_ps(isum, _mm256_set1_ps(aux));
                            *acc_t = _mm256_fmadd_ps(v, d, *acc_t);
                        }
                    }
                }
            }
        }
    }
    acc
}

/// k-quant super-blocks, as in the AVX-512 kernel; `vpmaddwd` by the row scales replaces
/// its `vpmulld`, and by the mins or scale pairs its `vpdpwssd`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `args` must point into a group, `T`
/// activation rows and scales that passed `check_gemm`, and `args.5 + H` be at most 2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_k<const TY: u8, const T: usize, const H: usize>(args: Args) -> [[__m256; T]; H] {
    let ty = PackedType::from_u8(TY);
    let (nb, group, acts, act_row, scales, first) = args;
    let act_block = ty.weight().act_type().block_bytes();
    let meta = ty.meta_offset();
    let mut acc = [[_mm256_setzero_ps(); T]; H];
    for b in 0..nb {
        for (h, acc) in acc.iter_mut().enumerate() {
            let half = first + h;
            // SAFETY (whole block): within the checked group, activation rows and scales.
            unsafe {
                let blk = group.add(b * ty.block_bytes());
                let act = |t: usize| acts.add(t * act_row + b * act_block);
                let bsums = |t: usize, s: usize| word(act(t).add(ty.act_bsums_offset() + 4 * s));
                // Q6_K: this half's scale pairs of sub-block s, as int16.
                let pairs = |s: usize| {
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(
                        blk.add(meta + 2 * PACK_ROWS * s + 2 * HALF * half).cast(),
                    ))
                };
                let mut iacc = [_mm256_setzero_si256(); T];
                if ty == PackedType::Q6_K {
                    for s in 0..8 {
                        let pair = pairs(s);
                        for (t, ia) in iacc.iter_mut().enumerate() {
                            *ia = _mm256_add_epi32(*ia, _mm256_madd_epi16(pair, bsums(t, s)));
                        }
                    }
                    for ia in &mut iacc {
                        *ia = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(*ia));
                    }
                } else {
                    // Σ_s m_s·B_s, two sub-blocks per `vpmaddwd` (lane r: row r's (m_2k,
                    // m_2k+1) against the token's prepared (B_2k, B_2k+1)), as the AVX-512
                    // kernel does with `vpdpwssd`.
                    let mins = |s: usize| u8x8(blk.add(ty.mins_offset() + PACK_ROWS * s), half);
                    let m: [__m256i; 4] = std::array::from_fn(|k| {
                        _mm256_or_si256(mins(2 * k), _mm256_slli_epi32::<16>(mins(2 * k + 1)))
                    });
                    let dmin = f16x8(blk.add(ty.m_offset()), half);
                    for (t, acc_t) in acc.iter_mut().enumerate() {
                        let mut ma = _mm256_madd_epi16(m[0], bsums(t, 0));
                        for (k, mk) in m.iter().enumerate().skip(1) {
                            ma = _mm256_add_epi32(ma, _mm256_madd_epi16(*mk, bsums(t, k)));
                        }
                        let [dy, _] = *scales.add(t * nb + b);
                        let dm = _mm256_mul_ps(dmin, _mm256_set1_ps(dy));
                        *acc_t = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ma), dm, *acc_t);
                    }
                }
                for s in 0..8 {
                    if half == 0 {
                        // Half 0's pass fetches ahead: at batch 1 both halves share it; in
                        // a tile, half 1's pass finds the block in cache.
                        super::prefetch_ahead(ty, blk, s);
                    }
                    let w = weights::<TY>(blk, s, half);
                    let qs = |t: usize| act(t).add(ty.act_qs_offset() + SUB * s);
                    if ty == PackedType::Q6_K {
                        let pair = pairs(s);
                        let sc_lo =
                            _mm256_shufflehi_epi16::<0xa0>(_mm256_shufflelo_epi16::<0xa0>(pair));
                        let sc_hi =
                            _mm256_shufflehi_epi16::<0xf5>(_mm256_shufflelo_epi16::<0xf5>(pair));
                        for (t, ia) in iacc.iter_mut().enumerate() {
                            *ia = _mm256_add_epi32(*ia, dot::<TY>(&w[..4], qs(t), sc_lo));
                            *ia = _mm256_add_epi32(*ia, dot::<TY>(&w[4..], qs(t).add(16), sc_hi));
                        }
                    } else {
                        let sc = both_halves(u8x8(blk.add(meta + PACK_ROWS * s), half));
                        for (t, ia) in iacc.iter_mut().enumerate() {
                            *ia = _mm256_add_epi32(*ia, dot::<TY>(&w, qs(t), sc));
                        }
                    }
                }
                let d = f16x8(blk.add(ty.d_offset()), half);
                for (t, (acc_t, ia)) in acc.iter_mut().zip(iacc).enumerate() {
                    let [dy, _] = *scales.add(t * nb + b);
                    let dd = _mm256_mul_ps(d, _mm256_set1_ps(dy));
                    *acc_t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), dd, *acc_t);
                }
            }
        }
    }
    acc
}
