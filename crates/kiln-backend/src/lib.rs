//! Kiln's CPU backend: coarse operations the model is built from.
//!
//! It knows weights, activations, KV blocks and block tables; it knows nothing about
//! requests, scheduling or sampling. Work inside each op is split over a persistent
//! [`ThreadPool`]; per-element work goes through the runtime-selected kernel table.

pub mod attention;
pub mod kv;
pub mod matmul;
pub mod pool;
mod sync_ptr;

pub use attention::{paged_attention, AttentionParams, SeqSpan};
pub use kv::{KvCache, KvDtype, KvShape};
pub use matmul::{matmul, matmul_same_input, MatmulScratch, QMatrix, WeightBytes};
pub use pool::ThreadPool;
