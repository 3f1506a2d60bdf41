//! f32 weights and f32 activations.

pub mod scalar;
