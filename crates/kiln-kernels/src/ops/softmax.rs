//! Numerically stable softmax: of one row with an f64 sum (ggml's), and of attention's
//! score rows with llama.cpp's CPU attention arithmetic (an f32 sum in row order).

/// Softmax over `x` in place: `exp(x − max) / Σ`, the sum accumulated in f64 (ggml).
/// `-inf` entries (masked positions) become 0; an empty slice is left alone.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        // Everything masked (or empty): no distribution to form; return zeros.
        x.fill(0.0);
        return;
    }
    for v in x.iter_mut() {
        *v -= max;
    }
    // Sixteen (or eight) at a time, each bit for bit `f32::exp` (see `exp.rs`).
    super::exp_inplace(x);
    let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Softmax of each `n`-long row of `rows`, with an f32 running sum in row order (what
/// attention uses). Deliberately not [`softmax_inplace`] (which sums in f64): the
/// llama.cpp agreement tests were measured with this arithmetic, and with the f64 sum one
/// decisive position each for Qwen2 and Gemma 3 flips. Every table gives the same bits
/// (a NaN score stays a NaN, of whatever sign and payload).
///
/// # Panics
/// If `n` is 0 with `rows` not empty, or `rows` is not whole rows.
#[inline]
pub fn softmax_rows_f32(rows: &mut [f32], n: usize) {
    crate::KernelTable::best().softmax_rows_f32(rows, n);
}

/// Rows whose sums run side by side (see [`softmax_rows_f32_scalar`]).
const CHAINS: usize = 8;

#[track_caller]
fn check_rows(rows: &[f32], n: usize) {
    assert!(
        rows.is_empty() || (n > 0 && rows.len().is_multiple_of(n)),
        "softmax_rows_f32: {} values are not whole rows of {n}",
        rows.len()
    );
}

/// The reference for [`softmax_rows_f32`]. Per row: the maximum (NaNs ignored), `v - max`,
/// `exp` ([`exp_inplace`](super::exp_inplace), bit-identical to `f32::exp`), the sum as one
/// f32 chain in row order from `+0`, and `v · (1 / sum)`. The exponentials come first and
/// the sums of up to eight rows then run side by side, so the chains overlap instead of
/// each add waiting on the previous one behind an `exp` call (same result).
pub fn softmax_rows_f32_scalar(rows: &mut [f32], n: usize) {
    check_rows(rows, n);
    for chunk in rows.chunks_mut(CHAINS * n.max(1)) {
        for row in chunk.chunks_exact_mut(n) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for v in row.iter_mut() {
                *v -= max;
            }
            super::exp_inplace(row);
        }
        let mut sums = [0f32; CHAINS];
        add_columns(&mut sums, chunk, n, 0);
        for (row, sum) in chunk.chunks_exact_mut(n).zip(sums) {
            let inv = 1.0 / sum;
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
}

/// Adds columns `from..n` of each `n`-long row of `chunk` to its sum, in column order: the
/// sums' chains, continued.
fn add_columns(sums: &mut [f32; CHAINS], chunk: &[f32], n: usize, from: usize) {
    for j in from..n {
        for (sum, row) in sums.iter_mut().zip(chunk.chunks_exact(n)) {
            *sum += row[j];
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::CHAINS;

    /// The AVX2 and AVX-512 tables' [`softmax_rows_f32`](super::softmax_rows_f32): the
    /// reference's arithmetic eight lanes at a time. The maximum runs over 8 lanes
    /// (`vmaxps` keeps its second operand when the first is NaN, so NaNs are ignored as
    /// `f32::max` ignores them; the order of a maximum doesn't change it, and where ±0
    /// could differ `v - max` is a zero either way, whose `exp` is 1). The sums of up to
    /// eight rows go through an 8×8 transpose, so lane `r` adds row `r`'s values in row
    /// order: each sum is the same chain as the reference's.
    ///
    /// # Safety
    /// Needs AVX: calling it from code that does not enable it is `unsafe`, and the
    /// caller must ensure the CPU supports it.
    #[target_feature(enable = "avx")]
    pub(crate) fn softmax_rows_f32_avx(rows: &mut [f32], n: usize) {
        super::check_rows(rows, n);
        const L: usize = 8;
        let whole = n / L * L;
        for chunk in rows.chunks_mut(CHAINS * n.max(1)) {
            for row in chunk.chunks_exact_mut(n) {
                let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
                for c in row[..whole].chunks_exact(L) {
                    // SAFETY: `c` holds 8 floats.
                    m = _mm256_max_ps(unsafe { _mm256_loadu_ps(c.as_ptr()) }, m);
                }
                let mut lanes = [0f32; L];
                // SAFETY: `lanes` holds 8 floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
                let max = lanes
                    .iter()
                    .chain(&row[whole..])
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max);
                apply::<false>(row, whole, max);
                // The best table's `exp`: every table's gives the same bits.
                super::super::exp_inplace(row);
            }
            let k = chunk.len() / n;
            let zero = _mm256_setzero_ps();
            let mut acc = zero;
            for j in (0..whole).step_by(L) {
                // SAFETY: rows below `k` hold columns j..j + 8 (j + 8 ≤ whole ≤ n).
                let r: [__m256; L] = std::array::from_fn(|h| {
                    if h < k {
                        unsafe { _mm256_loadu_ps(chunk.as_ptr().add(h * n + j)) }
                    } else {
                        zero
                    }
                });
                // SAFETY: this function's features.
                for v in unsafe { crate::ops::f16_vector::x86::transpose8(r) } {
                    acc = _mm256_add_ps(acc, v);
                }
            }
            let mut sums = [0f32; CHAINS];
            // SAFETY: `sums` holds 8 floats.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), acc) };
            super::add_columns(&mut sums, chunk, n, whole);
            for (row, sum) in chunk.chunks_exact_mut(n).zip(sums) {
                apply::<true>(row, whole, 1.0 / sum);
            }
        }
    }

    /// `v · x` (`MUL`) or `v - x` for every `v` of `row`, 8 lanes at a time below `whole`.
    #[inline]
    #[target_feature(enable = "avx")]
    fn apply<const MUL: bool>(row: &mut [f32], whole: usize, x: f32) {
        let xv = _mm256_set1_ps(x);
        for c in row[..whole].chunks_exact_mut(8) {
            // SAFETY: `c` holds 8 floats.
            unsafe {
                let v = _mm256_loadu_ps(c.as_ptr());
                let v = if MUL {
                    _mm256_mul_ps(v, xv)
                } else {
                    _mm256_sub_ps(v, xv)
                };
                _mm256_storeu_ps(c.as_mut_ptr(), v);
            }
        }
        for v in &mut row[whole..] {
            if MUL {
                *v *= x;
            } else {
                *v -= x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::exp::tests::same;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every table against the reference, bit for bit (NaNs as NaNs): row lengths
        /// around the 8-lane tiles, up to 20 rows (a chunk of eight and partial ones),
        /// masked (`-inf`) and NaN scores.
        #[test]
        fn attention_softmax_tables_equal_the_reference(
            n in 1usize..40,
            rows in 0usize..20,
            seed in any::<u64>(),
            specials in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3), 0..4),
        ) {
            let mut state = seed | 1;
            let mut x: Vec<f32> = (0..rows * n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 20) as f32 - 8.0
                })
                .collect();
            if !x.is_empty() {
                for (i, kind) in &specials {
                    let v = [f32::NEG_INFINITY, f32::NAN, 0.0][*kind as usize];
                    let at = i.index(x.len());
                    x[at] = v;
                }
            }
            let mut want = x.clone();
            softmax_rows_f32_scalar(&mut want, n);
            for t in crate::dispatch::available_tables() {
                let mut got = x.clone();
                t.softmax_rows_f32(&mut got, n);
                prop_assert!(
                    got.iter().zip(&want).all(|(&a, &b)| same(a, b)),
                    "{}", t.isa()
                );
            }
        }
    }

    #[test]
    fn sums_to_one_and_ignores_masked() {
        let mut x = [1.0f32, 2.0, f32::NEG_INFINITY, 3.0];
        softmax_inplace(&mut x);
        assert_eq!(x[2], 0.0);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] > x[1] && x[1] > x[0]);
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        assert!((x[0] - e[0] / (e[0] + e[1] + e[2])).abs() < 1e-6);
    }

    #[test]
    fn large_inputs_do_not_overflow() {
        let mut x = [1000.0f32, 1000.0];
        softmax_inplace(&mut x);
        assert_eq!(x, [0.5, 0.5]);
    }

    #[test]
    fn fully_masked_row_is_zero() {
        let mut x = [f32::NEG_INFINITY; 3];
        softmax_inplace(&mut x);
        assert_eq!(x, [0.0; 3]);
    }
}
