//! q4_1 weights (q8_1 activations).

pub mod scalar;
