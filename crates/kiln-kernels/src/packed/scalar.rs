//! Reference packed kernels: the same arithmetic as the SIMD ones, one lane at a time
//! (exact integer sums, then the same float steps, `mul_add` where they fuse), so results
//! agree to the last bit. Quants are read back from the packed bytes, so these also check
//! the layout against the `vec_dot` kernels.

use super::{check_gemm, PackedType, PACK_ROWS, SUB, TILE_TOKENS};
use crate::quant::block::f16_at;

/// Generates the reference for one type (the kernel tables hold plain `fn` pointers).
macro_rules! reference {
    ($($name:ident: $ty:ident),* $(,)?) => {$(
        #[doc = concat!("Packed ", stringify!($ty), " for up to [`TILE_TOKENS`] tokens.")]
        pub fn $name(
            cols: usize,
            group: &[u8],
            acts: &[u8],
            act_row_bytes: usize,
            scales: &[[f32; 2]],
            n_tokens: usize,
            out: &mut [[f32; PACK_ROWS]; TILE_TOKENS],
        ) {
            gemm(PackedType::$ty, cols, group, acts, act_row_bytes, scales, n_tokens, out);
        }
    )*};
}

reference!(
    gemm_q4_0: Q4_0,
    gemm_q4_1: Q4_1,
    gemm_q5_0: Q5_0,
    gemm_q8_0: Q8_0,
    gemm_q4_k: Q4_K,
    gemm_q5_k: Q5_K,
    gemm_q6_k: Q6_K,
);

/// Unsigned quant of element `e` of row `i` in packed block `blk`.
fn q_at(ty: PackedType, blk: &[u8], i: usize, e: usize) -> i32 {
    let (s, r) = (e / SUB, e % SUB);
    let (g, j) = (r / 4, r % 4);
    if ty == PackedType::Q8_0 {
        return i32::from(blk[64 * g + 4 * i + j]);
    }
    let nib = blk[256 * s + 64 * (g % 4) + 4 * i + j];
    let low = if g < 4 { nib & 0x0f } else { nib >> 4 };
    let high = ty.high_offset() + 64 * ty.high_bits() * s + 4 * i + j;
    let top = match ty.high_bits() {
        1 => (blk[high] >> g) & 1,
        2 => (blk[high + 64 * (g / 4)] >> (2 * (g % 4))) & 3,
        _ => 0,
    };
    i32::from(low | (top << 4))
}

/// Σ q·a over elements `e0..e0 + n` of row `i` (exact).
fn dot(ty: PackedType, blk: &[u8], i: usize, a: &[u8], e0: usize, n: usize) -> i32 {
    (e0..e0 + n)
        .map(|e| q_at(ty, blk, i, e) * i32::from(a[e] as i8))
        .sum()
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
    let nb = cols / ty.block_elems();
    let act_block = ty.weight().act_type().block_bytes();
    for (t, out_t) in out.iter_mut().enumerate().take(n_tokens) {
        let row = &acts[t * act_row_bytes..];
        for (i, o) in out_t.iter_mut().enumerate() {
            let mut acc = 0f32;
            for b in 0..nb {
                let blk = &group[b * ty.block_bytes()..][..ty.block_bytes()];
                let ab = &row[b * act_block..][..act_block];
                let a = &ab[ty.act_qs_offset()..];
                let [dy, aux] = scales[t * nb + b];
                let d = f16_at(blk, ty.d_offset() + 2 * i);
                acc = match ty {
                    PackedType::Q4_1 => {
                        let isum = dot(ty, blk, i, a, 0, 32);
                        let m = f16_at(blk, ty.m_offset() + 2 * i);
                        m.mul_add(aux, (isum as f32).mul_add(d * dy, acc))
                    }
                    PackedType::Q4_0 | PackedType::Q5_0 | PackedType::Q8_0 => {
                        let isum = dot(ty, blk, i, a, 0, 32);
                        (isum as f32 - aux).mul_add(d * dy, acc)
                    }
                    PackedType::Q4_K | PackedType::Q5_K => {
                        let meta = ty.meta_offset();
                        let mut isum = 0i32;
                        let mut msum = 0i32;
                        for s in 0..8 {
                            let sc = i32::from(blk[meta + PACK_ROWS * s + i]);
                            let mn = i32::from(blk[ty.mins_offset() + PACK_ROWS * s + i]);
                            isum += sc * dot(ty, blk, i, a, SUB * s, SUB);
                            // The prepared row holds B_s, sub-block s's sum of 32 quants.
                            msum += mn * bsum(ty, ab, s);
                        }
                        let dmin = f16_at(blk, ty.m_offset() + 2 * i);
                        let acc = (-(msum as f32)).mul_add(dmin * dy, acc);
                        (isum as f32).mul_add(d * dy, acc)
                    }
                    PackedType::Q6_K => {
                        let meta = ty.meta_offset();
                        let mut isum = 0i32;
                        let mut bs = 0i32;
                        for k in 0..16 {
                            let sc = i32::from(
                                blk[meta + 2 * PACK_ROWS * (k / 2) + 2 * i + k % 2] as i8,
                            );
                            isum += sc * dot(ty, blk, i, a, 16 * k, 16);
                            bs += sc * bsum(ty, ab, k);
                        }
                        ((isum - 32 * bs) as f32).mul_add(d * dy, acc)
                    }
                };
            }
            *o = acc;
        }
    }
}

/// Field `k` of q8_K's block sums in activation block `ab`: the sum of the 16 quants of
/// group `k`, or for q4_K and q5_K of the 32 of sub-block `k` ([`super::prepare_act_row`]).
fn bsum(ty: PackedType, ab: &[u8], k: usize) -> i32 {
    let off = ty.act_bsums_offset() + 2 * k;
    i32::from(i16::from_le_bytes([ab[off], ab[off + 1]]))
}
