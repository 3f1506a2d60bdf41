//! Row-interleaved ("packed") weights and the batched matrix-multiply kernels over them.
//!
//! `vec_dot` computes one weight row against one activation row, so a batch of `T`
//! tokens unpacks every weight block `T` times and reduces every product across SIMD
//! lanes `T` times. Packing puts 16 rows side by side, 4 consecutive elements of each in
//! one 32-bit lane, so one `vpdpbusd` with a broadcast activation word advances 16 rows
//! at once with no horizontal reduction, and a block's unpacked weights serve up to
//! [`TILE_TOKENS`] tokens from registers. The same layout serves AVX2, which handles the
//! two 8-row halves of each 64-byte vector with `vpmaddubsw` + `vpmaddwd`.
//!
//! Every type is stored as unsigned integer quants `q` (the ggml value is an affine
//! function of `q`), split into parts that unpack with a mask and a shift. Per 32-element
//! sub-block of a block, groups of 16 rows one after another, blocks in column order:
//! - **nibbles**: four 64-byte vectors; lane `i` of vector `p` holds bytes `4p..4p+4` of
//!   row `i` with elements `4p+j` in the low and `16+4p+j` in the high nibbles, so
//!   "vector" `g` (0..8) of the unpacked sub-block holds elements `4g..4g+4`;
//! - **high bits** (q5_0, q5_K: bit 4; q6_K: bits 4–5): one (two) 64-byte vectors; bit
//!   `g` of byte `4i+j` is bit 4 of element `4g+j` (q6_K: bits `2t..2t+2` of vector `h`
//!   are bits 4–5 of element `4(4h+t)+j`);
//! - q8_0 instead keeps whole bytes (eight vectors, each `q + 128`, unsigned as
//!   `vpdpbusd` wants).
//!
//! Then the block's per-row metadata: `d` (and q4_1's `m`, the k-quants' `dmin`) as 16
//! f16; q4_K/q5_K's scales and mins as `[sub-block][row]` bytes; q6_K's signed scales as
//! `[sub-block][row][2]` bytes (the two 16-element scales of a sub-block side by side,
//! which is the int16 pair `vpdpwssd` multiplies with a pair of activation block sums).
//!
//! The integer part of every dot product is exact (k-quant scales applied to exact
//! sub-block sums, as ggml does); only the per-block float steps round. Rows past the
//! matrix's end are zero (their outputs are discarded). Every token's result is computed
//! by the same sequence of operations whatever else is in its tile, so a row's output
//! never depends on the batch — the engine's batch invariance rests on that.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
mod layout;
pub(crate) mod scalar;

use crate::quant::block::{f16_at, f32_at};
use crate::types::{WeightType, QK_K};

/// The scalar reference kernel for `ty` (what every ISA's kernel is tested against).
pub fn reference(ty: PackedType) -> PackedGemmFn {
    crate::dispatch::packed_reference(ty)
}

/// Version of the packed layout described above: bump it whenever [`pack`]'s output
/// changes, so copies persisted by an older build are never read as this one's.
pub const LAYOUT_VERSION: u32 = 1;

/// Rows interleaved in one packed group (one 32-bit lane each of a 512-bit vector).
pub const PACK_ROWS: usize = 16;

/// Most tokens one kernel call handles: each weight block is unpacked once per call, so
/// more tokens amortize it further (AVX2 keeps the sums of all 16 in L1; AVX-512 runs
/// them as two register tiles of 8).
pub const TILE_TOKENS: usize = 16;

/// Most tokens of one AVX-512 register tile: 8 weight vectors and 8 tokens' int32 sums,
/// float sums and temporaries fill the 32 registers, so the kernel runs a call of more
/// tokens as two, and callers are better served by tiles of this size
/// ([`crate::KernelTable::packed_tile_tokens`]): 20 tokens as 7 + 7 + 6, not 5 + 5 + 5 + 5.
pub(crate) const AVX512_REGISTER_TILE: usize = 8;

/// Elements of a sub-block: the unit the nibble and high-bit vectors cover.
pub(crate) const SUB: usize = 32;

/// A weight type the packed kernels support.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PackedType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl PackedType {
    /// Every packed type, in kernel-table order.
    pub const ALL: [PackedType; 7] = [
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q8_0,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
    ];

    /// The packed form of `ty`, if there is one.
    pub fn for_weight(ty: WeightType) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.weight() == ty)
    }

    /// The type with discriminant `v` (for the kernels' const-generic type parameter).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only the x86 kernels
    pub(crate) const fn from_u8(v: u8) -> Self {
        Self::ALL[v as usize]
    }

    pub const fn weight(self) -> WeightType {
        match self {
            Self::Q4_0 => WeightType::Q4_0,
            Self::Q4_1 => WeightType::Q4_1,
            Self::Q5_0 => WeightType::Q5_0,
            Self::Q8_0 => WeightType::Q8_0,
            Self::Q4_K => WeightType::Q4_K,
            Self::Q5_K => WeightType::Q5_K,
            Self::Q6_K => WeightType::Q6_K,
        }
    }

    /// Whether this is a k-quant (256-element super-blocks, q8_K activations).
    pub const fn is_k(self) -> bool {
        matches!(self, Self::Q4_K | Self::Q5_K | Self::Q6_K)
    }

    /// Elements of one block (and of one activation block, which matches it).
    pub const fn block_elems(self) -> usize {
        if self.is_k() {
            QK_K
        } else {
            32
        }
    }

    /// 32-element sub-blocks of one block.
    pub(crate) const fn subs(self) -> usize {
        self.block_elems() / SUB
    }

    /// High bits stored beside the nibbles (0 for 4-bit types and q8_0).
    pub(crate) const fn high_bits(self) -> usize {
        match self {
            Self::Q5_0 | Self::Q5_K => 1,
            Self::Q6_K => 2,
            _ => 0,
        }
    }

    /// Offset of the high-bit vectors in a packed block (the quants come first).
    pub(crate) const fn high_offset(self) -> usize {
        match self {
            Self::Q8_0 => 8 * 64,
            _ => self.subs() * 4 * 64,
        }
    }

    /// Offset of the per-row metadata (after the quants and high bits).
    pub(crate) const fn meta_offset(self) -> usize {
        self.high_offset() + self.subs() * self.high_bits() * 64
    }

    /// Offset of the 16 `d` (f16); the k-quants keep their scales before it.
    pub(crate) const fn d_offset(self) -> usize {
        self.meta_offset()
            + match self {
                Self::Q4_K | Self::Q5_K => 2 * 8 * PACK_ROWS,
                Self::Q6_K => 16 * PACK_ROWS,
                _ => 0,
            }
    }

    /// Offset of the 16 q4_1 `m` or k-quant `dmin` (f16), after `d`.
    pub(crate) const fn m_offset(self) -> usize {
        self.d_offset() + 2 * PACK_ROWS
    }

    /// Offset of the k-quants' mins (`[sub-block][row]`, after the scales).
    pub(crate) const fn mins_offset(self) -> usize {
        self.meta_offset() + 8 * PACK_ROWS
    }

    /// Bytes of one packed block of [`PACK_ROWS`] rows.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_1 | Self::Q4_K | Self::Q5_K => self.m_offset() + 2 * PACK_ROWS,
            _ => self.d_offset() + 2 * PACK_ROWS,
        }
    }

    /// Bytes of one packed group of [`PACK_ROWS`] rows of `cols` elements.
    pub fn group_bytes(self, cols: usize) -> usize {
        cols / self.block_elems() * self.block_bytes()
    }

    /// Offset of the quantized values in one activation block.
    pub(crate) const fn act_qs_offset(self) -> usize {
        match self {
            Self::Q4_1 => 4,
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 => 2,
            Self::Q4_K | Self::Q5_K | Self::Q6_K => 4,
        }
    }

    /// Offset of q8_K's 16-element block sums in one activation block (for q4_K and q5_K,
    /// of the 32-element sums [`prepare_act_row`] puts there).
    pub(crate) const fn act_bsums_offset(self) -> usize {
        4 + QK_K
    }

    /// The constant `q` is offset by (`x = d·(q − offset)`), for the offset-only types.
    const fn zero_point(self) -> i32 {
        match self {
            Self::Q4_0 => 8,
            Self::Q5_0 => 16,
            Self::Q8_0 => 128,
            _ => 0,
        }
    }
}

/// `gemm(cols, group, acts, act_row_bytes, scales, n_tokens, out)`: for the `n_tokens ≤
/// TILE_TOKENS` activation rows starting at `acts` (each `act_row_bytes` long, quantized
/// for the weight type) and their block scales ([`prepare_act_row`], one row per token),
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
    let row_bytes = ty.weight().row_bytes(cols).filter(|&b| b > 0)?;
    if src.len() != row_bytes.checked_mul(rows)? {
        return None;
    }
    let mut out = vec![0u8; rows.div_ceil(PACK_ROWS) * ty.group_bytes(cols)];
    for (g, dst) in out.chunks_exact_mut(ty.group_bytes(cols)).enumerate() {
        pack_group(ty, rows, cols, src, g, dst)?;
    }
    Some(out)
}

/// Packs group `g` (rows `16g..16g+16`) of the matrix [`pack`] takes into `dst`, one
/// group's bytes (so a caller can pack groups in parallel); `None` on a size mismatch.
pub fn pack_group(
    ty: PackedType,
    rows: usize,
    cols: usize,
    src: &[u8],
    g: usize,
    dst: &mut [u8],
) -> Option<()> {
    let row_bytes = ty.weight().row_bytes(cols).filter(|&b| b > 0)?;
    let first = g.checked_mul(PACK_ROWS).filter(|&r| r < rows)?;
    if src.len() != row_bytes.checked_mul(rows)? || dst.len() != ty.group_bytes(cols) {
        return None;
    }
    dst.fill(0);
    let src_block = ty.weight().block_bytes();
    for (b, dst) in dst.chunks_exact_mut(ty.block_bytes()).enumerate() {
        for i in 0..PACK_ROWS.min(rows - first) {
            let blk = &src[(first + i) * row_bytes + b * src_block..][..src_block];
            layout::pack_block_row(ty, blk, i, dst);
        }
    }
    Some(())
}

/// Prepares one quantized activation row for the packed kernels of `ty` and writes, per
/// block, what they read besides the values: for q4_1 weights (q8_1 activations) the
/// block's `d` and `s = d·Σq`; for the offset types (q4_0, q5_0, q8_0 over q8_0
/// activations) its `d` and `offset·Σq` (exact in f32), which undoes the weights' zero
/// point; for the k-quants (q8_K) its `d` and 0. `out` has one entry per block.
///
/// For q4_K and q5_K it also replaces each q8_K block's 16 sums of 16 quants by the 8
/// sums of 32 that their min term multiplies (`B_0 … B_7` as i16, the field's first 16
/// bytes): the kernels broadcast them as the pairs `(B_2k, B_2k+1)` where they used to
/// add and pair them per row group and token, 11–15% of a q4_K tile on both tables
/// (`docs/BENCHMARKS.md`, session 35). The row then suits only this packed type, which
/// is why the backend keys its reuse of quantized rows by packed type.
pub fn prepare_act_row(ty: PackedType, act_row: &mut [u8], out: &mut [[f32; 2]]) {
    let blk = ty.weight().act_type().block_bytes();
    for (b, o) in act_row.chunks_exact_mut(blk).zip(out.iter_mut()) {
        *o = match ty {
            PackedType::Q4_1 => [f16_at(b, 0), f16_at(b, 2)],
            PackedType::Q4_K | PackedType::Q5_K => {
                let sums = &mut b[ty.act_bsums_offset()..][..32];
                for s in 0..8 {
                    // Sums 2s and 2s+1 (bytes 4s..4s+4) are read before B_s overwrites
                    // bytes 2s..2s+2, which only earlier sums occupied.
                    let sum16 = |k: usize| i16::from_le_bytes([sums[2 * k], sums[2 * k + 1]]);
                    // |B_s| ≤ 32·127: an exact i16.
                    let b_s = sum16(2 * s) + sum16(2 * s + 1);
                    sums[2 * s..2 * s + 2].copy_from_slice(&b_s.to_le_bytes());
                }
                [f32_at(b, 0), 0.0]
            }
            PackedType::Q6_K => [f32_at(b, 0), 0.0],
            PackedType::Q4_0 | PackedType::Q5_0 | PackedType::Q8_0 => {
                let sum: i32 = b[ty.act_qs_offset()..]
                    .iter()
                    .map(|&q| i32::from(q as i8))
                    .sum();
                [f16_at(b, 0), (ty.zero_point() * sum) as f32]
            }
        };
    }
}

/// How far ahead of the block it is reading a kernel prefetches, in bytes (rounded up to
/// whole packed blocks: 2 of q4_K, q5_K or q6_K). A k-quant block is read out of order —
/// its scales first, then the nibbles and high bits as two interleaved streams, `d` last
/// — and on Zen 4 the hardware prefetchers alone left batch-1 q6_K at about half the read
/// bandwidth (`docs/BENCHMARKS.md`, session 30). Twice this distance was slower.
///
/// The 32-element types, read in order, gain nothing at batch 1 and don't prefetch there.
/// In a tile of several tokens they do: with weights from memory, 8-token q4_1, q5_0 and
/// q8_0 tiles ran 14–28% faster on both tables, and cost 0–2% in cache (session 36).
const PREFETCH_AHEAD: usize = 4096;

/// Prefetches sub-block `s`'s eighth of the cache lines of the packed k-quant block that
/// lies [`PREFETCH_AHEAD`] past `blk`, so a block's prefetches spread over its sub-blocks.
/// Past the group's end it reads the next group's lines or none: a prefetch never faults.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(ty: PackedType, blk: *const u8, s: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let block = ty.block_bytes();
    let lines = block.div_ceil(64);
    let per = lines.div_ceil(8);
    let target = blk.wrapping_add(PREFETCH_AHEAD.div_ceil(block) * block);
    for line in per * s..(per * (s + 1)).min(lines) {
        // SAFETY: a prefetch is only a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(target.wrapping_add(64 * line).cast()) };
    }
}

/// Prefetches every cache line of the packed block [`PREFETCH_AHEAD`] past `blk`: the
/// 32-element types' tiles, which read a block in one go.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_block_ahead(ty: PackedType, blk: *const u8) {
    for s in 0..8 {
        prefetch_ahead(ty, blk, s);
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
    let nb = cols / ty.block_elems();
    let act_row = ty.weight().act_type().row_bytes(cols);
    assert!(
        cols.is_multiple_of(ty.block_elems())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_blocks_keep_the_source_size_or_near_it() {
        for ty in PackedType::ALL {
            let src = PACK_ROWS * ty.weight().block_bytes();
            let packed = ty.block_bytes();
            // k-quant scales and mins are unpacked from 6 to 8 bits (4 bytes a row).
            assert!(packed >= src && packed <= src + 4 * PACK_ROWS, "{ty:?}");
            assert_eq!(PackedType::from_u8(ty as u8), ty);
        }
        // The layouts the q4_1 and q8_0 kernels were written against.
        assert_eq!(PackedType::Q4_1.block_bytes(), 320);
        assert_eq!(PackedType::Q8_0.block_bytes(), 544);
        assert_eq!(PackedType::Q6_K.block_bytes(), 16 * 210);
    }
}
