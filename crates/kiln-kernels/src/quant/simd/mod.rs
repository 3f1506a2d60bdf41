//! x86-64 building blocks shared by the per-type SIMD kernels.
//!
//! Loads and stores take array references, so the only `unsafe` here is the intrinsic
//! call on a pointer that the reference proves valid for the full width.

pub(crate) mod avx2;
pub(crate) mod avx512;
