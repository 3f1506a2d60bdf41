//! Quantized and float row kernels, one folder per type.
//!
//! Each folder has `scalar.rs`, the reference (portable, bounds-checked, ggml's integer
//! arithmetic), and on x86-64 `avx2.rs` / `avx512.rs` twins that must agree with it.
//! Callers go through [`crate::KernelTable`]; the scalar modules are public so tests
//! and tools can use the reference directly.
//!
//! The SIMD kernels are safe `#[target_feature]` functions: their bodies need no
//! `unsafe` (they check row sizes first and load through array references), and calling
//! one from code without the features is `unsafe`, which only `dispatch.rs` does.

pub(crate) mod block;
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd;

pub mod bf16;
pub mod fp16;
pub mod fp32;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
