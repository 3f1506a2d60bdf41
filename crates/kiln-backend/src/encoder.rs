//! The encoder half of the seam: the ops a BERT-style encoder's forward pass is made of
//! (`kiln-encoder`'s sentence embedder and text classifier).
//!
//! It exists so a second backend covers embeddings and classification too, not only the
//! decoder: `kiln-encoder` is written once against [`EncoderBackend`] and calls neither
//! kernels nor a thread pool. It extends [`Backend`], whose buffers it shares
//! (`Activations` and `Vector`, grown with [`Backend::reserve`], read through
//! [`Backend::host`]) and whose quantized [`Backend::matmul`] serves the int8 layers.
//!
//! Encoders differ from a decoder step in ways that shape these ops: every token of a
//! request goes through every weight at once (hundreds to thousands of rows, so the f32
//! layers are GEMMs over a [`Self::Dense`](EncoderBackend::Dense) matrix), sequences
//! are packed back to back without padding and attend to every row of their own span
//! (no KV cache, no causal mask), and norms and activations follow PyTorch's (LayerNorm,
//! exact GELU, weightless RMS norm). As in [`Backend`], every op works on the first
//! `rows` rows of its buffers, with row widths passed explicitly, and ops are coarse:
//! one call per batch-wide operation.

use crate::backend::Backend;

/// One sequence's rows in a flat batch of packed sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpan {
    pub start: usize,
    pub len: usize,
}

/// Head layout of an encoder attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    /// Floats of one row's queries (or keys, or values), all heads side by side.
    pub fn width(self) -> usize {
        self.n_heads * self.head_dim
    }
}

/// An element-wise activation of an encoder's feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderActivation {
    /// Exact (erf) GELU, PyTorch's default and BERT's `gelu`.
    GeluErf,
    /// `relu(x)²`.
    ReluSquared,
}

/// A block of consecutive rows copied from `src` to `dst` (row indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowCopy {
    pub src: usize,
    pub dst: usize,
    pub rows: usize,
}

/// Rotary embedding from precomputed tables, each `period × head_dim/2` (a model that
/// rounds its tables, as NanoGuard does to bf16, keeps those roundings).
#[derive(Debug)]
pub struct RopeTables<'a, V> {
    pub cos: &'a V,
    pub sin: &'a V,
    /// A row's position is its index modulo `period` (every input padded to it).
    pub period: usize,
}

/// The encoder ops, on the [`Backend`]'s own buffers.
pub trait EncoderBackend: Backend {
    /// An f32 `out_dim × in_dim` weight matrix (PyTorch's `Linear` layout) with an
    /// optional bias, multiplied in f32.
    type Dense: Send + Sync;

    /// Binds `weight` (`out_dim × in_dim`, row-major) and `bias` (`out_dim`).
    ///
    /// # Panics
    /// If the lengths don't fit the shape (callers read them with the shape checked).
    fn dense(
        &self,
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        out_dim: usize,
        in_dim: usize,
    ) -> Self::Dense;

    /// `weight` (`rows × cols`) quantized to q8_0 as a [`Backend::Matrix`] for
    /// [`Backend::matmul`] (prepare it before use); `None` when `cols` is not a whole
    /// number of blocks or the backend has no kernel for it.
    fn quantize_q8_0(&self, weight: &[f32], rows: usize, cols: usize) -> Option<Self::Matrix>;

    /// `out[r] = x[r] · Wᵀ + b` for `rows` rows.
    fn dense_forward(
        &self,
        w: &Self::Dense,
        x: &Self::Activations,
        rows: usize,
        out: &mut Self::Activations,
    );

    /// `out[r] = table[ids[r]]`, rows of `width` (every id inside the table).
    fn lookup_rows(
        &self,
        table: &Self::Vector,
        width: usize,
        ids: &[u32],
        out: &mut Self::Activations,
    );

    /// `out[r] += table[ids[r]]`, rows of `width` (every id inside the table).
    fn add_lookup_rows(
        &self,
        table: &Self::Vector,
        width: usize,
        ids: &[u32],
        out: &mut Self::Activations,
    );

    /// `dst[..len] = src[..len]`.
    fn copy(&self, src: &Self::Activations, dst: &mut Self::Activations, len: usize);

    /// Each of `copies` from `src` into `dst`, rows of `width`.
    fn copy_rows(
        &self,
        src: &Self::Activations,
        dst: &mut Self::Activations,
        width: usize,
        copies: &[RowCopy],
    );

    /// Each of `copies` within `x`, in order (each block as a `memmove`).
    fn move_rows(&self, x: &mut Self::Activations, width: usize, copies: &[RowCopy]);

    /// `x = a·x + b·x0` over the first `len` floats.
    fn mix(&self, x: &mut Self::Activations, a: f32, x0: &Self::Activations, b: f32, len: usize);

    /// PyTorch's `LayerNorm` of `rows` rows of `width` in place (biased variance).
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        x: &mut Self::Activations,
        weight: &Self::Vector,
        bias: &Self::Vector,
        eps: f32,
        rows: usize,
        width: usize,
    );

    /// `out[r] = x[r] / sqrt(mean(x[r]²) + eps)` (PyTorch's `F.rms_norm`, no weight).
    fn plain_rms_norm(
        &self,
        x: &Self::Activations,
        out: &mut Self::Activations,
        eps: f32,
        rows: usize,
        width: usize,
    );

    /// `act` on every float of `rows` rows of `width`, in place.
    fn activation(
        &self,
        x: &mut Self::Activations,
        rows: usize,
        width: usize,
        act: EncoderActivation,
    );

    /// In fused Q|K|V rows (`3 · heads.width()` floats): rotates every head of the
    /// queries and keys by `rope` (halves `(x1, x2)` become `(x1·cos + x2·sin,
    /// −x1·sin + x2·cos)`), then RMS-normalises each (no weight, `eps`).
    fn rotate_and_norm_qk(
        &self,
        qkv: &mut Self::Activations,
        rows: usize,
        heads: Heads,
        rope: RopeTables<'_, Self::Vector>,
        eps: f32,
    );

    /// Bidirectional attention within each span: `out = softmax(Q·Kᵀ · scale) · V` per
    /// span and head, from fused Q|K|V rows (`3 · heads.width()` floats, head-major
    /// inside each part) into `heads.width()` floats per row. Only the first
    /// `queries[i]` rows of span `i` are queries (every row of the span is still a key
    /// and a value); the other rows of `out` are left as they were.
    #[allow(clippy::too_many_arguments)]
    fn bidirectional_attention(
        &self,
        qkv: &Self::Activations,
        rows: usize,
        spans: &[RowSpan],
        queries: &[usize],
        heads: Heads,
        scale: f32,
        out: &mut Self::Activations,
    );

    /// `out[i]` = the mean of span `i`'s rows of `width` (mean pooling).
    fn mean_pool(
        &self,
        x: &Self::Activations,
        spans: &[RowSpan],
        width: usize,
        out: &mut Self::Activations,
    );

    /// `x[r] / max(‖x[r]‖₂, 1e-12)` (PyTorch's `F.normalize`) for `rows` rows, in place.
    fn l2_normalize(&self, x: &mut Self::Activations, rows: usize, width: usize);

    /// Softmax of `rows` rows of `width`, in place.
    fn softmax(&self, x: &mut Self::Activations, rows: usize, width: usize);
}
