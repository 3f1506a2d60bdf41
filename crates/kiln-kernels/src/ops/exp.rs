//! `e^x` for f32, sixteen at a time.
//!
//! The algorithm is the one glibc's `expf` uses on x86-64 with FMA (a 32-entry table of
//! 2^(i/32) and a cubic in double precision, each step a single rounding), so on such a
//! machine [`exp_f32`] and [`exp_inplace`] give exactly what `f32::exp` gives there. That
//! matters: softmax and SiLU feed logits that are checked against llama.cpp's, and
//! changing one `exp` by an ulp was enough to flip near-tied greedy tokens. Written here
//! rather than called per element because a libm call per score was a tenth of
//! attention's time.

/// 32/ln 2: `x · INV_LN2_N` is x in units of 2^(1/32).
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// 1.5·2^52: adding it rounds a double to an integer held in the low mantissa bits.
const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// The cubic for 2^(r/32) − 1, scaled: `C[0]·r³ + C[1]·r² + C[2]·r`.
const C: [f64; 3] = [
    f64::from_bits(0x3ebc_6af8_4b91_2394),
    f64::from_bits(0x3f2e_bfce_50fa_c4f3),
    f64::from_bits(0x3f96_2e42_ff0c_52d6),
];
/// Bits of 2^(i/32), i = 0..32, each rounded to the nearest double.
const EXP2_I_32: [u64; 32] = [
    0x3ff0000000000000,
    0x3ff059b0d3158574,
    0x3ff0b5586cf9890f,
    0x3ff11301d0125b51,
    0x3ff172b83c7d517b,
    0x3ff1d4873168b9aa,
    0x3ff2387a6e756238,
    0x3ff29e9df51fdee1,
    0x3ff306fe0a31b715,
    0x3ff371a7373aa9cb,
    0x3ff3dea64c123422,
    0x3ff44e086061892d,
    0x3ff4bfdad5362a27,
    0x3ff5342b569d4f82,
    0x3ff5ab07dd485429,
    0x3ff6247eb03a5585,
    0x3ff6a09e667f3bcd,
    0x3ff71f75e8ec5f74,
    0x3ff7a11473eb0187,
    0x3ff82589994cce13,
    0x3ff8ace5422aa0db,
    0x3ff93737b0cdc5e5,
    0x3ff9c49182a3f090,
    0x3ffa5503b23e255d,
    0x3ffae89f995ad3ad,
    0x3ffb7f76f2fb5e47,
    0x3ffc199bdd85529c,
    0x3ffcb720dcef9069,
    0x3ffd5818dcfba487,
    0x3ffdfc97337b9b5f,
    0x3ffea4afa2a490da,
    0x3fff50765b6e4540,
];

/// The table as the algorithm indexes it: entry i minus i·2^47, so that adding k·2^47
/// (k the whole number of 32nds) puts 2^(k/32) back together in one integer add.
const TABLE: [u64; 32] = {
    let mut t = [0u64; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = EXP2_I_32[i].wrapping_sub((i as u64) << 47);
        i += 1;
    }
    t
};

/// Inputs whose top 12 bits (sign masked off) exceed this, |x| ≥ 88 or not finite,
/// take the careful path.
const LARGE_TOP12: u32 = 0x42a;

/// `e^x`, the scalar reference.
pub fn exp_f32(x: f32) -> f32 {
    if (x.to_bits() >> 20) & 0x7ff > LARGE_TOP12 {
        if let Some(y) = exp_large(x) {
            return y;
        }
    }
    let xd = f64::from(x);
    let kd = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = kd.to_bits();
    let kd = kd - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    let s = f64::from_bits(TABLE[(ki % 32) as usize].wrapping_add(ki << 47));
    let z = r.mul_add(C[0], C[1]);
    let r2 = r * r;
    let y = r.mul_add(C[2], 1.0);
    (z.mul_add(r2, y) * s) as f32
}

/// Results for the inputs past `LARGE_TOP12`: `None` for those the main formula still
/// handles (88 ≤ x ≤ 88.72 and −103.28 ≤ x ≤ −88).
fn exp_large(x: f32) -> Option<f32> {
    if x == f32::NEG_INFINITY {
        Some(0.0)
    } else if (x.to_bits() >> 20) & 0x7ff >= 0x7f8 {
        Some(x + x) // NaN, +inf
    } else if x > f32::from_bits(0x42b1_7217) {
        Some(f32::INFINITY)
    } else if x < f32::from_bits(0xc2cf_f1b4) {
        Some(0.0)
    } else if x < f32::from_bits(0xc2ce_8ecf) {
        // Rounds to the smallest subnormal, as glibc's "may underflow" result does.
        Some(f32::from_bits(1))
    } else {
        None
    }
}

/// `x[i] = e^x[i]` for every element, bit-identical to [`exp_f32`]: the kernel of
/// [`KernelTable::best`](crate::KernelTable::best) (AVX-512F/DQ, AVX2 + FMA or scalar).
#[inline]
pub fn exp_inplace(x: &mut [f32]) {
    crate::KernelTable::best().exp_inplace(x);
}

/// The scalar table's [`exp_inplace`]: [`exp_f32`] per element.
pub(crate) fn exp_inplace_scalar(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = exp_f32(*v));
}

/// The AVX2 twin (eight at a time, as two vectors of four doubles). Without it, the
/// scalar reference's `mul_add`s become calls to a software `fma` on a CPU build
/// without FMA in its target features.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{exp_f32, C, INV_LN2_N, LARGE_TOP12, SHIFT, TABLE};

    /// [`exp_inplace`](super::exp_inplace) eight at a time.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp_inplace(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for chunk in &mut chunks {
            // SAFETY: `chunk` is 8 f32.
            unsafe {
                let v = _mm256_loadu_ps(chunk.as_ptr());
                let top = _mm256_and_si256(
                    _mm256_srli_epi32::<20>(_mm256_castps_si256(v)),
                    _mm256_set1_epi32(0x7ff),
                );
                let large = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
                    top,
                    _mm256_set1_epi32(LARGE_TOP12 as i32),
                )));
                let lo = exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                let hi = exp4(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                let mut input = [0f32; 8];
                if large != 0 {
                    input.copy_from_slice(chunk);
                }
                _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_set_m128(hi, lo));
                if large != 0 {
                    for (i, (o, &x)) in chunk.iter_mut().zip(&input).enumerate() {
                        if large & (1 << i) != 0 {
                            *o = exp_f32(x);
                        }
                    }
                }
            }
        }
        for v in chunks.into_remainder() {
            *v = exp_f32(*v);
        }
    }

    /// The main formula of [`exp_f32`] on four doubles, rounded to f32.
    ///
    /// # Safety
    /// Needs AVX2 and FMA: calling it from code that does not enable these features is
    /// `unsafe`, and the caller must ensure the CPU supports them.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp4(xd: __m256d) -> __m128 {
        let kd = _mm256_fmadd_pd(_mm256_set1_pd(INV_LN2_N), xd, _mm256_set1_pd(SHIFT));
        let ki = _mm256_castpd_si256(kd);
        let kd = _mm256_sub_pd(kd, _mm256_set1_pd(SHIFT));
        let r = _mm256_fmsub_pd(_mm256_set1_pd(INV_LN2_N), xd, kd);
        let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
        // SAFETY: every index is below 32, TABLE's length.
        let t = unsafe { _mm256_i64gather_epi64::<8>(TABLE.as_ptr().cast(), idx) };
        let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let z = _mm256_fmadd_pd(r, _mm256_set1_pd(C[0]), _mm256_set1_pd(C[1]));
        let r2 = _mm256_mul_pd(r, r);
        let y = _mm256_fmadd_pd(r, _mm256_set1_pd(C[2]), _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(z, r2, y);
        _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
    }
}

/// The AVX-512 twin (sixteen at a time, as two vectors of eight doubles).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{exp_f32, C, INV_LN2_N, LARGE_TOP12, SHIFT, TABLE};

    /// [`exp_inplace`](super::exp_inplace) sixteen at a time.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(crate) unsafe fn exp_inplace(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(16);
        for chunk in &mut chunks {
            // SAFETY: `chunk` is 16 f32.
            unsafe {
                let v = _mm512_loadu_ps(chunk.as_ptr());
                let bits = _mm512_castps_si512(v);
                let top = _mm512_and_si512(_mm512_srli_epi32::<20>(bits), _mm512_set1_epi32(0x7ff));
                let large = _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(LARGE_TOP12 as i32));
                let lo = exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(v)));
                let hi = exp8(_mm512_cvtps_pd(_mm256_castpd_ps(
                    _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)),
                )));
                let out = _mm512_insertf64x4::<1>(
                    _mm512_castps_pd(_mm512_castps256_ps512(lo)),
                    _mm256_castps_pd(hi),
                );
                let mut input = [0f32; 16];
                if large != 0 {
                    input.copy_from_slice(chunk);
                }
                _mm512_storeu_ps(chunk.as_mut_ptr(), _mm512_castpd_ps(out));
                if large != 0 {
                    for (i, (o, &x)) in chunk.iter_mut().zip(&input).enumerate() {
                        if large & (1 << i) != 0 {
                            *o = exp_f32(x);
                        }
                    }
                }
            }
        }
        for v in chunks.into_remainder() {
            *v = exp_f32(*v);
        }
    }

    /// The main formula of [`exp_f32`] on eight doubles, rounded to f32.
    ///
    /// # Safety
    /// Needs AVX-512F and AVX-512DQ: calling it from code that does not enable these
    /// features is `unsafe`, and the caller must ensure the CPU supports them.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn exp8(xd: __m512d) -> __m256 {
        let kd = _mm512_fmadd_pd(_mm512_set1_pd(INV_LN2_N), xd, _mm512_set1_pd(SHIFT));
        let ki = _mm512_castpd_si512(kd);
        let kd = _mm512_sub_pd(kd, _mm512_set1_pd(SHIFT));
        let r = _mm512_fmsub_pd(_mm512_set1_pd(INV_LN2_N), xd, kd);
        let t = table_lookup(ki);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
        let z = _mm512_fmadd_pd(r, _mm512_set1_pd(C[0]), _mm512_set1_pd(C[1]));
        let r2 = _mm512_mul_pd(r, r);
        let y = _mm512_fmadd_pd(r, _mm512_set1_pd(C[2]), _mm512_set1_pd(1.0));
        let y = _mm512_fmadd_pd(z, r2, y);
        _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
    }

    /// `TABLE[ki % 32]` per lane: two 16-entry permutes and a blend on bit 4.
    ///
    /// # Safety
    /// Needs AVX-512F: calling it from code that does not enable that feature is
    /// `unsafe`, and the caller must ensure the CPU supports it.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn table_lookup(ki: __m512i) -> __m512i {
        // SAFETY: TABLE is 32 u64, read as four vectors of eight.
        let t = unsafe { [0, 8, 16, 24].map(|i| _mm512_loadu_si512(TABLE[i..].as_ptr().cast())) };
        let low = _mm512_permutex2var_epi64(t[0], ki, t[1]);
        let high = _mm512_permutex2var_epi64(t[2], ki, t[3]);
        let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
        _mm512_mask_blend_epi64(upper, low, high)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit for bit, except that a NaN need only stay a NaN: LLVM keeps neither its sign
    /// nor its payload (it may commute `a · b`, and `x86` takes the first NaN).
    pub(in crate::ops) fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn edges_and_ranges_match_the_reference_and_std() {
        let mut xs = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            88.0,
            88.72,
            88.73,
            -87.0,
            -88.0,
            -100.0,
            -103.28,
            -103.5,
            -103.97,
            -104.0,
            -1e30,
            1e30,
        ];
        // Every 4099th bit pattern: all exponents, both signs.
        xs.extend((0..=u32::MAX).step_by(4099).map(f32::from_bits));
        for t in crate::dispatch::available_tables() {
            let mut got = xs.clone();
            t.exp_inplace(&mut got);
            for (&x, &g) in xs.iter().zip(&got) {
                let isa = t.isa();
                assert!(
                    same(g, exp_f32(x)),
                    "{isa} exp({x:e}): {g:e} vs {:e}",
                    exp_f32(x)
                );
                let want = x.exp();
                // glibc with FMA rounds exactly like this; other libms may differ by an ulp.
                let ulps = (g.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(
                    same(g, want) || ulps <= 1,
                    "{isa} exp({x:e}): {g:e} vs std {want:e}"
                );
            }
        }
        let mut got = xs.clone();
        exp_inplace(&mut got);
        assert!(xs.iter().zip(&got).all(|(&x, &g)| same(g, exp_f32(x))));
    }

    proptest! {
        /// The softmax range (≤ 0) and SiLU's, every length (16-wide body and tail),
        /// on every table this CPU runs.
        #[test]
        fn vector_equals_scalar(xs in prop::collection::vec(-120.0f32..90.0, 0..70)) {
            for t in crate::dispatch::available_tables() {
                let mut got = xs.clone();
                t.exp_inplace(&mut got);
                for (&x, &g) in xs.iter().zip(&got) {
                    prop_assert!(same(g, exp_f32(x)), "{} exp({:e})", t.isa(), x);
                }
            }
        }
    }
}
