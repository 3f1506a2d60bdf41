//! Every SIMD kernel against its scalar twin, on random valid inputs, for every
//! instruction set this CPU supports.
//!
//! - `vec_dot`: integer work is exact in every ISA, only the f32 summation order
//!   differs, so results must agree within `summation_tolerance` (a few ε times the
//!   sum of absolute terms).
//! - activation quantizers: byte-identical (same scale, same rounding rule).
//! - `dequantize_row`: bit-identical.

mod common;

use common::{
    activations, dequantize, dequantize_act, magnitude, quantize, scalar, summation_tolerance,
    tables, weight_row,
};
use kiln_kernels::{ActType, WeightType, QK_K};
use proptest::prelude::*;

/// Element counts: odd block counts exercise the AVX-512 single-block tails, and the
/// float types get lengths that are not multiples of any vector width.
fn lengths(ty: WeightType) -> BoxedStrategy<usize> {
    match ty.block_elems() {
        1 => (1usize..700).boxed(),
        be => (1usize..=if be == QK_K { 6 } else { 33 })
            .prop_map(move |nb| nb * be)
            .boxed(),
    }
}

fn row_and_acts(ty: WeightType) -> impl Strategy<Value = (Vec<u8>, Vec<f32>)> {
    lengths(ty).prop_flat_map(move |n| (weight_row(ty, n), activations(n)))
}

fn check_vec_dot(ty: WeightType, w: &[u8], x: &[f32]) -> Result<(), TestCaseError> {
    let n = x.len();
    let act = ty.act_type();
    let a = quantize(scalar(), act, x);
    let want = (scalar().weight(ty).vec_dot)(n, w, &a);
    let mag = magnitude(ty, w, &dequantize_act(act, &a, n));
    let tol = summation_tolerance(ty, n, mag);
    prop_assert!(want.is_finite(), "{ty}: scalar result {want}");
    for t in tables() {
        let got = (t.weight(ty).vec_dot)(n, w, &a);
        let err = f64::from((got - want).abs());
        prop_assert!(
            err <= tol,
            "{ty} {}: n={n} got {got} want {want} |err| {err:e} > tol {tol:e} (magnitude {mag:e})",
            t.isa()
        );
        let deq = dequantize(t, ty, w, n);
        let deq_ref = dequantize(scalar(), ty, w, n);
        prop_assert!(
            deq.iter()
                .zip(&deq_ref)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "{ty} {}: dequantize_row differs from scalar",
            t.isa()
        );
    }
    Ok(())
}

macro_rules! vec_dot_props {
    ($($name:ident => $ty:expr),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(192))]
            $(
                #[test]
                fn $name((w, x) in row_and_acts($ty)) {
                    check_vec_dot($ty, &w, &x)?;
                }
            )*
        }
    };
}

vec_dot_props! {
    vec_dot_f32 => WeightType::F32,
    vec_dot_f16 => WeightType::F16,
    vec_dot_bf16 => WeightType::BF16,
    vec_dot_q4_0 => WeightType::Q4_0,
    vec_dot_q4_1 => WeightType::Q4_1,
    vec_dot_q5_0 => WeightType::Q5_0,
    vec_dot_q8_0 => WeightType::Q8_0,
    vec_dot_q4_k => WeightType::Q4_K,
    vec_dot_q5_k => WeightType::Q5_K,
    vec_dot_q6_k => WeightType::Q6_K,
}

fn act_lengths(act: ActType) -> BoxedStrategy<usize> {
    match act.block_elems() {
        1 => (1usize..300).boxed(),
        be => (1usize..=4).prop_map(move |nb| nb * be).boxed(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn quantizers_match_scalar_bytes(
        (act, x) in prop::sample::select(ActType::ALL.to_vec())
            .prop_flat_map(|act| (Just(act), act_lengths(act)))
            .prop_flat_map(|(act, n)| (Just(act), activations(n)))
    ) {
        let want = quantize(scalar(), act, &x);
        for t in tables() {
            let got = quantize(t, act, &x);
            prop_assert_eq!(&got, &want, "{} {}", act, t.isa());
        }
    }
}

/// llama.cpp's run-time rounding at exact ties: q8_0/q8_1 round half to even (its x86
/// quantizers use AVX's native rounding), and so does q8_K (`nearest_int`). Here
/// d = 1 (amax 127), so the scaled values are the inputs themselves.
#[test]
fn quantizers_round_ties_like_ggml() {
    let mut x = vec![0f32; QK_K];
    x[..8].copy_from_slice(&[127.0, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 0.49999997]);
    for t in tables() {
        for act in [ActType::Q8_0, ActType::Q8_1] {
            let q = quantize(t, act, &x[..32]);
            let qs = if act == ActType::Q8_0 {
                &q[2..]
            } else {
                &q[4..]
            };
            let got: Vec<i8> = qs[..8].iter().map(|&b| b as i8).collect();
            assert_eq!(got, [127, 2, -2, 0, 0, 2, -2, 0], "{act} {}", t.isa());
            assert_eq!(&q[..2], &half::f16::from_f32(1.0).to_le_bytes());
        }
        // q8_K scales by −127/max, so signs flip; d = 1/iscale = −1.
        let q = quantize(t, ActType::Q8_K, &x);
        let got: Vec<i8> = q[4..12].iter().map(|&b| b as i8).collect();
        assert_eq!(got, [-127, -2, 2, 0, 0, -2, 2, 0], "q8_K {}", t.isa());
        assert_eq!(f32::from_le_bytes([q[0], q[1], q[2], q[3]]), -1.0);
        // bsums[0] is the sum of the first 16 quants.
        let want: i16 = got.iter().map(|&v| i16::from(v)).sum();
        assert_eq!(i16::from_le_bytes([q[260], q[261]]), want);
    }
}

/// q8_K takes its scale from the first value of largest magnitude, sign included.
#[test]
fn q8_k_scale_comes_from_first_signed_max() {
    let mut x = vec![0.25f32; QK_K];
    x[100] = -3.0;
    x[200] = 3.0;
    for t in tables() {
        let q = quantize(t, ActType::Q8_K, &x);
        let d = f32::from_le_bytes([q[0], q[1], q[2], q[3]]);
        assert_eq!(d, 1.0 / (-127.0 / -3.0), "{}", t.isa());
        assert_eq!(q[4 + 100] as i8, -127, "{}", t.isa());
    }
}

#[test]
fn all_zero_activations_quantize_to_zero_and_dot_to_zero() {
    let x = vec![0f32; 2 * QK_K];
    for t in tables() {
        for act in ActType::ALL {
            let q = quantize(t, act, &x);
            assert!(q.iter().all(|&b| b == 0), "{act} {}", t.isa());
        }
        for ty in WeightType::ALL {
            let w = vec![0x11u8; ty.row_bytes(x.len()).unwrap_or(0)];
            let a = quantize(t, ty.act_type(), &x);
            assert_eq!(
                (t.weight(ty).vec_dot)(x.len(), &w, &a),
                0.0,
                "{ty} {}",
                t.isa()
            );
        }
    }
}

/// Wrong sizes are internal bugs: every kernel must panic on them, never read past a
/// slice (the SIMD kernels index without bounds checks after this check).
#[test]
fn every_kernel_rejects_mis_sized_rows() {
    for t in tables() {
        for ty in WeightType::ALL {
            let n = 2 * QK_K;
            let (wb, ab) = (
                ty.row_bytes(n).unwrap_or(0),
                ty.act_type().row_bytes(n).unwrap_or(0),
            );
            let (w, a) = (vec![0u8; wb], vec![0u8; ab]);
            let dot = t.weight(ty).vec_dot;
            for (wl, al) in [(wb - 1, ab), (wb, ab - 1), (wb + ty.block_bytes(), ab)] {
                let w2 = vec![0u8; wl];
                let a2 = vec![0u8; al];
                let r = std::panic::catch_unwind(|| dot(n, &w2, &a2));
                assert!(r.is_err(), "{ty} {} accepted sizes {wl}/{al}", t.isa());
            }
            if ty.block_elems() > 1 {
                let r = std::panic::catch_unwind(|| dot(n - 1, &w, &a));
                assert!(r.is_err(), "{ty} {} accepted a partial block", t.isa());
            }
            let deq = t.weight(ty).dequantize_row;
            let r = std::panic::catch_unwind(|| deq(&w[..wb - 1], &mut vec![0f32; n]));
            assert!(r.is_err(), "{ty} {} dequantized a short row", t.isa());
        }
        for act in ActType::ALL {
            let q = t.quantize(act);
            let len = act.row_bytes(QK_K).unwrap_or(0);
            let r = std::panic::catch_unwind(|| q(&[0f32; QK_K], &mut vec![0u8; len - 1]));
            assert!(r.is_err(), "{act} {} quantized into a short row", t.isa());
        }
    }
}
