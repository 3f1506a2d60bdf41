//! Kiln's compute backends: the [`Backend`] seam the model is written against, its
//! [`EncoderBackend`] extension the encoders are written against, and the CPU backend,
//! their one implementation.
//!
//! A backend knows weights, activations, KV blocks and block tables; it knows nothing
//! about requests, scheduling or sampling. On the CPU, work inside each op is split over
//! a persistent [`ThreadPool`]; per-element work goes through the runtime-selected kernel
//! table, and the encoders' f32 products through a packed GEMM.

pub mod attention;
pub mod backend;
mod cpu;
mod cpu_encoder;
mod dense;
pub mod encoder;
mod encoder_attention;
mod encoder_ops;
mod gemm;
pub mod kv;
pub mod matmul;
pub mod pool;
mod rows;
mod sync_ptr;

pub use attention::{paged_attention, AttentionParams, SeqSpan};
pub use backend::{
    Activation, Backend, LowRank, MatmulInput, Prepared, Rope, WeightMatrix, MAX_LOW_RANK,
};
pub use cpu::CpuBackend;
pub use dense::DenseMatrix;
pub use encoder::{EncoderActivation, EncoderBackend, Heads, RopeTables, RowCopy, RowSpan};
pub use kv::{KvCache, KvDtype, KvShape};
pub use matmul::{matmul, matmul_same_input, MatmulScratch, QMatrix, WeightBytes};
pub use pool::ThreadPool;
