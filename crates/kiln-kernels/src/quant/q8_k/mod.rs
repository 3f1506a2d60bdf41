//! q8_K activations (for the k-quants).

pub mod scalar;
