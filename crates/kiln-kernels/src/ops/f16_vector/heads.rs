//! The attention kernels for a GQA group: several query heads against the same cached
//! key/value rows. Reading and converting each f16 row once for the whole group (instead
//! of once per head) is what makes them faster than a loop over heads; each head's
//! arithmetic is unchanged, so results are bit-identical to the per-head kernels.

use half::f16;

#[cfg(doc)]
use super::{axpy_f16_rows, dot_f16_rows};
use crate::KernelTable;

/// Most heads one pass of the dot kernel keeps accumulators for (8 registers each with
/// AVX-512's 32 registers, 4 with AVX2's 16).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const DOT_HEADS: usize = 3;
/// Most heads one pass of the value kernel keeps accumulators for (4 registers each).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const AXPY_HEADS: usize = 4;
/// The same with AVX2's 16 registers (4 each, at 32 columns a pass).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const AXPY_HEADS_256: usize = 2;

/// For each query head `h` of `qs` (`heads × hd`) and key row `j` of `keys`:
/// `out[h·stride + j] = scale · dot_f16(keys[j], qs[h])`, bit-identical to
/// [`dot_f16_rows`] per head.
///
/// # Panics
/// If `hd` is 0 or doesn't divide `qs` and `keys`, or `out` is too short.
#[inline]
pub fn dot_f16_rows_heads(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    KernelTable::best().dot_f16_rows_heads(keys, qs, hd, scale, out, stride);
}

/// For each head `h` (`ys` is `heads × hd`): `ys[h] += Σ_j w[h·stride + j] · values[j]`,
/// rows in order, bit-identical to [`axpy_f16_rows`] per head.
///
/// # Panics
/// If `hd` is 0 or doesn't divide `ys` and `values`, or `w` is too short.
#[inline]
pub fn axpy_f16_rows_heads(w: &[f32], stride: usize, values: &[f16], hd: usize, ys: &mut [f32]) {
    KernelTable::best().axpy_f16_rows_heads(w, stride, values, hd, ys);
}

/// The AVX2 table's [`dot_f16_rows_heads`]: whole 4-row tiles for up to [`DOT_HEADS`]
/// heads at once (when `hd` is a multiple of 8), the other rows, and a lone head's, by
/// the F16C [`dot_f16_rows`] per head.
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn dot_f16_rows_heads_f16c(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    let rows = check_shape(
        "dot_f16_rows_heads",
        keys.len(),
        qs.len(),
        hd,
        out.len(),
        stride,
    );
    for (h0, n) in head_chunks(qs.len() / hd, DOT_HEADS) {
        let qs = &qs[h0 * hd..(h0 + n) * hd];
        let out = &mut out[h0 * stride..];
        let mut done = 0;
        if n > 1 && hd.is_multiple_of(8) {
            // SAFETY: this function's features include AVX, FMA and F16C; the shapes were
            // checked by `check_shape` and `qs` holds exactly `n` heads.
            done = unsafe {
                match n {
                    2 => super::x86::dot_f16_rows_heads_256::<2>(keys, qs, hd, scale, out, stride),
                    _ => super::x86::dot_f16_rows_heads_256::<3>(keys, qs, hd, scale, out, stride),
                }
            };
        }
        for (h, q) in qs.chunks_exact(hd).enumerate() {
            let o = &mut out[h * stride + done..h * stride + rows];
            super::x86::dot_f16_rows_f16c(&keys[done * hd..], q, scale, o);
        }
    }
}

/// The AVX2 table's [`axpy_f16_rows_heads`]: up to [`AXPY_HEADS_256`] heads at once, 8
/// lanes wide, when `hd` is a multiple of 8, else the F16C [`axpy_f16_rows`] per head.
///
/// # Safety
/// Needs AVX, FMA and F16C: calling it from code that does not enable these features is
/// `unsafe`, and the caller must ensure the CPU supports them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma,f16c")]
pub(crate) fn axpy_f16_rows_heads_f16c(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
) {
    let rows = check_shape(
        "axpy_f16_rows_heads",
        values.len(),
        ys.len(),
        hd,
        w.len(),
        stride,
    );
    if hd.is_multiple_of(8) {
        for (h0, n) in head_chunks(ys.len() / hd, AXPY_HEADS_256) {
            let ys = &mut ys[h0 * hd..(h0 + n) * hd];
            let w = &w[h0 * stride..];
            // SAFETY: this function's features include AVX, FMA and F16C; the shapes were
            // checked by `check_shape` and `ys` holds exactly `n` heads.
            unsafe {
                match n {
                    1 => super::x86::axpy_f16_rows_heads_256::<1>(w, stride, values, hd, ys),
                    _ => super::x86::axpy_f16_rows_heads_256::<2>(w, stride, values, hd, ys),
                }
            }
        }
        return;
    }
    for (h, y) in ys.chunks_exact_mut(hd).enumerate() {
        super::x86::axpy_f16_rows_f16c(&w[h * stride..h * stride + rows], values, y);
    }
}

/// The AVX-512 table's [`dot_f16_rows_heads`]: whole 8-row tiles for up to
/// [`DOT_HEADS`] heads at once (when `hd` is a multiple of 8), the other rows by the
/// F16C [`dot_f16_rows`] per head.
///
/// # Safety
/// Needs AVX-512F, AVX-512VL, AVX, FMA and F16C: calling it from code that does not enable
/// these features is `unsafe`, and the caller must ensure the CPU supports them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx,fma,f16c")]
pub(crate) fn dot_f16_rows_heads_avx512(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    let rows = check_shape(
        "dot_f16_rows_heads",
        keys.len(),
        qs.len(),
        hd,
        out.len(),
        stride,
    );
    for (h0, n) in head_chunks(qs.len() / hd, DOT_HEADS) {
        let qs = &qs[h0 * hd..(h0 + n) * hd];
        let out = &mut out[h0 * stride..];
        let mut done = 0;
        if hd.is_multiple_of(8) {
            // SAFETY: this function's features include AVX-512F/VL, FMA and F16C; the shapes
            // were checked by `check_shape` and `qs` holds exactly `n` heads.
            done = unsafe {
                match n {
                    1 => super::x86::dot_f16_rows_heads::<1>(keys, qs, hd, scale, out, stride),
                    2 => super::x86::dot_f16_rows_heads::<2>(keys, qs, hd, scale, out, stride),
                    _ => super::x86::dot_f16_rows_heads::<3>(keys, qs, hd, scale, out, stride),
                }
            };
        }
        for (h, q) in qs.chunks_exact(hd).enumerate() {
            let o = &mut out[h * stride + done..h * stride + rows];
            super::x86::dot_f16_rows_f16c(&keys[done * hd..], q, scale, o);
        }
    }
}

/// The AVX-512 table's [`axpy_f16_rows_heads`]: up to [`AXPY_HEADS`] heads at once, 16
/// lanes wide, when `hd` is a multiple of 16, else the F16C [`axpy_f16_rows`] per head.
///
/// # Safety
/// Needs AVX-512F, AVX, FMA and F16C: calling it from code that does not enable these features
/// is `unsafe`, and the caller must ensure the CPU supports them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx,fma,f16c")]
pub(crate) fn axpy_f16_rows_heads_avx512(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
) {
    let rows = check_shape(
        "axpy_f16_rows_heads",
        values.len(),
        ys.len(),
        hd,
        w.len(),
        stride,
    );
    for (h0, n) in head_chunks(ys.len() / hd, AXPY_HEADS) {
        let ys = &mut ys[h0 * hd..(h0 + n) * hd];
        let w = &w[h0 * stride..];
        if hd.is_multiple_of(16) {
            // SAFETY: this function's features include AVX-512F, FMA and F16C; the shapes were
            // checked by `check_shape` and `ys` holds exactly `n` heads.
            unsafe {
                match n {
                    1 => super::x86::axpy_f16_rows_heads::<1>(w, stride, values, hd, ys),
                    2 => super::x86::axpy_f16_rows_heads::<2>(w, stride, values, hd, ys),
                    3 => super::x86::axpy_f16_rows_heads::<3>(w, stride, values, hd, ys),
                    _ => super::x86::axpy_f16_rows_heads::<4>(w, stride, values, hd, ys),
                }
            }
            continue;
        }
        for (h, y) in ys.chunks_exact_mut(hd).enumerate() {
            super::x86::axpy_f16_rows_f16c(&w[h * stride..h * stride + rows], values, y);
        }
    }
}

/// The reference for [`dot_f16_rows_heads`]: one [`dot_f16_rows`] per head.
pub fn dot_f16_rows_heads_scalar(
    keys: &[f16],
    qs: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    let rows = check_shape(
        "dot_f16_rows_heads",
        keys.len(),
        qs.len(),
        hd,
        out.len(),
        stride,
    );
    for (h, q) in qs.chunks_exact(hd).enumerate() {
        for (j, k) in keys.chunks_exact(hd).enumerate().take(rows) {
            out[h * stride + j] = scale * super::dot_f16_scalar(k, q);
        }
    }
}

/// The reference for [`axpy_f16_rows_heads`]: one [`axpy_f16_scalar`](super::axpy_f16_scalar)
/// per head and row.
pub fn axpy_f16_rows_heads_scalar(
    w: &[f32],
    stride: usize,
    values: &[f16],
    hd: usize,
    ys: &mut [f32],
) {
    check_shape(
        "axpy_f16_rows_heads",
        values.len(),
        ys.len(),
        hd,
        w.len(),
        stride,
    );
    for (h, y) in ys.chunks_exact_mut(hd).enumerate() {
        for (j, v) in values.chunks_exact(hd).enumerate() {
            super::axpy_f16_scalar(w[h * stride + j], v, y);
        }
    }
}

/// Checks the shapes shared by both kernels and returns the number of rows: `rows_len`
/// and `heads_len` are whole `hd`-wide rows, and `per_head` (strided by `stride`) holds
/// `rows` entries for every head.
fn check_shape(
    op: &str,
    rows_len: usize,
    heads_len: usize,
    hd: usize,
    per_head_len: usize,
    stride: usize,
) -> usize {
    assert!(hd > 0, "{op}: head size 0");
    assert!(
        rows_len.is_multiple_of(hd) && heads_len.is_multiple_of(hd),
        "{op}: lengths {rows_len} and {heads_len} are not whole rows of {hd}"
    );
    let (rows, heads) = (rows_len / hd, heads_len / hd);
    if heads > 0 {
        assert!(stride >= rows, "{op}: stride {stride} below {rows} rows");
        let need = (heads - 1) * stride + rows;
        assert!(
            per_head_len >= need,
            "{op}: per-head buffer has {per_head_len} of {need}"
        );
    }
    rows
}

/// Splits `heads` into consecutive chunks of at most `most`, as even as possible (7 heads
/// with at most 3 go as 2, 2, 3): `(first head, heads)` per chunk.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn head_chunks(heads: usize, most: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunks = heads.div_ceil(most);
    (0..chunks).scan(0, move |h0, c| {
        let n = (heads - *h0) / (chunks - c);
        let item = (*h0, n);
        *h0 += n;
        Some(item)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn head_chunks_are_even_and_cover_every_head() {
        let chunks = |h, m| head_chunks(h, m).collect::<Vec<_>>();
        assert_eq!(chunks(7, 3), [(0, 2), (2, 2), (4, 3)]);
        assert_eq!(chunks(4, 3), [(0, 2), (2, 2)]);
        assert_eq!(chunks(3, 3), [(0, 3)]);
        assert_eq!(chunks(0, 3), []);
        for heads in 0..20 {
            let c = chunks(heads, 4);
            assert_eq!(c.iter().map(|x| x.1).sum::<usize>(), heads);
            assert!(c.iter().all(|x| (1..=4).contains(&x.1)));
        }
    }

    proptest! {
        /// Every table's entries (AVX-512 tiles plus per-head tails, F16C per head, the
        /// scalar loop) and the public functions against the per-head scalar references,
        /// bit for bit, over head counts 1–8 and head sizes that take the wide kernels
        /// (multiples of 8 / 16) and ones that don't.
        #[test]
        fn group_kernels_equal_per_head_references(
            heads in 1usize..9,
            hd in prop::sample::select(vec![4usize, 8, 16, 24, 32, 64, 80, 128]),
            rows in 0usize..40,
            pad in 0usize..5,
            seed in any::<u64>(),
        ) {
            let mut state = seed | 1;
            let mut next = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            };
            let keys: Vec<f16> = (0..rows * hd).map(|_| f16::from_f32(next() * 60.0)).collect();
            let qs: Vec<f32> = (0..heads * hd).map(|_| next() * 3.0).collect();
            let stride = rows + pad;
            let len = (heads - 1) * stride + rows;
            let same = |a: &[f32], b: &[f32]| {
                a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
            };
            let mut want = vec![f32::NAN; len];
            dot_f16_rows_heads_scalar(&keys, &qs, hd, 0.125, &mut want, stride);
            let mut got = vec![f32::NAN; len];
            dot_f16_rows_heads(&keys, &qs, hd, 0.125, &mut got, stride);
            prop_assert!(same(&got, &want));
            for t in crate::dispatch::available_tables() {
                let mut got = vec![f32::NAN; len];
                t.dot_f16_rows_heads(&keys, &qs, hd, 0.125, &mut got, stride);
                prop_assert!(same(&got, &want), "{}", t.isa());
            }

            let w: Vec<f32> = (0..len).map(|_| next()).collect();
            let y0: Vec<f32> = (0..heads * hd).map(|_| next()).collect();
            let mut want = y0.clone();
            axpy_f16_rows_heads_scalar(&w, stride, &keys, hd, &mut want);
            let mut got = y0.clone();
            axpy_f16_rows_heads(&w, stride, &keys, hd, &mut got);
            prop_assert!(same(&got, &want));
            for t in crate::dispatch::available_tables() {
                let mut got = y0.clone();
                t.axpy_f16_rows_heads(&w, stride, &keys, hd, &mut got);
                prop_assert!(same(&got, &want), "{}", t.isa());
            }
        }
    }
}
