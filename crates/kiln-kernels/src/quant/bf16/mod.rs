//! bf16 weights (f32 activations).

pub mod scalar;
