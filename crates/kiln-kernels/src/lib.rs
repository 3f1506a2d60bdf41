//! Kiln's CPU compute kernels.
//!
//! - [`quant`]: per-type row kernels bit-compatible with ggml/GGUF block layouts:
//!   `vec_dot` (weight row · quantized activation row), `dequantize_row`, and the
//!   activation quantizers, each with a scalar reference and AVX2 / AVX-512 twins.
//! - [`KernelTable`]: plain function pointers for one instruction set, chosen once at
//!   run time ([`Isa::detect`], or [`Isa::force`]); the one place CPU features are
//!   checked. The [`ops`] with SIMD variants ([`OpKernels`]) dispatch through it too.
//! - [`packed`]: row-interleaved weights and the batched (token-tile) matmul kernels
//!   over them, for the types where that beats `vec_dot` per (row, token).
//! - [`ops`]: f32 primitives (RMS norm, softmax, RoPE, activations, conversions).
//!
//! A leaf crate: no allocation inside kernels, no threads, no I/O. `unsafe` appears only
//! in the per-ISA kernel files (`#[target_feature]` code, each function with its
//! `# Safety` contract) and in the table wiring (`dispatch.rs`, `dispatch/op_kernels.rs`),
//! which hands out an ISA's kernels only after the CPU has been checked for it.

mod dispatch;
mod error;
pub mod ops;
pub mod packed;
pub mod quant;
mod types;

pub use dispatch::{
    ActKernels, DequantizeFn, Isa, KernelTable, OpKernels, QuantizeFn, TypeKernels, VecDotFn,
};
pub use error::{Error, Result};
pub use half;
pub use types::{ActType, WeightType, QK_K};
