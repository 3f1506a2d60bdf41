//! q4_0 weights (q8_0 activations).

pub mod scalar;
