//! q8_1 activations (for q4_1).

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
pub mod scalar;
