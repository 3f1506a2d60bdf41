//! q5_K weights (q8_K activations).

pub mod scalar;
