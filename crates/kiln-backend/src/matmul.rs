//! `out = x · Wᵀ` for quantized weights, the op that dominates every step.
//!
//! Activations are quantized once per token row into the type the weight's dot product
//! wants (as llama.cpp does: q8_0 for q4_0/q5_0/q8_0, q8_1 for q4_1, q8_K for k-quants),
//! then output rows are split over the pool in chunks.
//!
//! A matrix whose type has a packed kernel on this CPU ([`QMatrix::pack`]) is repacked
//! once at load into groups of 16 interleaved rows and multiplied a tile of up to 8
//! tokens at a time (see `kiln_kernels::packed`); the same kernel serves every batch
//! size, batch 1 included, so a row's result never depends on the batch. Other types
//! take one `vec_dot` per (row, token).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kiln_kernels::packed::{self, PackedGemmFn, PackedType, PACK_ROWS, TILE_TOKENS};
use kiln_kernels::{ActType, KernelTable, WeightType};

use crate::pool::ThreadPool;
use crate::sync_ptr::SyncPtr;

/// Output rows per pool task: small enough to balance, large enough to amortise.
const ROWS_PER_TASK: usize = 16;

/// Pool tasks per thread for a packed matmul (see `matmul_packed`).
const TASKS_PER_THREAD: usize = 8;

/// Weight bytes of the groups a token tile passes over before the next tile starts.
/// Tile by tile over one group at a time, a 449-token prompt read every token's
/// activations again for each group: 4.6 MB for an 8,960-wide `ffn_down`, from L3. Over
/// a block of groups that stays in L2 (half of a 2 MiB L2), the tile's activations are
/// read once per block instead: the AVX-512 table's prefill +10% at Qwen2.5-1.5B shapes
/// (`docs/BENCHMARKS.md`, session 31).
const WEIGHT_BLOCK_BYTES: usize = 1 << 20;

/// Packed groups per pool task when repacking at load.
const PACK_GROUPS_PER_TASK: usize = 8;

/// Token rows from which activations are quantized over the pool rather than inline.
const PARALLEL_QUANTIZE_ROWS: usize = 4;

/// Where a weight matrix's bytes live.
pub enum WeightBytes {
    /// A range of a memory-mapped model file (zero copy).
    Mapped {
        source: Arc<dyn AsRef<[u8]> + Send + Sync>,
        offset: usize,
        len: usize,
    },
    /// Bytes owned by the backend (e.g. repacked at load time).
    Owned(Vec<u8>),
}

impl WeightBytes {
    pub fn bytes(&self) -> &[u8] {
        match self {
            WeightBytes::Mapped {
                source,
                offset,
                len,
            } => &(**source).as_ref()[*offset..*offset + *len],
            WeightBytes::Owned(v) => v,
        }
    }

    /// Another handle on the same bytes, for a mapping (`None` for owned bytes).
    pub fn share(&self) -> Option<WeightBytes> {
        match self {
            WeightBytes::Mapped {
                source,
                offset,
                len,
            } => Some(WeightBytes::Mapped {
                source: source.clone(),
                offset: *offset,
                len: *len,
            }),
            WeightBytes::Owned(_) => None,
        }
    }
}

/// A `rows × cols` weight matrix, row-major, each row `row_bytes` long.
pub struct QMatrix {
    pub ty: WeightType,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    /// Bytes of one activation row quantized for this weight's dot product.
    act_row_bytes: usize,
    data: WeightBytes,
    /// The row-interleaved copy and its kernel, when packed.
    packed: Option<Packed>,
}

struct Packed {
    ty: PackedType,
    /// Made at load (owned), or a previous load's copy mapped from the pack cache.
    bytes: WeightBytes,
    gemm: PackedGemmFn,
    /// Most tokens per kernel call ([`KernelTable::packed_tile_tokens`]).
    tile_tokens: usize,
}

/// Scratch reused between matmuls: quantized activations and their block scales.
#[derive(Default)]
pub struct MatmulScratch {
    acts: Vec<u8>,
    scales: Vec<[f32; 2]>,
    /// What `acts` (and `scales`) hold: the activation type, the token count, the row
    /// width, and the packed type the scales were computed for.
    holds: Option<(ActType, usize, usize, Option<PackedType>)>,
}

impl MatmulScratch {
    pub fn new() -> Self {
        Self::default()
    }
}

impl QMatrix {
    /// `None` if the byte length doesn't match the shape and type, or a row can't be
    /// quantized to the activation type the weight's dot product expects.
    pub fn new(ty: WeightType, rows: usize, cols: usize, data: WeightBytes) -> Option<Self> {
        let row_bytes = ty.row_bytes(cols)?;
        let act_row_bytes = ty.act_type().row_bytes(cols)?;
        (data.bytes().len() == row_bytes.checked_mul(rows)?).then_some(Self {
            ty,
            rows,
            cols,
            row_bytes,
            act_row_bytes,
            data,
            packed: None,
        })
    }

    /// Repacks the rows for `kt`'s packed kernel if it has one for this type (a copy of
    /// the weights, built once at load, its groups packed over `pool`); returns whether
    /// it did.
    pub fn pack(&mut self, kt: &KernelTable, pool: &ThreadPool) -> bool {
        let Some((ty, gemm, len)) = self.packed_kernel(kt) else {
            return false;
        };
        let tile_tokens = kt.packed_tile_tokens();
        let (rows, cols, src) = (self.rows, self.cols, self.data.bytes());
        let group_bytes = ty.group_bytes(cols);
        let mut bytes = vec![0u8; len];
        let failed = AtomicBool::new(false);
        pool.for_each_chunk_mut(&mut bytes, group_bytes, PACK_GROUPS_PER_TASK, |g, dst| {
            if packed::pack_group(ty, rows, cols, src, g, dst).is_none() {
                failed.store(true, Ordering::Relaxed);
            }
        });
        if failed.into_inner() {
            return false;
        }
        // Shared, so a writer can persist the copy while the matrix serves from it.
        let len = bytes.len();
        self.packed = Some(Packed {
            ty,
            bytes: WeightBytes::Mapped {
                source: Arc::new(bytes),
                offset: 0,
                len,
            },
            gemm,
            tile_tokens,
        });
        true
    }

    /// `kt`'s packed type and kernel for this matrix and the packed copy's length, if it
    /// has a kernel for the type and the rows are whole blocks.
    fn packed_kernel(&self, kt: &KernelTable) -> Option<(PackedType, PackedGemmFn, usize)> {
        let ty = PackedType::for_weight(self.ty)?;
        let gemm = kt.packed_gemm(ty)?;
        let len = self.rows.div_ceil(PACK_ROWS) * ty.group_bytes(self.cols);
        (len > 0).then_some((ty, gemm, len))
    }

    /// A handle on the packed copy, to persist: what [`adopt_packed`](Self::adopt_packed)
    /// takes back on a later load.
    pub fn packed_copy(&self) -> Option<WeightBytes> {
        self.packed.as_ref().and_then(|p| p.bytes.share())
    }

    /// Takes `bytes`, a previous [`pack`](Self::pack) of this same matrix (same type,
    /// shape and source bytes: the caller's fingerprint vouches for that), instead of
    /// packing again. `false` (nothing changed) if `kt` has no packed kernel for the type
    /// or the length is not the packed size.
    pub fn adopt_packed(&mut self, kt: &KernelTable, bytes: WeightBytes) -> bool {
        let Some((ty, gemm, len)) = self.packed_kernel(kt) else {
            return false;
        };
        if bytes.bytes().len() != len {
            return false;
        }
        self.packed = Some(Packed {
            ty,
            bytes,
            gemm,
            tile_tokens: kt.packed_tile_tokens(),
        });
        true
    }

    /// The byte range of the mapped file this matrix reads, if it lives in a mapping.
    pub fn mapped_range(&self) -> Option<(usize, usize)> {
        match &self.data {
            WeightBytes::Mapped { offset, len, .. } => Some((*offset, *len)),
            WeightBytes::Owned(_) => None,
        }
    }

    /// Bytes one matmul reads from this matrix, whatever the batch: the packed copy when
    /// packed, the mapped rows otherwise.
    pub fn bytes_read(&self) -> usize {
        self.packed
            .as_ref()
            .map_or_else(|| self.data.bytes().len(), |p| p.bytes.bytes().len())
    }

    /// Bytes of the packed copy (0 if not packed).
    pub fn packed_bytes(&self) -> usize {
        self.packed.as_ref().map_or(0, |p| p.bytes.bytes().len())
    }

    pub fn row(&self, r: usize) -> &[u8] {
        &self.data.bytes()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `out` (`out.len() == cols`).
    pub fn dequantize_row(&self, kt: &KernelTable, r: usize, out: &mut [f32]) {
        (kt.weight(self.ty).dequantize_row)(self.row(r), out);
    }
}

/// `out[t, r] = Σ_k x[t, k] · w[r, k]` for `n_tokens` rows of `x`.
///
/// `x` is `n_tokens × w.cols`, `out` is `n_tokens × w.rows`; `scratch` is reused
/// between calls.
pub fn matmul(
    pool: &ThreadPool,
    kt: &KernelTable,
    w: &QMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    scratch.holds = None;
    matmul_same_input(pool, kt, w, x, n_tokens, out, scratch);
}

/// [`matmul`] for a caller whose `x` is the input of the previous matmul with `scratch`,
/// unchanged (Q, K and V of one layer; gate and up): when that matmul's weights wanted
/// the same activation type, its quantized rows are reused instead of made again.
pub fn matmul_same_input(
    pool: &ThreadPool,
    kt: &KernelTable,
    w: &QMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    assert_eq!(x.len(), n_tokens * w.cols, "matmul input shape");
    assert_eq!(out.len(), n_tokens * w.rows, "matmul output shape");
    let tk = kt.weight(w.ty);
    let act_row = w.act_row_bytes;
    let quantize = kt.quantize(tk.act);
    let packed = w.packed.as_ref();
    // Activation blocks per row, each with one scale entry for the packed kernel.
    let nb = w.cols / tk.act.block_elems();
    let wanted = (tk.act, n_tokens, w.cols, packed.map(|p| p.ty));
    let reuse = scratch.holds == Some(wanted);
    scratch.holds = Some(wanted);
    let MatmulScratch { acts, scales, .. } = scratch;
    if acts.len() < act_row * n_tokens {
        acts.resize(act_row * n_tokens, 0);
    }
    if packed.is_some() && scales.len() < nb * n_tokens {
        scales.resize(nb * n_tokens, [0.0; 2]);
    }
    // Quantize each token's row (and its block scales for the packed kernel); over the
    // pool when there are enough rows to pay for the hand-off.
    let acts_ptr = SyncPtr::new(&mut acts[..act_row * n_tokens]);
    let scales_ptr = SyncPtr::new(&mut scales[..]);
    let quantize_token = |t: usize| {
        // SAFETY: token `t`'s activation row and scale entries belong to this call alone.
        let a = unsafe { acts_ptr.slice_mut(t * act_row, act_row) };
        quantize(&x[t * w.cols..(t + 1) * w.cols], a);
        if let Some(p) = packed {
            // SAFETY: as above; `scales` holds `nb` entries per token.
            let s = unsafe { scales_ptr.slice_mut(t * nb, nb) };
            packed::prepare_act_row(p.ty, a, s);
        }
    };
    if !reuse {
        if n_tokens >= PARALLEL_QUANTIZE_ROWS {
            pool.run(n_tokens, quantize_token);
        } else {
            (0..n_tokens).for_each(quantize_token);
        }
    }
    let acts = &acts[..act_row * n_tokens];
    if let Some(p) = packed {
        let scales = &scales[..nb * n_tokens];
        matmul_packed(pool, w, p, acts, scales, n_tokens, out, WEIGHT_BLOCK_BYTES);
        return;
    }
    let n_tasks = w.rows.div_ceil(ROWS_PER_TASK);
    let out_ptr = SyncPtr::new(out);
    let rows = w.rows;
    let vec_dot = tk.vec_dot;
    pool.run(n_tasks, |task| {
        let r0 = task * ROWS_PER_TASK;
        let r1 = (r0 + ROWS_PER_TASK).min(rows);
        for r in r0..r1 {
            let wrow = w.row(r);
            for t in 0..n_tokens {
                let v = vec_dot(w.cols, wrow, &acts[t * act_row..(t + 1) * act_row]);
                // SAFETY: (t, r) pairs are unique to this task's row range.
                unsafe { out_ptr.write(t * rows + r, v) };
            }
        }
    });
}

/// The packed path: pool tasks of consecutive groups of 16 rows; inside a task, blocks
/// of groups of up to `block_bytes` of weights ([`WEIGHT_BLOCK_BYTES`]: they stay in L2)
/// while every token tile passes over them.
#[allow(clippy::too_many_arguments)]
fn matmul_packed(
    pool: &ThreadPool,
    w: &QMatrix,
    p: &Packed,
    acts: &[u8],
    scales: &[[f32; 2]],
    n_tokens: usize,
    out: &mut [f32],
    block_bytes: usize,
) {
    let group_bytes = p.ty.group_bytes(w.cols);
    let n_groups = w.rows.div_ceil(PACK_ROWS);
    let packed = p.bytes.bytes();
    let nb = w.cols / p.ty.block_elems();
    let (rows, act_row) = (w.rows, w.act_row_bytes);
    let out_ptr = SyncPtr::new(out);
    // Group `g`'s rows for the `n` tokens from `t0`.
    let gemm_tile = |g: usize, t0: usize, n: usize, tile: &mut [[f32; PACK_ROWS]; TILE_TOKENS]| {
        let group = &packed[g * group_bytes..(g + 1) * group_bytes];
        let r0 = g * PACK_ROWS;
        let live = PACK_ROWS.min(rows - r0);
        (p.gemm)(
            w.cols,
            group,
            &acts[t0 * act_row..],
            act_row,
            &scales[t0 * nb..],
            n,
            tile,
        );
        for (t, vals) in tile.iter().enumerate().take(n) {
            // SAFETY: this task alone writes rows r0..r0+live of every token.
            let dst = unsafe { out_ptr.slice_mut((t0 + t) * rows + r0, live) };
            // A whole group is a fixed-size copy the compiler inlines (a call to
            // memmove per 64 bytes showed in profiles).
            match <&mut [f32; PACK_ROWS]>::try_from(&mut *dst) {
                Ok(d) => *d = *vals,
                Err(_) => dst.copy_from_slice(&vals[..live]),
            }
        }
    };
    // Tiles of even size (9 tokens as 5 + 4, not 8 + 1): a kernel call unpacks each
    // weight block once for its tile, so a 1-token tail pays nearly a full tile's
    // unpacking for one token. A speculative verify step is often just over a tile.
    let tiles = n_tokens.div_ceil(p.tile_tokens);
    let block_groups = (block_bytes / group_bytes).max(1);
    // Consecutive groups per task, so each thread streams long runs of memory (the
    // prefetchers lose a stream at every jump) while tasks stay small enough to balance.
    let per_task = (n_groups / (pool.n_threads() * TASKS_PER_THREAD)).max(1);
    pool.run(n_groups.div_ceil(per_task), |task| {
        let first = task * per_task;
        let end = (first + per_task).min(n_groups);
        // Written by each call before it is read (a fresh one per call was a memset).
        let mut tile = [[0f32; PACK_ROWS]; TILE_TOKENS];
        for b0 in (first..end).step_by(block_groups) {
            let block = b0..(b0 + block_groups).min(end);
            let mut t0 = 0;
            for k in 0..tiles {
                let n = (n_tokens - t0).div_ceil(tiles - k);
                block.clone().for_each(|g| gemm_tile(g, t0, n, &mut tile));
                t0 += n;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_kernels::ActType;
    use rand::{Rng, SeedableRng};

    /// A `rows × cols` q8_0 matrix of random values (q8_0 weights and activations share
    /// the block layout), packed when the CPU has the kernel.
    fn q8_0(kt: &KernelTable, rng: &mut impl Rng, rows: usize, cols: usize) -> QMatrix {
        let row_bytes = WeightType::Q8_0.row_bytes(cols).expect("whole blocks");
        let mut bytes = vec![0u8; rows * row_bytes];
        for r in bytes.chunks_exact_mut(row_bytes) {
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect();
            kt.quantize(ActType::Q8_0)(&x, r);
        }
        let mut m = QMatrix::new(WeightType::Q8_0, rows, cols, WeightBytes::Owned(bytes))
            .expect("q8_0 matrix");
        m.pack(kt, &ThreadPool::new(2));
        m
    }

    fn f32_matrix(rng: &mut impl Rng, rows: usize, cols: usize) -> QMatrix {
        let bytes = (0..rows * cols)
            .flat_map(|_| rng.random_range(-1.0f32..1.0).to_le_bytes())
            .collect();
        QMatrix::new(WeightType::F32, rows, cols, WeightBytes::Owned(bytes)).expect("f32 matrix")
    }

    /// Blocks of groups only reorder the (group, tile) calls: any block size gives every
    /// output, the same bits. 71 groups make tasks of 4 groups on two threads, so blocks
    /// of 1 and 3 groups split them (a ragged last block too); 21 tokens make 2 or 3
    /// tiles (AVX2 and AVX-512).
    #[test]
    fn weight_blocks_change_no_output() {
        let kt = KernelTable::best();
        let pool = ThreadPool::new(2);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (rows, cols, n) = (70 * PACK_ROWS + 5, 64, 21);
        let w = q8_0(kt, &mut rng, rows, cols);
        let p = w.packed.as_ref().expect("this table packs q8_0");
        let x: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
        let mut scratch = MatmulScratch::new();
        let mut want = vec![0f32; n * rows];
        matmul(&pool, kt, &w, &x, n, &mut want, &mut scratch);
        let nb = cols / kt.weight(w.ty).act.block_elems();
        let group = p.ty.group_bytes(cols);
        for block in [1, group, 3 * group, usize::MAX] {
            let mut got = vec![f32::NAN; n * rows];
            let (acts, scales) = (
                &scratch.acts[..n * w.act_row_bytes],
                &scratch.scales[..nb * n],
            );
            matmul_packed(&pool, &w, p, acts, scales, n, &mut got, block);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "block of {block} bytes"
            );
        }
    }

    #[test]
    fn reused_activations_give_what_fresh_ones_do() {
        let kt = KernelTable::best();
        let pool = ThreadPool::new(2);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (cols, n) = (96, 5);
        let x: Vec<f32> = (0..n * cols).map(|_| rng.random_range(-2.0..2.0)).collect();
        let (a, b, c) = (
            q8_0(kt, &mut rng, 40, cols),
            f32_matrix(&mut rng, 24, cols),
            q8_0(kt, &mut rng, 33, cols),
        );
        let fresh = |w: &QMatrix| {
            let mut out = vec![0f32; n * w.rows];
            matmul(&pool, kt, w, &x, n, &mut out, &mut MatmulScratch::new());
            out
        };
        let mut scratch = MatmulScratch::new();
        let mut run = |w: &QMatrix, same: bool| {
            let mut out = vec![0f32; n * w.rows];
            let f = if same { matmul_same_input } else { matmul };
            f(&pool, kt, w, &x, n, &mut out, &mut scratch);
            out
        };
        assert_eq!(run(&a, false), fresh(&a));
        // Same type: reused; another type in between: quantized again, then reused.
        assert_eq!(run(&c, true), fresh(&c));
        assert_eq!(run(&b, true), fresh(&b));
        assert_eq!(run(&c, true), fresh(&c));
        assert_eq!(run(&a, true), fresh(&a));
    }
}
