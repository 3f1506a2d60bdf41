//! The `ops` entries of every kernel table this CPU runs ([`kiln_kernels::OpKernels`])
//! against the scalar references, bit for bit, on random inputs; the public `ops`
//! functions against the same references (they run `KernelTable::best()`'s entries); and
//! the argument checks every entry performs itself (which its soundness relies on).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::tables;
use kiln_kernels::half::f16;
use kiln_kernels::{ops, Isa, KernelTable};
use proptest::prelude::*;

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// A deterministic stream of values in [-1, 1) from a seed (xorshift).
fn stream(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

#[derive(Debug, Clone)]
struct Attn {
    hd: usize,
    rows: usize,
    heads: usize,
    pad: usize,
    seed: u64,
}

fn attn() -> impl Strategy<Value = Attn> {
    (
        prop::sample::select(vec![1usize, 4, 8, 12, 16, 24, 32, 64, 80, 128]),
        0usize..40,
        1usize..9,
        0usize..5,
        any::<u64>(),
    )
        .prop_map(|(hd, rows, heads, pad, seed)| Attn {
            hd,
            rows,
            heads,
            pad,
            seed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// `exp_inplace` over the whole f32 range that matters (and past it: overflow,
    /// underflow to subnormals and zero), every length around the 8/16-wide bodies.
    #[test]
    fn exp_entries_equal_exp_f32(xs in prop::collection::vec(-110.0f32..95.0, 0..80)) {
        let want: Vec<f32> = xs.iter().map(|&x| ops::exp_f32(x)).collect();
        for t in tables() {
            let mut got = xs.clone();
            (t.ops().exp_inplace)(&mut got);
            prop_assert!(same(&got, &want), "{}", t.isa());
        }
        let mut got = xs.clone();
        ops::exp_inplace(&mut got);
        prop_assert!(same(&got, &want));
    }

    /// Arbitrary bit patterns (NaN, infinities, subnormals) through `exp_inplace`.
    #[test]
    fn exp_entries_equal_exp_f32_on_any_bits(bits in prop::collection::vec(any::<u32>(), 0..40)) {
        let xs: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
        let want: Vec<f32> = xs.iter().map(|&x| ops::exp_f32(x)).collect();
        for t in tables() {
            let mut got = xs.clone();
            (t.ops().exp_inplace)(&mut got);
            prop_assert!(same(&got, &want), "{}", t.isa());
        }
    }

    /// `round_f16_inplace`, including values past f16's range (to ±inf).
    #[test]
    fn round_entries_equal_reference(
        xs in prop::collection::vec(-70_000.0f32..70_000.0, 0..40),
        tiny in prop::collection::vec(-1e-4f32..1e-4, 0..20),
    ) {
        let xs: Vec<f32> = xs.into_iter().chain(tiny).collect();
        let mut want = xs.clone();
        ops::round_f16_scalar(&mut want);
        for t in tables() {
            let mut got = xs.clone();
            (t.ops().round_f16_inplace)(&mut got);
            prop_assert!(same(&got, &want), "{}", t.isa());
        }
        let mut got = xs.clone();
        ops::round_f16_inplace(&mut got);
        prop_assert!(same(&got, &want));
    }

    /// `dot_f16` and `axpy_f16` on one row of any length.
    #[test]
    fn vector_entries_equal_references(n in 0usize..300, alpha in -2.0f32..2.0, seed in any::<u64>()) {
        let mut next = stream(seed);
        let k: Vec<f16> = (0..n).map(|_| f16::from_f32(next() * 60.0)).collect();
        let q: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
        let y: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
        let want = ops::dot_f16_scalar(&k, &q);
        let mut want_y = y.clone();
        ops::axpy_f16_scalar(alpha, &k, &mut want_y);
        for t in tables() {
            prop_assert_eq!((t.ops().dot_f16)(&k, &q).to_bits(), want.to_bits(), "{}", t.isa());
            let mut got = y.clone();
            (t.ops().axpy_f16)(alpha, &k, &mut got);
            prop_assert!(same(&got, &want_y), "{}", t.isa());
        }
        prop_assert_eq!(ops::dot_f16(&k, &q).to_bits(), want.to_bits());
        let mut got = y.clone();
        ops::axpy_f16(alpha, &k, &mut got);
        prop_assert!(same(&got, &want_y));
    }

    /// The row forms (one query head against a block of cached rows) and the GQA-group
    /// forms (several heads against the same rows), against per-row scalar references.
    #[test]
    fn attention_entries_equal_references(c in attn()) {
        let Attn { hd, rows, heads, pad, seed } = c;
        let mut next = stream(seed);
        let keys: Vec<f16> = (0..rows * hd).map(|_| f16::from_f32(next() * 60.0)).collect();
        let qs: Vec<f32> = (0..heads * hd).map(|_| next() * 3.0).collect();
        let y0: Vec<f32> = (0..heads * hd).map(|_| next()).collect();
        let stride = rows + pad;
        let len = (heads - 1) * stride + rows;
        let w: Vec<f32> = (0..len).map(|_| next()).collect();
        let q = &qs[..hd];

        let want_scores: Vec<f32> = keys
            .chunks_exact(hd)
            .map(|k| 0.125 * ops::dot_f16_scalar(k, q))
            .collect();
        let mut want_y = y0[..hd].to_vec();
        for (j, v) in keys.chunks_exact(hd).enumerate() {
            ops::axpy_f16_scalar(w[j], v, &mut want_y);
        }
        let mut want_heads = vec![f32::NAN; len];
        ops::dot_f16_rows_heads_scalar(&keys, &qs, hd, 0.125, &mut want_heads, stride);
        let mut want_ys = y0.clone();
        ops::axpy_f16_rows_heads_scalar(&w, stride, &keys, hd, &mut want_ys);
        // The group references are one row reference per head.
        for h in 0..heads {
            let qh = &qs[h * hd..(h + 1) * hd];
            for (j, k) in keys.chunks_exact(hd).enumerate() {
                let want = 0.125 * ops::dot_f16_scalar(k, qh);
                prop_assert_eq!(want_heads[h * stride + j].to_bits(), want.to_bits());
            }
        }

        for t in tables() {
            let isa = t.isa();
            let o = t.ops();
            let mut scores = vec![f32::NAN; rows];
            (o.dot_f16_rows)(&keys, q, 0.125, &mut scores);
            prop_assert!(same(&scores, &want_scores), "{} dot_f16_rows", isa);
            let mut y = y0[..hd].to_vec();
            (o.axpy_f16_rows)(&w[..rows], &keys, &mut y);
            prop_assert!(same(&y, &want_y), "{} axpy_f16_rows", isa);
            let mut got = vec![f32::NAN; len];
            (o.dot_f16_rows_heads)(&keys, &qs, hd, 0.125, &mut got, stride);
            prop_assert!(same(&got, &want_heads), "{} dot_f16_rows_heads", isa);
            let mut ys = y0.clone();
            (o.axpy_f16_rows_heads)(&w, stride, &keys, hd, &mut ys);
            prop_assert!(same(&ys, &want_ys), "{} axpy_f16_rows_heads", isa);
        }

        let mut scores = vec![f32::NAN; rows];
        ops::dot_f16_rows(&keys, q, 0.125, &mut scores);
        prop_assert!(same(&scores, &want_scores));
        let mut y = y0[..hd].to_vec();
        ops::axpy_f16_rows(&w[..rows], &keys, &mut y);
        prop_assert!(same(&y, &want_y));
        let mut got = vec![f32::NAN; len];
        ops::dot_f16_rows_heads(&keys, &qs, hd, 0.125, &mut got, stride);
        prop_assert!(same(&got, &want_heads));
        let mut ys = y0.clone();
        ops::axpy_f16_rows_heads(&w, stride, &keys, hd, &mut ys);
        prop_assert!(same(&ys, &want_ys));
    }
}

/// The table methods call the same entries as the fields.
#[test]
fn methods_call_the_entries() {
    let mut next = stream(7);
    let keys: Vec<f16> = (0..64 * 16).map(|_| f16::from_f32(next())).collect();
    let q: Vec<f32> = (0..64).map(|_| next()).collect();
    for t in tables() {
        let (mut a, mut b) = (vec![0f32; 16], vec![0f32; 16]);
        t.dot_f16_rows(&keys, &q, 0.5, &mut a);
        (t.ops().dot_f16_rows)(&keys, &q, 0.5, &mut b);
        assert!(same(&a, &b), "{}", t.isa());
        let mut e = q.clone();
        t.exp_inplace(&mut e);
        assert!(same(
            &e,
            &q.iter().map(|&x| ops::exp_f32(x)).collect::<Vec<_>>()
        ));
    }
}

/// `best()` is the detected table (nothing is forced in this test binary), the same
/// `&'static` every call.
#[test]
fn best_is_the_detected_table_and_cached() {
    let best = KernelTable::best();
    assert_eq!(best.isa(), Isa::detect());
    assert!(std::ptr::eq(best, KernelTable::best()));
    let detected = KernelTable::for_isa(Isa::detect()).expect("detected ISA is supported");
    assert!(std::ptr::eq(best, detected));
}

/// Every entry of every table rejects arguments its kernels would read or write out of
/// bounds with, by panicking: the CPU features are the entries' only precondition.
#[test]
fn every_entry_checks_its_arguments() {
    let k = vec![f16::ONE; 64];
    let q = vec![1f32; 64];
    for t in tables() {
        let o = *t.ops();
        let isa = t.isa();
        let panics = |what: &str, f: &mut dyn FnMut()| {
            let r = catch_unwind(AssertUnwindSafe(f));
            assert!(r.is_err(), "{isa} {what}: accepted bad lengths");
        };
        panics("dot_f16", &mut || {
            (o.dot_f16)(&k, &q[..8]);
        });
        panics("axpy_f16", &mut || (o.axpy_f16)(1.0, &k, &mut [0f32; 8]));
        // 10 scores are not whole rows of 4; nor is anything of 0.
        panics("softmax_rows_f32", &mut || {
            (o.softmax_rows_f32)(&mut [0f32; 10], 4);
        });
        panics("softmax_rows_f32 n 0", &mut || {
            (o.softmax_rows_f32)(&mut [0f32; 4], 0);
        });
        // 64 keys are 4 rows of 16; `out` claims 8.
        panics("dot_f16_rows", &mut || {
            (o.dot_f16_rows)(&k, &q[..16], 1.0, &mut [0f32; 8]);
        });
        panics("axpy_f16_rows", &mut || {
            (o.axpy_f16_rows)(&q[..8], &k, &mut [0f32; 16]);
        });
        // 2 heads of 16 over 4 rows with stride 4 need 8 scores / weights.
        panics("dot_f16_rows_heads", &mut || {
            (o.dot_f16_rows_heads)(&k, &q[..32], 16, 1.0, &mut [0f32; 7], 4);
        });
        panics("dot_f16_rows_heads stride", &mut || {
            (o.dot_f16_rows_heads)(&k, &q[..32], 16, 1.0, &mut [0f32; 64], 3);
        });
        panics("axpy_f16_rows_heads", &mut || {
            (o.axpy_f16_rows_heads)(&q[..7], 4, &k, 16, &mut [0f32; 32]);
        });
        panics("axpy_f16_rows_heads hd", &mut || {
            (o.axpy_f16_rows_heads)(&q[..8], 4, &k, 0, &mut [0f32; 32]);
        });
    }
}
