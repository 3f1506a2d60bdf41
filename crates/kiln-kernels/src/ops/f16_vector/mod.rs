//! f16 × f32 vector kernels for attention over an f16 KV cache.
//!
//! Every kernel here computes, bit for bit, what its scalar reference does: eight dot
//! lanes, each one chain of fused multiply-adds (`mul_add`), summed in a fixed order, and
//! one fused multiply-add per value element, converting eight halves per instruction
//! (F16C). Attention's time is these multiply-adds, so fusing them halves its
//! floating-point work; measured against llama.cpp, the fused form left every agreement
//! figure and perplexity unchanged to the printed digit (`docs/BENCHMARKS.md`, session
//! 27). The dot stays eight lanes: a 16-lane dot was measured to cost agreement with
//! llama.cpp at decisive positions (Gemma 3: 523/528 instead of 528/528), so only
//! `axpy_f16_rows`, which has no reduction, goes 16 lanes wide on AVX-512, still
//! bit-exact; on both tables its sums stay in registers across rows. The forms for a whole
//! GQA group against the same rows are in `heads.rs`.
//!
//! The public functions run [`KernelTable::best`]'s entries: `scalar` here, the F16C and
//! AVX-512 ones in `x86.rs` and `heads.rs`. (On an x86 CPU too old for the AVX2 table,
//! the scalar `mul_add` is a library call: correct, and slow like the rest of that table.)

use half::f16;

use super::check_len;
use crate::KernelTable;

mod heads;

pub use heads::{
    axpy_f16_rows_heads, axpy_f16_rows_heads_scalar, dot_f16_rows_heads, dot_f16_rows_heads_scalar,
};
#[cfg(target_arch = "x86_64")]
pub(crate) use heads::{
    axpy_f16_rows_heads_avx512, axpy_f16_rows_heads_f16c, dot_f16_rows_heads_avx512,
    dot_f16_rows_heads_f16c,
};

const LANES: usize = 8;

/// `Σ k[i]·q[i]` with `k` in f16.
#[inline]
pub fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
    KernelTable::best().dot_f16(k, q)
}

/// `y[i] += alpha · v[i]` with `v` in f16.
#[inline]
pub fn axpy_f16(alpha: f32, v: &[f16], y: &mut [f32]) {
    KernelTable::best().axpy_f16(alpha, v, y);
}

/// `out[j] = scale · dot_f16(keys[j], q)` for each `q.len()`-wide row of `keys` (one
/// block of cached keys against one query head): one table lookup per block.
#[inline]
pub fn dot_f16_rows(keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]) {
    KernelTable::best().dot_f16_rows(keys, q, scale, out);
}

/// `y += w[j] · values[j]` for each `y.len()`-wide row of `values`, in row order (so
/// the result is bit-identical to one [`axpy_f16`] per row).
#[inline]
pub fn axpy_f16_rows(w: &[f32], values: &[f16], y: &mut [f32]) {
    KernelTable::best().axpy_f16_rows(w, values, y);
}

/// Rounds every element to the nearest f16 (ties to even) and back, as llama.cpp does to
/// attention queries and softmax weights; eight at a time with F16C.
#[inline]
pub fn round_f16_inplace(x: &mut [f32]) {
    KernelTable::best().round_f16_inplace(x);
}

/// The reference for [`round_f16_inplace`].
pub fn round_f16_scalar(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// The reference for [`dot_f16`].
pub fn dot_f16_scalar(k: &[f16], q: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (kc, qc) = (k.chunks_exact(LANES), q.chunks_exact(LANES));
    let (kt, qt) = (kc.remainder(), qc.remainder());
    for (x, y) in qc.zip(kc) {
        for l in 0..LANES {
            acc[l] = x[l].mul_add(y[l].to_f32(), acc[l]);
        }
    }
    let tail: f32 = qt.iter().zip(kt).map(|(x, y)| x * y.to_f32()).sum();
    acc.iter().sum::<f32>() + tail
}

/// The reference for [`axpy_f16`].
pub fn axpy_f16_scalar(alpha: f32, v: &[f16], y: &mut [f32]) {
    for (o, v) in y.iter_mut().zip(v) {
        *o = alpha.mul_add(v.to_f32(), *o);
    }
}

/// [`dot_f16`]'s argument check.
#[inline]
#[track_caller]
fn check_dot(k: &[f16], q: &[f32]) {
    check_len("dot_f16", "q", k.len(), q.len());
}

/// [`axpy_f16`]'s argument check.
#[inline]
#[track_caller]
fn check_axpy(v: &[f16], y: &[f32]) {
    check_len("axpy_f16", "y", v.len(), y.len());
}

/// [`dot_f16_rows`]'s argument check; returns the row width.
#[inline]
#[track_caller]
fn check_dot_rows(keys: &[f16], q: &[f32], out: &[f32]) -> usize {
    let hd = q.len().max(1);
    check_len("dot_f16_rows", "out", keys.len() / hd, out.len());
    hd
}

/// [`axpy_f16_rows`]'s argument check; returns the row width.
#[inline]
#[track_caller]
fn check_axpy_rows(w: &[f32], values: &[f16], y: &[f32]) -> usize {
    let hd = y.len().max(1);
    check_len("axpy_f16_rows", "w", values.len() / hd, w.len());
    hd
}

/// The scalar table's entries: each op's argument check, then the reference.
pub(crate) mod scalar {
    use half::f16;

    use super::{axpy_f16_scalar, dot_f16_scalar};

    /// [`dot_f16`](super::dot_f16) by [`dot_f16_scalar`].
    pub(crate) fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
        super::check_dot(k, q);
        dot_f16_scalar(k, q)
    }

    /// [`axpy_f16`](super::axpy_f16) by [`axpy_f16_scalar`].
    pub(crate) fn axpy_f16(alpha: f32, v: &[f16], y: &mut [f32]) {
        super::check_axpy(v, y);
        axpy_f16_scalar(alpha, v, y);
    }

    /// [`dot_f16_rows`](super::dot_f16_rows): [`dot_f16_scalar`] per row.
    pub(crate) fn dot_f16_rows(keys: &[f16], q: &[f32], scale: f32, out: &mut [f32]) {
        let hd = super::check_dot_rows(keys, q, out);
        for (o, k) in out.iter_mut().zip(keys.chunks_exact(hd)) {
            *o = scale * dot_f16_scalar(k, q);
        }
    }

    /// [`axpy_f16_rows`](super::axpy_f16_rows): [`axpy_f16_scalar`] per row.
    pub(crate) fn axpy_f16_rows(w: &[f32], values: &[f16], y: &mut [f32]) {
        let hd = super::check_axpy_rows(w, values, y);
        for (&a, v) in w.iter().zip(values.chunks_exact(hd)) {
            axpy_f16_scalar(a, v, y);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Eight fused lanes summed in order, then the plain tail: the arithmetic every dot
    /// kernel here must reproduce on the converted values.
    fn dot_f32_fused(q: &[f32], k: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let (qc, kc) = (q.chunks_exact(LANES), k.chunks_exact(LANES));
        let (qt, kt) = (qc.remainder(), kc.remainder());
        for (x, y) in qc.zip(kc) {
            for l in 0..LANES {
                acc[l] = x[l].mul_add(y[l], acc[l]);
            }
        }
        let tail: f32 = qt.iter().zip(kt).map(|(x, y)| x * y).sum();
        acc.iter().sum::<f32>() + tail
    }

    fn axpy_f32_fused(alpha: f32, x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = alpha.mul_add(v, *o);
        }
    }

    fn same(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
    }

    fn halves(n: usize) -> impl Strategy<Value = Vec<f16>> {
        prop::collection::vec(-60.0f32..60.0, n)
            .prop_map(|v| v.into_iter().map(f16::from_f32).collect())
    }

    proptest! {
        #[test]
        fn f16_kernels_equal_fused_f32_on_converted_values(
            (k, q, y) in (0usize..400).prop_flat_map(|n| (
                halves(n),
                prop::collection::vec(-3.0f32..3.0, n),
                prop::collection::vec(-3.0f32..3.0, n),
            )),
            alpha in -2.0f32..2.0,
        ) {
            let k32: Vec<f32> = k.iter().map(|h| h.to_f32()).collect();
            let want = dot_f32_fused(&q, &k32);
            prop_assert_eq!(dot_f16(&k, &q).to_bits(), want.to_bits());
            prop_assert_eq!(dot_f16_scalar(&k, &q).to_bits(), want.to_bits());
            let mut want_y = y.clone();
            axpy_f32_fused(alpha, &k32, &mut want_y);
            let mut got = y.clone();
            axpy_f16_scalar(alpha, &k, &mut got);
            prop_assert!(same(&got, &want_y));
            let mut got = y.clone();
            axpy_f16(alpha, &k, &mut got);
            prop_assert!(same(&got, &want_y));
            let mut r_small = q.clone();
            round_f16_scalar(&mut r_small);
            let mut r_ref = q.iter().map(|v| v * 70_000.0).collect::<Vec<_>>(); // overflow too
            let r_big0 = r_ref.clone();
            round_f16_scalar(&mut r_ref);
            let mut r = q.clone();
            round_f16_inplace(&mut r);
            prop_assert!(same(&r, &r_small));
            for t in crate::dispatch::available_tables() {
                let isa = t.isa();
                prop_assert_eq!(t.dot_f16(&k, &q).to_bits(), want.to_bits(), "{}", isa);
                let mut got = y.clone();
                t.axpy_f16(alpha, &k, &mut got);
                prop_assert!(same(&got, &want_y), "{}", isa);
                let mut r = q.clone();
                let mut r_big = r_big0.clone();
                t.round_f16_inplace(&mut r);
                t.round_f16_inplace(&mut r_big);
                prop_assert!(same(&r, &r_small), "{}", isa);
                prop_assert!(same(&r_big, &r_ref), "{}", isa);
                // Row forms (rows of 4; 8/16/32 also give the 8-row dot tiles; 16/64/80 the
                // AVX-512 axpy) against per-row calls of the same table, bit for bit.
                for hd in [4usize, 8, 16, 32, 64, 80] {
                    if k.is_empty() || k.len() % hd != 0 {
                        continue;
                    }
                    let rows = k.len() / hd;
                    let mut scores = vec![0f32; rows];
                    t.dot_f16_rows(&k, &q[..hd], 0.5, &mut scores);
                    for (j, s) in scores.iter().enumerate() {
                        let want = 0.5 * dot_f16_scalar(&k[j * hd..(j + 1) * hd], &q[..hd]);
                        prop_assert_eq!(s.to_bits(), want.to_bits(), "{} hd {}", isa, hd);
                    }
                    let mut got = y[..hd].to_vec();
                    let mut want = y[..hd].to_vec();
                    t.axpy_f16_rows(&q[..rows], &k, &mut got);
                    for j in 0..rows {
                        axpy_f16_scalar(q[j], &k[j * hd..(j + 1) * hd], &mut want);
                    }
                    prop_assert!(same(&got, &want), "{} hd {}", isa, hd);
                }
            }
        }
    }
}
