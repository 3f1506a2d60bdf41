//! Kiln's compute backends: the [`Backend`] seam the model is written against, and the
//! CPU backend, its one implementation.
//!
//! A backend knows weights, activations, KV blocks and block tables; it knows nothing
//! about requests, scheduling or sampling. On the CPU, work inside each op is split over
//! a persistent [`ThreadPool`]; per-element work goes through the runtime-selected kernel
//! table.

pub mod attention;
pub mod backend;
mod cpu;
pub mod kv;
pub mod matmul;
pub mod pool;
mod sync_ptr;

pub use attention::{paged_attention, AttentionParams, SeqSpan};
pub use backend::{
    Activation, Backend, LowRank, MatmulInput, Prepared, Rope, WeightMatrix, MAX_LOW_RANK,
};
pub use cpu::CpuBackend;
pub use kv::{KvCache, KvDtype, KvShape};
pub use matmul::{matmul, matmul_same_input, MatmulScratch, QMatrix, WeightBytes};
pub use pool::ThreadPool;
