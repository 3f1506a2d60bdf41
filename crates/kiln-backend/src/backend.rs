//! The seam between the model and the hardware: the coarse ops one transformer step is
//! made of, which a backend implements on its own memory.
//!
//! The model's forward pass (`kiln-model`) is written once against [`Backend`]; weights,
//! activations and the KV cache are the backend's associated types, so they live where
//! its kernels read them (host memory for [`CpuBackend`](crate::CpuBackend), device
//! memory for a GPU). Ops are coarse on purpose: a whole projection, a whole layer's
//! attention over the paged cache, RoPE plus the KV write for every row of the step.
//! That is the granularity a GPU backend fuses, captures into a graph, or JIT-compiles;
//! per-element calls through a trait would be the wrong seam. The model is generic over
//! the backend, so the CPU path is monomorphised and costs no dispatch.
//!
//! Every op works on the first `rows` rows of its buffers (a step's token count); the
//! row widths come from the model's shapes and are passed explicitly.

use kiln_kernels::ops::RopeStyle;
use kiln_kernels::WeightType;

use crate::attention::{AttentionParams, SeqSpan};
use crate::kv::{KvDtype, KvShape};
use crate::matmul::WeightBytes;

/// The highest LoRA rank [`Backend::add_low_rank`] accepts (PEFT's adapters stay far
/// below it).
pub const MAX_LOW_RANK: usize = 256;

/// The gate activation of a gated feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// GeGLU with the tanh approximation of GELU: `gelu(gate) * up`.
    GeluTanh,
}

/// Whether a matmul's input is the one the previous matmul with the same scratch read,
/// unchanged (Q, K and V of a layer; gate and up), so its quantized form can be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulInput {
    New,
    Same,
}

/// How one layer rotates its queries and keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dimensions of each head (the rest pass through).
    pub dims: usize,
    pub base: f32,
    pub style: RopeStyle,
}

/// One row's low-rank update `y += B·(A·x)` (a LoRA pair with its scale folded into `B`).
#[derive(Debug, Clone, Copy)]
pub struct LowRank<'a> {
    pub rank: usize,
    /// `rank × inputs`, row-major.
    pub a: &'a [f32],
    /// `rank × outputs`, row-major (`B` transposed).
    pub b_t: &'a [f32],
}

/// What preparing a weight matrix for the backend's kernels did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Bytes of the backend's own copy (repacked, or uploaded), 0 if none was made.
    pub copy_bytes: usize,
    /// The range of the mapped file the backend will never read again, so the loader
    /// can hand its pages back to the OS.
    pub unused_mapping: Option<(usize, usize)>,
}

/// A weight matrix as the model sees it: its shape and its per-step read cost.
pub trait WeightMatrix {
    /// Output features.
    fn rows(&self) -> usize;
    /// Input features.
    fn cols(&self) -> usize;
    /// Bytes one matmul reads from this matrix, whatever the batch.
    fn bytes_read(&self) -> usize;
}

/// A compute backend: where weights, activations and the KV cache live, and the ops a
/// transformer step runs on them.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A quantized `rows × cols` weight matrix in the backend's layout.
    type Matrix: WeightMatrix + Send + Sync;
    /// A small f32 weight vector (norm weights, biases).
    type Vector: Send + Sync;
    /// Rows of f32 activations.
    type Activations: Default + Send;
    /// State one matmul leaves for the next (quantized activations).
    type MatmulScratch: Default + Send;
    /// The paged K/V store of every layer.
    type Kv: Send;

    /// Binds a matrix of type `ty` to `bytes` (`None` if they don't fit the shape or the
    /// backend has no kernel for the type).
    fn matrix(
        &self,
        ty: WeightType,
        rows: usize,
        cols: usize,
        bytes: WeightBytes,
    ) -> Option<Self::Matrix>;

    /// Brings a matrix into the layout the backend's kernels read fastest (done once at
    /// load; matrices only looked up, like the embedding table, are not prepared).
    fn prepare(&self, m: &mut Self::Matrix) -> Prepared;

    /// Names the layout [`prepare`](Self::prepare) makes, for a cache of prepared copies:
    /// two backends with the same name read each other's copies. `None` (the default):
    /// nothing worth keeping.
    fn prepared_layout(&self) -> Option<String> {
        None
    }

    /// A handle on the backend's prepared copy of `m`, to persist while `m` serves from
    /// it (`None` if it made none).
    fn prepared_copy(&self, _m: &Self::Matrix) -> Option<WeightBytes> {
        None
    }

    /// Takes `bytes`, an earlier [`prepared_copy`](Self::prepared_copy) of the same
    /// matrix in this [`prepared_layout`](Self::prepared_layout), instead of preparing;
    /// `Prepared::default()` if it can't (then call `prepare`).
    fn adopt_prepared(&self, _m: &mut Self::Matrix, _bytes: WeightBytes) -> Prepared {
        Prepared::default()
    }

    fn vector(&self, values: Vec<f32>) -> Self::Vector;

    /// Grows `a` to hold at least `len` floats (never shrinks).
    fn reserve(&self, a: &mut Self::Activations, len: usize);

    /// # Panics
    /// If `dtype` can't store heads of `shape.head_dim` (callers check it when
    /// configuring, with [`KvDtype::supports_head_dim`]).
    fn new_kv(&self, shape: KvShape, dtype: KvDtype) -> Self::Kv;

    fn kv_shape(kv: &Self::Kv) -> KvShape;

    /// Appends the stored bytes of KV block `block` (every layer, K and V) to `out`, in
    /// a layout [`import_kv_block`](Self::import_kv_block) of a cache with the same
    /// shape and dtype reads back bit for bit: what a disk tier keeps of a block.
    fn export_kv_block(kv: &Self::Kv, block: usize, out: &mut Vec<u8>);

    /// Overwrites KV block `block` with bytes [`export_kv_block`](Self::export_kv_block)
    /// wrote; false (and nothing written) if their length does not fit this cache.
    fn import_kv_block(kv: &mut Self::Kv, block: usize, bytes: &[u8]) -> bool;

    /// `out[r] = table[tokens[r]] · scale`.
    fn embed(
        &self,
        table: &Self::Matrix,
        tokens: &[u32],
        scale: Option<f32>,
        out: &mut Self::Activations,
    );

    /// `out[r] = W · x[r]` for `rows` rows (`x` is `rows × w.cols()`).
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        w: &Self::Matrix,
        x: &Self::Activations,
        rows: usize,
        out: &mut Self::Activations,
        scratch: &mut Self::MatmulScratch,
        input: MatmulInput,
    );

    /// `out[r] += B_r·(A_r·x[r])` for every row `r < rows` that `update(r)` names
    /// (`inputs` and `outputs` floats per row; rank at most [`MAX_LOW_RANK`]).
    #[allow(clippy::too_many_arguments)]
    fn add_low_rank<'u>(
        &self,
        x: &Self::Activations,
        inputs: usize,
        rows: usize,
        out: &mut Self::Activations,
        outputs: usize,
        update: impl Fn(usize) -> Option<LowRank<'u>> + Sync,
    );

    /// `out[r] = rms_norm(x[r]) · w` for `rows` rows of `width` floats.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm(
        &self,
        x: &Self::Activations,
        w: &Self::Vector,
        eps: f32,
        rows: usize,
        width: usize,
        out: &mut Self::Activations,
    );

    /// RMS-normalises each `width`-wide piece of the first `len` floats of `x` in place
    /// (rows, or heads within rows).
    fn rms_norm_inplace(
        &self,
        x: &mut Self::Activations,
        w: &Self::Vector,
        eps: f32,
        len: usize,
        width: usize,
    );

    /// `out[i] = rms_norm(x[rows[i]]) · w`: the rows whose logits are wanted.
    fn gather_rms_norm(
        &self,
        x: &Self::Activations,
        rows: &[u32],
        w: &Self::Vector,
        eps: f32,
        width: usize,
        out: &mut Self::Activations,
    );

    /// `x[r] += bias` for `rows` rows of `bias`'s width `width`.
    fn add_bias(&self, x: &mut Self::Activations, bias: &Self::Vector, rows: usize, width: usize);

    /// Rotates every row's queries and keys by its position, then stores its keys and
    /// values in `kv` at layer `layer`, slot `slots[r]`.
    #[allow(clippy::too_many_arguments)]
    fn rope_and_store_kv(
        &self,
        rope: &Rope,
        positions: &[u32],
        q: &mut Self::Activations,
        k: &mut Self::Activations,
        v: &Self::Activations,
        kv: &mut Self::Kv,
        layer: usize,
        slots: &[u32],
    );

    /// Causal attention of every row's queries over its sequence's paged K/V
    /// (`positions.len()` rows).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        kv: &Self::Kv,
        layer: usize,
        params: &AttentionParams,
        q: &Self::Activations,
        positions: &[u32],
        seqs: &[SeqSpan],
        block_tables: &[u32],
        out: &mut Self::Activations,
    );

    /// `gate[r] = act(gate[r]) * up[r]` for `rows` rows of `width`.
    fn gated_activation(
        &self,
        gate: &mut Self::Activations,
        up: &Self::Activations,
        rows: usize,
        width: usize,
        act: Activation,
    );

    /// The residual add `x[r] += o[r]` for `rows` rows of `width`.
    fn add_rows(&self, x: &mut Self::Activations, o: &Self::Activations, rows: usize, width: usize);

    /// The first `len` floats of `a` in host memory (where the sampler reads logits; a
    /// device backend copies them out).
    fn host<'a>(&self, a: &'a mut Self::Activations, len: usize) -> &'a mut [f32];
}
