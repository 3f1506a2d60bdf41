//! Reference packed kernels: the same arithmetic as the SIMD ones, one lane at a time
//! (`mul_add` where they fuse), so results agree to the last bit or nearly.

use super::{check_gemm, PackedType, PACK_ROWS, TILE_TOKENS};
use crate::quant::block::f16_at;

/// Packed q4_1 × q8_1 for up to [`TILE_TOKENS`] tokens.
pub fn gemm_q4_1(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut [[f32; PACK_ROWS]; TILE_TOKENS],
) {
    gemm(
        PackedType::Q4_1,
        cols,
        group,
        acts,
        act_row_bytes,
        scales,
        n_tokens,
        out,
    );
}

/// Packed q8_0 × q8_0 for up to [`TILE_TOKENS`] tokens.
pub fn gemm_q8_0(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut [[f32; PACK_ROWS]; TILE_TOKENS],
) {
    gemm(
        PackedType::Q8_0,
        cols,
        group,
        acts,
        act_row_bytes,
        scales,
        n_tokens,
        out,
    );
}

#[allow(clippy::too_many_arguments)]
fn gemm(
    ty: PackedType,
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut [[f32; PACK_ROWS]; TILE_TOKENS],
) {
    check_gemm(ty, cols, group, acts, act_row_bytes, scales, n_tokens);
    let nb = cols / 32;
    let qs = ty.act_qs_offset();
    for (t, out_t) in out.iter_mut().enumerate().take(n_tokens) {
        let row = &acts[t * act_row_bytes..];
        for (i, o) in out_t.iter_mut().enumerate() {
            let mut acc = 0f32;
            for b in 0..nb {
                let blk = &group[b * ty.block_bytes()..][..ty.block_bytes()];
                let a = &row[b * ty.weight().act_type().block_bytes() + qs..][..32];
                let [dy, aux] = scales[t * nb + b];
                match ty {
                    PackedType::Q4_1 => {
                        let mut isum = 0i32;
                        for p in 0..4 {
                            for j in 0..4 {
                                let w = blk[p * 64 + 4 * i + j];
                                isum += i32::from(w & 0x0f) * i32::from(a[4 * p + j] as i8)
                                    + i32::from(w >> 4) * i32::from(a[16 + 4 * p + j] as i8);
                            }
                        }
                        let (dx, mx) = (f16_at(blk, 256 + 2 * i), f16_at(blk, 288 + 2 * i));
                        acc = (isum as f32).mul_add(dx * dy, acc);
                        acc = mx.mul_add(aux, acc);
                    }
                    PackedType::Q8_0 => {
                        let mut isum = 0i32;
                        for g in 0..8 {
                            for j in 0..4 {
                                let w = blk[g * 64 + 4 * i + j];
                                isum += i32::from(w) * i32::from(a[4 * g + j] as i8);
                            }
                        }
                        let dx = f16_at(blk, 512 + 2 * i);
                        acc = (isum as f32 - aux).mul_add(dx * dy, acc);
                    }
                }
            }
            *o = acc;
        }
    }
}
