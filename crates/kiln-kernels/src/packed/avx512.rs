//! AVX-512 VNNI packed kernels: `vpdpbusd` of 16 interleaved weight rows against one
//! broadcast activation word, for up to [`TILE_TOKENS`] tokens per call. The token count
//! and the weight type are const generics, so accumulators stay in registers and each
//! type's unpacking compiles to straight-line code.

use std::arch::x86_64::*;

use super::{check_gemm, PackedType, AVX512_REGISTER_TILE, PACK_ROWS, SUB, TILE_TOKENS};

type Out = [[f32; PACK_ROWS]; TILE_TOKENS];

/// Generates the checked entry point of one type: `$ty`'s tile kernel for exactly
/// `n_tokens` tokens.
macro_rules! entry {
    ($($name:ident: $ty:ident),* $(,)?) => {$(
        #[doc = concat!("AVX-512 twin of [`super::scalar::", stringify!($name), "`].")]
        ///
        /// # Safety
        /// The CPU must support AVX-512 F/BW/VL/VNNI and F16C.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
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
            let nb = cols / PackedType::$ty.block_elems();
            let args = |t0: usize| -> Args {
                let acts = acts.as_ptr().wrapping_add(t0 * act_row_bytes);
                (nb, group.as_ptr(), acts, act_row_bytes, scales.as_ptr().wrapping_add(t0 * nb))
            };
            // SAFETY (both arms): the sizes were checked above; a tile reads `nb` packed
            // blocks and, per token, `nb` activation blocks and scales, all of them within
            // the first `n_tokens` rows.
            if n_tokens <= AVX512_REGISTER_TILE {
                unsafe { register_tile::<TY>(args(0), n_tokens, out) };
            } else {
                let first = n_tokens.div_ceil(2);
                let (a, b) = out.split_at_mut(first);
                unsafe { register_tile::<TY>(args(0), first, a) };
                unsafe { register_tile::<TY>(args(first), n_tokens - first, b) };
            }
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

/// Blocks, packed group, activation rows, activation row bytes, scales.
type Args = (usize, *const u8, *const u8, usize, *const [f32; 2]);

/// `n` (1 to [`AVX512_REGISTER_TILE`]) tokens in one register tile.
///
/// # Safety
/// As [`tile`], for `n` tokens.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn register_tile<const TY: u8>(args: Args, n: usize, out: &mut [[f32; PACK_ROWS]]) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match n {
            1 => tile::<TY, 1>(args, out),
            2 => tile::<TY, 2>(args, out),
            3 => tile::<TY, 3>(args, out),
            4 => tile::<TY, 4>(args, out),
            5 => tile::<TY, 5>(args, out),
            6 => tile::<TY, 6>(args, out),
            7 => tile::<TY, 7>(args, out),
            8 => tile::<TY, 8>(args, out),
            _ => {}
        }
    }
}

/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI and F16C; `args` must
/// point into a group, `T` activation rows and scales that passed `check_gemm`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn tile<const TY: u8, const T: usize>(args: Args, out: &mut [[f32; PACK_ROWS]]) {
    let acc = if PackedType::from_u8(TY).is_k() {
        // SAFETY: forwarded from the caller.
        unsafe { tile_k::<TY, T>(args) }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { tile_32::<TY, T>(args) }
    };
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 writable f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// # Safety
/// The CPU must support AVX-512F and AVX-512BW; `p` must point to 64 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: the caller passes 64 readable bytes.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// The 16 f16 at `p` as f32.
///
/// # Safety
/// The CPU must support AVX-512F and F16C; `p` must point to 16 readable f16.
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: the caller passes 32 readable bytes.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
}

/// The activation word (4 quants) at `p`, in every lane.
///
/// # Safety
/// The CPU must support AVX-512F; `p` must point to 4 readable bytes.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn word(p: *const u8) -> __m512i {
    // SAFETY: the caller passes 4 readable bytes.
    _mm512_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

/// The eight weight vectors of sub-block `s` of packed block `blk`: vector `g` holds
/// elements `4g..4g+4` of each row as unsigned bytes.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW; `blk` must point to a whole packed block
/// of type `TY` and `s` be one of its sub-blocks (0 for 32-element types).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn weights<const TY: u8>(blk: *const u8, s: usize) -> [__m512i; 8] {
    let ty = PackedType::from_u8(TY);
    // SAFETY (whole body): within the packed block, whose layout `ty` gives.
    unsafe {
        if ty == PackedType::Q8_0 {
            return [0, 1, 2, 3, 4, 5, 6, 7].map(|g| load(blk.add(64 * g)));
        }
        let mask = _mm512_set1_epi8(0x0f);
        let p = [0, 1, 2, 3].map(|k| load(blk.add(256 * s + 64 * k)));
        let mut w = [
            _mm512_and_si512(p[0], mask),
            _mm512_and_si512(p[1], mask),
            _mm512_and_si512(p[2], mask),
            _mm512_and_si512(p[3], mask),
            _mm512_and_si512(_mm512_srli_epi16::<4>(p[0]), mask),
            _mm512_and_si512(_mm512_srli_epi16::<4>(p[1]), mask),
            _mm512_and_si512(_mm512_srli_epi16::<4>(p[2]), mask),
            _mm512_and_si512(_mm512_srli_epi16::<4>(p[3]), mask),
        ];
        let high = blk.add(ty.high_offset() + 64 * ty.high_bits() * s);
        match ty.high_bits() {
            1 => {
                // Bit g of each byte is bit 4 of vector g's byte: add 16 where it is set.
                let h = load(high);
                let sixteen = _mm512_set1_epi8(16);
                for (g, wg) in w.iter_mut().enumerate() {
                    let set = _mm512_test_epi8_mask(h, _mm512_set1_epi8(1 << g));
                    *wg = _mm512_mask_add_epi8(*wg, set, *wg, sixteen);
                }
            }
            2 => {
                // Bits 2t..2t+2 of vector h's bytes are bits 4–5 of vector 4h + t.
                let m = _mm512_set1_epi8(0x30);
                for hv in 0..2 {
                    let h = load(high.add(64 * hv));
                    let top = [
                        _mm512_slli_epi16::<4>(h),
                        _mm512_slli_epi16::<2>(h),
                        h,
                        _mm512_srli_epi16::<2>(h),
                    ];
                    for (t, bits) in top.into_iter().enumerate() {
                        let wg = &mut w[4 * hv + t];
                        *wg = _mm512_or_si512(*wg, _mm512_and_si512(bits, m));
                    }
                }
            }
            _ => {}
        }
        w
    }
}

/// Σ over vectors `g0..g0+N` of `w[g]` · activation word `g` at `a` (exact int32), in two
/// chains added at the end.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX-512VL and AVX-512VNNI; `a` must point to
/// `4·N` readable activation quants.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dot<const N: usize>(w: &[__m512i], a: *const u8) -> __m512i {
    let mut lo = _mm512_setzero_si512();
    let mut hi = _mm512_setzero_si512();
    for g in 0..N / 2 {
        // SAFETY: the caller passes 4·N activation quants at `a`.
        unsafe {
            lo = _mm512_dpbusd_epi32(lo, w[g], word(a.add(4 * g)));
            hi = _mm512_dpbusd_epi32(hi, w[g + N / 2], word(a.add(4 * (g + N / 2))));
        }
    }
    _mm512_add_epi32(lo, hi)
}

/// Σ over vectors `g < N` of `w[g]` · activation word `g` at `a(t)` for every token `t`
/// (exact int32), issued vector by vector across the tokens: the `T` chains are
/// independent from the first instruction, so the core need not look past a whole
/// token's chain to find work.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX-512VL and AVX-512VNNI; `w` must hold
/// `N` vectors and `a(t)` point to `4·N` readable activation quants for every `t < T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dots_by_token<const T: usize, const N: usize>(
    w: &[__m512i],
    a: impl Fn(usize) -> *const u8,
) -> [__m512i; T] {
    let mut sums = [_mm512_setzero_si512(); T];
    if T < 4 {
        // Too few tokens to hide one N-deep chain each (decode): `dot` splits each in two.
        for (t, sum) in sums.iter_mut().enumerate() {
            // SAFETY: the caller passes 4·N activation quants at `a(t)`.
            *sum = unsafe { dot::<N>(w, a(t)) };
        }
        return sums;
    }
    for (g, wg) in w[..N].iter().enumerate() {
        for (t, sum) in sums.iter_mut().enumerate() {
            // SAFETY: the caller passes 4·N activation quants at `a(t)`.
            *sum = _mm512_dpbusd_epi32(*sum, *wg, unsafe { word(a(t).add(4 * g)) });
        }
    }
    sums
}

/// `iacc[t] += sums[t] · scale` lane by lane (exact: the products fit int32).
#[inline]
#[target_feature(enable = "avx512f")]
fn scale_into<const T: usize>(iacc: &mut [__m512i; T], sums: [__m512i; T], scale: __m512i) {
    for (ia, sum) in iacc.iter_mut().zip(sums) {
        *ia = _mm512_add_epi32(*ia, _mm512_mullo_epi32(sum, scale));
    }
}

/// 32-element blocks (q4_0, q4_1, q5_0, q8_0): one integer dot per block and token,
/// then the block's float step.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI and F16C; `args` must
/// point into a group, `T` activation rows and scales that passed `check_gemm`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn tile_32<const TY: u8, const T: usize>(args: Args) -> [__m512; T] {
    let ty = PackedType::from_u8(TY);
    let (nb, group, acts, act_row, scales) = args;
    let act_block = ty.weight().act_type().block_bytes();
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY (whole block): within the checked group, activation rows and scales.
        unsafe {
            let blk = group.add(b * ty.block_bytes());
            if T > 1 {
                super::prefetch_block_ahead(ty, blk);
            }
            let w = weights::<TY>(blk, 0);
            let dx = f16x16(blk.add(ty.d_offset()));
            let mx = if ty == PackedType::Q4_1 {
                f16x16(blk.add(ty.m_offset()))
            } else {
                _mm512_setzero_ps()
            };
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let a = acts.add(t * act_row + b * act_block + ty.act_qs_offset());
                let isum = _mm512_cvtepi32_ps(dot::<8>(&w, a));
                let [dy, aux] = *scales.add(t * nb + b);
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(dy));
                if ty == PackedType::Q4_1 {
                    *acc_t = _mm512_fmadd_ps(isum, d, *acc_t);
                    *acc_t = _mm512_fmadd_ps(mx, _mm512_set1_ps(aux), *acc_t);
                } else {
                    // Exact: both are integers below 2^24.
                    let v = _mm512_sub_ps(isum, _mm512_set1_ps(aux));
                    *acc_t = _mm512_fmadd_ps(v, d, *acc_t);
                }
            }
        }
    }
    acc
}

/// k-quant super-blocks: per token, the sub-block sums times their row scales summed as
/// exact int32 over the super-block (with the min or zero-point term from q8_K's block
/// sums through `vpdpwssd`), then one or two float steps.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX-512VL, AVX-512VNNI and F16C; `args` must
/// point into a group, `T` activation rows and scales that passed `check_gemm`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn tile_k<const TY: u8, const T: usize>(args: Args) -> [__m512; T] {
    let ty = PackedType::from_u8(TY);
    let (nb, group, acts, act_row, scales) = args;
    let act_block = ty.weight().act_type().block_bytes();
    let meta = ty.meta_offset();
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY (whole block): within the checked group, activation rows and scales.
        unsafe {
            let blk = group.add(b * ty.block_bytes());
            let act = |t: usize| acts.add(t * act_row + b * act_block);
            let bsums = |t: usize, s: usize| word(act(t).add(ty.act_bsums_offset() + 4 * s));
            let mut iacc = [_mm512_setzero_si512(); T];
            if ty == PackedType::Q6_K {
                // −32·Σ_k sc_k·bsum_k: each sub-block's scale pair against its two sums.
                for s in 0..8 {
                    let pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                        blk.add(meta + 2 * PACK_ROWS * s).cast(),
                    ));
                    for (t, ia) in iacc.iter_mut().enumerate() {
                        *ia = _mm512_dpwssd_epi32(*ia, pair, bsums(t, s));
                    }
                }
                for ia in &mut iacc {
                    *ia = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<5>(*ia));
                }
            } else {
                // Σ_s m_s·B_s, two sub-blocks per `vpdpwssd`: lane r holds (m_2k, m_2k+1) of
                // its row against the token's (B_2k, B_2k+1), where B_s is sub-block s's sum
                // of 32 quants, which `prepare_act_row` put in place of q8_K's block sums
                // (|B_s| ≤ 32·127, an exact int16).
                let mins = |s: usize| {
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(
                        blk.add(ty.mins_offset() + PACK_ROWS * s).cast(),
                    ))
                };
                let m: [__m512i; 4] = std::array::from_fn(|k| {
                    _mm512_or_si512(mins(2 * k), _mm512_slli_epi32::<16>(mins(2 * k + 1)))
                });
                let dmin = f16x16(blk.add(ty.m_offset()));
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let mut ma = _mm512_setzero_si512();
                    for (k, mk) in m.iter().enumerate() {
                        ma = _mm512_dpwssd_epi32(ma, *mk, bsums(t, k));
                    }
                    let [dy, _] = *scales.add(t * nb + b);
                    let dm = _mm512_mul_ps(dmin, _mm512_set1_ps(dy));
                    *acc_t = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ma), dm, *acc_t);
                }
            }
            for s in 0..8 {
                super::prefetch_ahead(ty, blk, s);
                let w = weights::<TY>(blk, s);
                let qs = |t: usize| act(t).add(ty.act_qs_offset() + SUB * s);
                if ty == PackedType::Q6_K {
                    let pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                        blk.add(meta + 2 * PACK_ROWS * s).cast(),
                    ));
                    let sc_lo = _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(pair));
                    let sc_hi = _mm512_srai_epi32::<16>(pair);
                    let lo = dots_by_token::<T, 4>(&w[..4], qs);
                    scale_into(&mut iacc, lo, sc_lo);
                    let hi = dots_by_token::<T, 4>(&w[4..], |t| qs(t).add(16));
                    scale_into(&mut iacc, hi, sc_hi);
                } else {
                    let sc =
                        _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(meta + PACK_ROWS * s).cast()));
                    let sums = dots_by_token::<T, 8>(&w, qs);
                    scale_into(&mut iacc, sums, sc);
                }
            }
            let d = f16x16(blk.add(ty.d_offset()));
            for (t, (acc_t, ia)) in acc.iter_mut().zip(iacc).enumerate() {
                let [dy, _] = *scales.add(t * nb + b);
                let dd = _mm512_mul_ps(d, _mm512_set1_ps(dy));
                *acc_t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), dd, *acc_t);
            }
        }
    }
    acc
}
