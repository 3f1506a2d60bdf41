//! q8_0 weights and activations.

pub mod scalar;
