//! The per-row LoRA delta after a projection.

use kiln_backend::ThreadPool;
use kiln_kernels::ops;

use super::{LoraBatch, Target, MAX_RANK};

/// Rows per pool task: a delta is small, so several rows share a hand-off.
const ROWS_PER_TASK: usize = 4;

/// `out[r] += B·(A·x[r])` for every row `r < n` whose adapter adapts `target` of `layer`
/// (the scale is folded into `B`); `x` has `inputs` floats per row, `out` `outputs`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_lora_delta(
    pool: &ThreadPool,
    lora: &LoraBatch<'_>,
    layer: usize,
    target: Target,
    x: &[f32],
    inputs: usize,
    n: usize,
    out: &mut [f32],
    outputs: usize,
) {
    if lora.is_empty() {
        return;
    }
    pool.for_each_chunk_mut(&mut out[..n * outputs], outputs, ROWS_PER_TASK, |r, y| {
        let Some(p) = lora.adapter(r).and_then(|a| a.pair(layer, target)) else {
            return;
        };
        // Batch validation checked every adapter fits the model; this keeps a mismatch
        // from ever indexing out of bounds.
        if (p.inputs, p.outputs) != (inputs, outputs) {
            return;
        }
        let x = &x[r * inputs..(r + 1) * inputs];
        let mut t = [0f32; MAX_RANK];
        for (k, tk) in t[..p.rank].iter_mut().enumerate() {
            *tk = ops::dot_f32(&p.a[k * inputs..(k + 1) * inputs], x);
        }
        for (k, &tk) in t[..p.rank].iter().enumerate() {
            ops::axpy(tk, &p.b_t[k * outputs..(k + 1) * outputs], y);
        }
    });
}
