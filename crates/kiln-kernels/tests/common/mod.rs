//! Helpers shared by the kernel test suites.

#![allow(dead_code)] // each test crate uses a different subset

use kiln_kernels::{ActType, Isa, KernelTable, WeightType};
use proptest::prelude::*;

/// The scalar reference table.
pub fn scalar() -> &'static KernelTable {
    match KernelTable::for_isa(Isa::Scalar) {
        Ok(t) => t,
        Err(e) => panic!("the scalar table is always available: {e}"),
    }
}

/// Every table this CPU can run (the scalar one included).
pub fn tables() -> Vec<&'static KernelTable> {
    Isa::available()
        .into_iter()
        .map(|isa| match KernelTable::for_isa(isa) {
            Ok(t) => t,
            Err(e) => panic!("{isa} is listed as available: {e}"),
        })
        .collect()
}

/// Byte ranges within a block that hold quants (as opposed to scales and mins).
pub fn quant_ranges(ty: WeightType) -> &'static [(usize, usize)] {
    match ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => &[],
        WeightType::Q4_0 => &[(2, 18)],
        WeightType::Q4_1 => &[(4, 20)],
        WeightType::Q5_0 => &[(2, 22)],
        WeightType::Q8_0 => &[(2, 34)],
        WeightType::Q4_K => &[(16, 144)],
        WeightType::Q5_K => &[(16, 176)],
        WeightType::Q6_K => &[(0, 192)],
    }
}

/// Byte offsets of the f16 scale/min fields within a block.
pub fn f16_fields(ty: WeightType) -> &'static [usize] {
    match ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => &[],
        WeightType::Q4_0 | WeightType::Q5_0 | WeightType::Q8_0 => &[0],
        WeightType::Q4_1 | WeightType::Q4_K | WeightType::Q5_K => &[0, 2],
        WeightType::Q6_K => &[208],
    }
}

pub fn dequantize(t: &KernelTable, ty: WeightType, w: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    (t.weight(ty).dequantize_row)(w, &mut out);
    out
}

pub fn dequantize_act(act: ActType, a: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    (scalar().activation(act).dequantize_row)(a, &mut out);
    out
}

pub fn quantize(t: &KernelTable, act: ActType, x: &[f32]) -> Vec<u8> {
    let len = act
        .row_bytes(x.len())
        .unwrap_or_else(|| panic!("{act}: bad length"));
    let mut out = vec![0u8; len];
    (t.quantize(act))(x, &mut out);
    out
}

/// `Σ |term|` that bounds every partial sum a `vec_dot` forms: `Σ (|w| + 2|z|)·|a|`,
/// where `z` is the row dequantized with its quants zeroed (the block's offset part:
/// q4_1's min, the k-quants' `dmin·m`, q4_0's `−8d`, ...). Kernels split each block's
/// contribution into a quant part and an offset part, and `|quant part| ≤ |w| + |z|`.
pub fn magnitude(ty: WeightType, w: &[u8], a: &[f32]) -> f64 {
    let n = a.len();
    let wd = dequantize(scalar(), ty, w, n);
    let mut zeroed = w.to_vec();
    for blk in zeroed.chunks_exact_mut(ty.block_bytes()) {
        for &(s, e) in quant_ranges(ty) {
            blk[s..e].fill(0);
        }
    }
    let zd = if quant_ranges(ty).is_empty() {
        vec![0f32; n]
    } else {
        dequantize(scalar(), ty, &zeroed, n)
    };
    (0..n)
        .map(|i| (f64::from(wd[i].abs()) + 2.0 * f64::from(zd[i].abs())) * f64::from(a[i].abs()))
        .sum()
}

/// Tolerance for two `vec_dot` implementations that differ only in f32 summation order:
/// each is within (sequential additions)·ε·magnitude of the exact sum, so allow the sum of
/// both (2·steps·ε·magnitude) plus 16 steps of headroom for horizontal reductions.
pub fn summation_tolerance(ty: WeightType, n: usize, magnitude: f64) -> f64 {
    let steps = if ty.block_elems() == 1 {
        n.div_ceil(8)
    } else {
        n / ty.block_elems()
    };
    2.0 * (steps as f64 + 16.0) * f64::from(f32::EPSILON) * magnitude + 1e-30
}

/// An f16 with a random sign and magnitude 2^e, e ∈ [−20, 2] (subnormals included).
pub fn f16_scale() -> impl Strategy<Value = u16> {
    (any::<bool>(), -20i32..=2, 0.5f32..1.0).prop_map(|(neg, e, m)| {
        let v = m * 2f32.powi(e + 1);
        half::f16::from_f32(if neg { -v } else { v }).to_bits()
    })
}

/// A random valid weight row of `ty` with `n` elements: random quants, sane scales.
pub fn weight_row(ty: WeightType, n: usize) -> BoxedStrategy<Vec<u8>> {
    let bytes = ty.row_bytes(n).unwrap_or_else(|| panic!("{ty}: n={n}"));
    match ty {
        WeightType::F32 => prop::collection::vec(-2.0f32..2.0, n)
            .prop_map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .boxed(),
        WeightType::F16 => prop::collection::vec(-2.0f32..2.0, n)
            .prop_map(|v| {
                v.iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect()
            })
            .boxed(),
        WeightType::BF16 => prop::collection::vec(-2.0f32..2.0, n)
            .prop_map(|v| {
                v.iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect()
            })
            .boxed(),
        _ => {
            let nb = n / ty.block_elems();
            let fields = f16_fields(ty);
            (
                prop::collection::vec(any::<u8>(), bytes),
                prop::collection::vec(f16_scale(), nb * fields.len()),
            )
                .prop_map(move |(mut raw, scales)| {
                    let mut s = scales.into_iter();
                    for blk in raw.chunks_exact_mut(ty.block_bytes()) {
                        for &off in fields {
                            let v = s.next().unwrap_or(0x3c00);
                            blk[off..off + 2].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                    raw
                })
                .boxed()
        }
    }
}

/// Activations: uniform in ±scale with a few outliers, scale spanning 10^−3..10^3.
pub fn activations(n: usize) -> impl Strategy<Value = Vec<f32>> {
    (
        prop::collection::vec(-1.0f32..1.0, n),
        -3.0f32..3.0,
        prop::collection::vec((0..n, -8.0f32..8.0), 0..4),
    )
        .prop_map(|(mut v, e, spikes)| {
            for (i, s) in spikes {
                v[i] = s;
            }
            let scale = 10f32.powf(e);
            v.iter_mut().for_each(|x| *x *= scale);
            v
        })
}
