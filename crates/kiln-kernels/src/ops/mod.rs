//! f32 primitives for the layers around the matmuls. Plain Rust written so the compiler
//! can vectorize it; results follow ggml's CPU ops (f64 accumulation where ggml uses
//! `ggml_float`, same operation order) so logits stay close to llama.cpp.
//!
//! Slice arguments must have matching lengths: a mismatch is an internal bug (shapes
//! come from the model config) and panics with a message naming the op.

mod activation;
mod convert;
pub(crate) mod exp;
pub(crate) mod f16_vector;
mod norm;
mod rope;
pub(crate) mod softmax;
mod vector;

pub use activation::{
    geglu_tanh, geglu_tanh_inplace, gelu_tanh, gelu_tanh_f16, gelu_tanh_inplace, silu,
    silu_inplace, swiglu, swiglu_inplace,
};
pub use convert::{bf16_to_f32_row, f16_to_f32_row, f32_to_bf16_row, f32_to_f16_row};
pub use exp::{exp_f32, exp_inplace};
pub use f16_vector::{
    axpy_f16, axpy_f16_rows, axpy_f16_rows_heads, axpy_f16_rows_heads_scalar, axpy_f16_scalar,
    dot_f16, dot_f16_rows, dot_f16_rows_heads, dot_f16_rows_heads_scalar, dot_f16_scalar,
    round_f16_inplace, round_f16_scalar,
};
pub use norm::{rms_norm, rms_norm_inplace};
pub use rope::{rope_inplace, RopeStyle};
pub use softmax::{softmax_inplace, softmax_rows_f32, softmax_rows_f32_scalar};
pub use vector::{add_inplace, axpy, dot_f32, scale_inplace};

/// Panics unless `a == b`; used for the length checks every op performs once per call.
#[inline]
#[track_caller]
fn check_len(op: &str, what: &str, a: usize, b: usize) {
    assert!(a == b, "{op}: {what} has length {b}, expected {a}");
}
