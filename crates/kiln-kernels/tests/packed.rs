//! Packed (row-interleaved) batched kernels on random valid inputs:
//! - the scalar packed reference equals `vec_dot` per (row, token) within the summation
//!   tolerance (same integer work, a different float order);
//! - every ISA's packed kernel equals the scalar packed reference bit for bit (same
//!   operations, fused the same way);
//! - a token's result is identical whichever tile it is computed in (batch invariance).

mod common;

use common::{
    activations, dequantize_act, magnitude, quantize, scalar, summation_tolerance, tables,
    weight_row,
};
use kiln_kernels::packed::{self, PackedType, PACK_ROWS, TILE_TOKENS};
use kiln_kernels::WeightType;
use proptest::prelude::*;

#[derive(Debug)]
struct Case {
    ty: PackedType,
    rows: usize,
    cols: usize,
    weights: Vec<u8>,
    acts: Vec<f32>,
    n_tokens: usize,
}

fn case(ty: PackedType) -> impl Strategy<Value = Case> {
    let max_blocks = if ty.is_k() { 3 } else { 9 };
    (1usize..=40, 1usize..=max_blocks, 1usize..=TILE_TOKENS + 3).prop_flat_map(
        move |(rows, nb, n_tokens)| {
            let cols = nb * ty.block_elems();
            let w = ty.weight();
            (
                prop::collection::vec(weight_row(w, cols), rows),
                prop::collection::vec(activations(cols), n_tokens),
            )
                .prop_map(move |(weights, acts)| Case {
                    ty,
                    rows,
                    cols,
                    weights: weights.concat(),
                    acts: acts.concat(),
                    n_tokens,
                })
        },
    )
}

/// Runs `kernel` over every group and token tile; `tile` caps tokens per call.
fn run(
    kernel: packed::PackedGemmFn,
    c: &Case,
    packed: &[u8],
    acts: &[u8],
    scales: &[[f32; 2]],
    tile: usize,
) -> Vec<f32> {
    let act_row = c.ty.weight().act_type().row_bytes(c.cols).expect("act row");
    let nb = c.cols / c.ty.block_elems();
    let gb = c.ty.group_bytes(c.cols);
    let mut out = vec![0f32; c.n_tokens * c.rows];
    for (g, group) in packed.chunks_exact(gb).enumerate() {
        let mut t0 = 0;
        while t0 < c.n_tokens {
            let n = tile.min(c.n_tokens - t0);
            let mut buf = [[0f32; PACK_ROWS]; TILE_TOKENS];
            kernel(
                c.cols,
                group,
                &acts[t0 * act_row..],
                act_row,
                &scales[t0 * nb..],
                n,
                &mut buf,
            );
            for (t, row) in buf.iter().enumerate().take(n) {
                for (i, &v) in row.iter().enumerate() {
                    let r = g * PACK_ROWS + i;
                    if r < c.rows {
                        out[(t0 + t) * c.rows + r] = v;
                    }
                }
            }
            t0 += n;
        }
    }
    out
}

fn check(c: Case) -> Result<(), TestCaseError> {
    let w = c.ty.weight();
    let act = w.act_type();
    let act_row = act.row_bytes(c.cols).expect("act row");
    let row_bytes = w.row_bytes(c.cols).expect("row");
    let acts: Vec<u8> = c
        .acts
        .chunks_exact(c.cols)
        .flat_map(|x| quantize(scalar(), act, x))
        .collect();
    let packed = packed::pack(c.ty, c.rows, c.cols, &c.weights).expect("packs");
    prop_assert_eq!(
        packed.len(),
        c.rows.div_ceil(PACK_ROWS) * c.ty.group_bytes(c.cols)
    );
    let nb = c.cols / c.ty.block_elems();
    // The packed kernels read rows prepared for their type; `vec_dot` reads `acts`.
    let mut prepared = acts.clone();
    let mut scales = vec![[0f32; 2]; c.n_tokens * nb];
    for (t, s) in scales.chunks_exact_mut(nb).enumerate() {
        packed::prepare_act_row(c.ty, &mut prepared[t * act_row..][..act_row], s);
    }

    let reference = run(
        packed::reference(c.ty),
        &c,
        &packed,
        &prepared,
        &scales,
        TILE_TOKENS,
    );
    for t in 0..c.n_tokens {
        let a = &acts[t * act_row..][..act_row];
        let a_f32 = dequantize_act(act, a, c.cols);
        for r in 0..c.rows {
            let wrow = &c.weights[r * row_bytes..][..row_bytes];
            let want = (scalar().weight(w).vec_dot)(c.cols, wrow, a);
            let got = reference[t * c.rows + r];
            let tol = summation_tolerance(w, c.cols, magnitude(w, wrow, &a_f32));
            prop_assert!(
                f64::from((got - want).abs()) <= tol,
                "{:?} row {r} token {t}: packed {got} vec_dot {want} (tol {tol:e})",
                c.ty
            );
        }
    }
    for table in tables() {
        let Some(kernel) = table.packed_gemm(c.ty) else {
            continue;
        };
        for tile in [TILE_TOKENS, 3, 1] {
            let got = run(kernel, &c, &packed, &prepared, &scales, tile);
            prop_assert!(
                got.iter()
                    .zip(&reference)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{:?} {} tile {tile}: differs from the scalar packed reference",
                c.ty,
                table.isa()
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn q4_0_packed_matches_reference(c in case(PackedType::Q4_0)) {
        check(c)?;
    }

    #[test]
    fn q4_1_packed_matches_reference(c in case(PackedType::Q4_1)) {
        check(c)?;
    }

    #[test]
    fn q5_0_packed_matches_reference(c in case(PackedType::Q5_0)) {
        check(c)?;
    }

    #[test]
    fn q8_0_packed_matches_reference(c in case(PackedType::Q8_0)) {
        check(c)?;
    }

    #[test]
    fn q4_k_packed_matches_reference(c in case(PackedType::Q4_K)) {
        check(c)?;
    }

    #[test]
    fn q5_k_packed_matches_reference(c in case(PackedType::Q5_K)) {
        check(c)?;
    }

    #[test]
    fn q6_k_packed_matches_reference(c in case(PackedType::Q6_K)) {
        check(c)?;
    }
}

#[test]
fn every_packed_type_has_a_kernel_on_every_simd_table() {
    for table in tables() {
        for ty in PackedType::ALL {
            let simd = table.isa() != kiln_kernels::Isa::Scalar;
            assert_eq!(
                table.packed_gemm(ty).is_some(),
                simd,
                "{ty:?} {}",
                table.isa()
            );
        }
    }
}

#[test]
fn packing_rejects_bad_shapes() {
    let w = vec![0u8; WeightType::Q4_1.row_bytes(64).expect("row") * 3];
    assert!(packed::pack(PackedType::Q4_1, 3, 64, &w).is_some());
    assert!(
        packed::pack(PackedType::Q4_1, 4, 64, &w).is_none(),
        "too few bytes"
    );
    assert!(
        packed::pack(PackedType::Q8_0, 3, 48, &w).is_none(),
        "not whole blocks"
    );
    let k = vec![0u8; WeightType::Q6_K.row_bytes(256).expect("row") * 2];
    assert!(packed::pack(PackedType::Q6_K, 2, 256, &k).is_some());
    assert!(
        packed::pack(PackedType::Q6_K, 2, 128, &k).is_none(),
        "not whole super-blocks"
    );
    assert_eq!(
        PackedType::for_weight(WeightType::Q4_K),
        Some(PackedType::Q4_K)
    );
    assert_eq!(PackedType::for_weight(WeightType::F16), None);
}
