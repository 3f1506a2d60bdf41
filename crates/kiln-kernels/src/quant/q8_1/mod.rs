//! q8_1 activations (for q4_1).

pub mod scalar;
