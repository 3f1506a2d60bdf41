//! Row-interleaved ("packed") weights and the batched matrix-multiply kernels over them.
//!
//! `vec_dot` computes one weight row against one activation row, so a batch of `T`
//! tokens unpacks every weight block `T` times and reduces every 32-element product
//! across SIMD lanes `T` times: at batch 32 that is ~20 instructions per 64
//! multiply-adds. Packing puts 16 rows side by side, 4 consecutive elements of each in
//! one 32-bit lane, so one `vpdpbusd` with a broadcast activation word advances 16 rows
//! at once with no horizontal reduction, and a block's unpacked weights serve up to
//! [`TILE_TOKENS`] tokens from registers. The per-block scaling is then 4 float ops per
//! 512 multiply-adds.
//!
//! Layout of one packed block (16 rows × 32 elements), groups of 16 rows one after
//! another, blocks of a group in column order:
//! - q4_1: four 64-byte vectors, lane `i` of vector `p` = bytes `4p..4p+4` of row `i`'s
//!   nibbles (low nibbles: elements `4p..`, high nibbles: `16+4p..`), then the 16 rows'
//!   `d` as f16, then their `m` as f16 (320 bytes, as many as 16 source blocks).
//! - q8_0: eight 64-byte vectors, lane `i` of vector `g` = elements `4g..4g+4` of row `i`
//!   plus 128 (as unsigned bytes, which `vpdpbusd` needs; the activation block sum times
//!   128 is subtracted back exactly), then the 16 `d` as f16 (544 bytes).
//!
//! Rows past the matrix's end are zero (their outputs are discarded). Every token's
//! result is computed by the same sequence of operations whatever else is in its tile,
//! so a row's output never depends on the batch — the engine's batch-invariance rests on
//! that.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub(crate) mod scalar;

use crate::quant::block::f16_at;
use crate::types::WeightType;

/// The scalar reference kernel for `ty` (what every ISA's kernel is tested against).
pub fn reference(ty: PackedType) -> PackedGemmFn {
    crate::dispatch::packed_reference(ty)
}

/// Rows interleaved in one packed group (one 32-bit lane each of a 512-bit vector).
pub const PACK_ROWS: usize = 16;

/// Most tokens one kernel call handles (its accumulators live in registers).
pub const TILE_TOKENS: usize = 8;

const BLOCK: usize = 32;

/// A weight type the packed kernels support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackedType {
    Q4_1,
    Q8_0,
}

impl PackedType {
    /// The packed form of `ty`, if there is one.
    pub fn for_weight(ty: WeightType) -> Option<Self> {
        match ty {
            WeightType::Q4_1 => Some(Self::Q4_1),
            WeightType::Q8_0 => Some(Self::Q8_0),
            _ => None,
        }
    }

    pub fn weight(self) -> WeightType {
        match self {
            Self::Q4_1 => WeightType::Q4_1,
            Self::Q8_0 => WeightType::Q8_0,
        }
    }

    /// Bytes of one packed block of [`PACK_ROWS`] rows.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_1 => 4 * 64 + 2 * 32,
            Self::Q8_0 => 8 * 64 + 32,
        }
    }

    /// Bytes of one packed group of [`PACK_ROWS`] rows of `cols` elements.
    pub fn group_bytes(self, cols: usize) -> usize {
        cols / BLOCK * self.block_bytes()
    }

    /// Offset of the quantized values in one activation block.
    const fn act_qs_offset(self) -> usize {
        match self {
            Self::Q4_1 => 4,
            Self::Q8_0 => 2,
        }
    }
}

/// `gemm(cols, group, acts, act_row_bytes, scales, n_tokens, out)`: for the `n_tokens ≤
/// TILE_TOKENS` activation rows starting at `acts` (each `act_row_bytes` long, quantized
/// for the weight type) and their block scales ([`act_scales_row`], one row per token),
/// writes `out[t][i]` = row `i` of the packed `group` · token `t`.
pub type PackedGemmFn = fn(
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut [[f32; PACK_ROWS]; TILE_TOKENS],
);

/// Packs `rows` rows of `cols` elements (`src`, row-major ggml blocks) into groups of
/// [`PACK_ROWS`]; `None` if `cols` isn't a whole number of blocks or `src` is the wrong
/// size.
pub fn pack(ty: PackedType, rows: usize, cols: usize, src: &[u8]) -> Option<Vec<u8>> {
    let row_bytes = ty.weight().row_bytes(cols)?;
    if !cols.is_multiple_of(BLOCK) || src.len() != row_bytes.checked_mul(rows)? {
        return None;
    }
    let groups = rows.div_ceil(PACK_ROWS);
    let mut out = vec![0u8; groups * ty.group_bytes(cols)];
    let src_block = ty.weight().block_bytes();
    for (g, dst_group) in out.chunks_exact_mut(ty.group_bytes(cols)).enumerate() {
        for (b, dst) in dst_group.chunks_exact_mut(ty.block_bytes()).enumerate() {
            for i in 0..PACK_ROWS {
                let r = g * PACK_ROWS + i;
                if r >= rows {
                    break;
                }
                let blk = &src[r * row_bytes + b * src_block..][..src_block];
                pack_block_row(ty, blk, i, dst);
            }
        }
    }
    Some(out)
}

/// Writes row `i`'s source block `blk` into packed block `dst`.
fn pack_block_row(ty: PackedType, blk: &[u8], i: usize, dst: &mut [u8]) {
    match ty {
        PackedType::Q4_1 => {
            for p in 0..4 {
                dst[p * 64 + 4 * i..][..4].copy_from_slice(&blk[4 + 4 * p..][..4]);
            }
            dst[256 + 2 * i..][..2].copy_from_slice(&blk[0..2]);
            dst[288 + 2 * i..][..2].copy_from_slice(&blk[2..4]);
        }
        PackedType::Q8_0 => {
            for g in 0..8 {
                for j in 0..4 {
                    dst[g * 64 + 4 * i + j] = blk[2 + 4 * g + j] ^ 0x80;
                }
            }
            dst[512 + 2 * i..][..2].copy_from_slice(&blk[0..2]);
        }
    }
}

/// Per block of one quantized activation row, what the packed kernels read besides the
/// values: for q4_1 weights (q8_1 activations) the block's `d` and `s = d·Σq`; for q8_0
/// weights (q8_0 activations) its `d` and `128·Σq` (exact in f32), which undoes the +128
/// weight offset. `out` has one entry per block.
pub fn act_scales_row(ty: PackedType, act_row: &[u8], out: &mut [[f32; 2]]) {
    let blk = ty.weight().act_type().block_bytes();
    for (b, o) in act_row.chunks_exact(blk).zip(out.iter_mut()) {
        *o = match ty {
            PackedType::Q4_1 => [f16_at(b, 0), f16_at(b, 2)],
            PackedType::Q8_0 => {
                let sum: i32 = b[ty.act_qs_offset()..]
                    .iter()
                    .map(|&q| i32::from(q as i8))
                    .sum();
                [f16_at(b, 0), (128 * sum) as f32]
            }
        };
    }
}

/// Panics (an internal bug) unless the kernel's inputs have the sizes it reads.
pub(crate) fn check_gemm(
    ty: PackedType,
    cols: usize,
    group: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    scales: &[[f32; 2]],
    n_tokens: usize,
) {
    let nb = cols / BLOCK;
    let act_row = ty.weight().act_type().row_bytes(cols);
    assert!(
        cols.is_multiple_of(BLOCK)
            && group.len() == ty.group_bytes(cols)
            && n_tokens <= TILE_TOKENS
            && act_row.is_some_and(|r| r <= act_row_bytes)
            && acts.len() >= act_row_bytes * n_tokens.saturating_sub(1) + act_row.unwrap_or(0)
            && scales.len() >= nb * n_tokens,
        "packed {ty:?} gemm: bad sizes (cols {cols}, group {}, acts {}, row {act_row_bytes}, \
         scales {}, tokens {n_tokens})",
        group.len(),
        acts.len(),
        scales.len()
    );
}
