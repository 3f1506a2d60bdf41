//! `kiln_kernels::ops` f32 primitives around the matmuls, on one thread (they are per-row
//! primitives; the backend spreads rows and heads over the pool), in GB/s of the bytes
//! they must touch, and for attention's f16 kernels in GFLOPS too (they are bound by
//! their own arithmetic, not by memory). Their inputs fit in L1/L2, as they do in the
//! forward pass.

use kiln_kernels::half::f16;
use kiln_kernels::ops;
use serde::{Deserialize, Serialize};

use super::timing::{time_calls, CallTime, TimingPlan};
use super::weights::random_activations;

/// Token rows per `rms_norm` / `softmax` call measured.
const ROWS: usize = 32;
/// SmolLM2's hidden size.
const HIDDEN: usize = 576;
/// Attention scores per softmax row (a 1024-token context).
const CONTEXT: usize = 1024;
/// SmolLM2's and Qwen2.5-0.5B's head size.
const HEAD_DIM: usize = 64;
/// Query heads per KV head in Qwen2.5-0.5B and -7B (14 / 2, 28 / 4): the attention
/// kernels serve a whole GQA group per pass over the cached rows.
const GQA_GROUP: usize = 7;

/// One op measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    pub op: String,
    pub shape: String,
    pub threads: usize,
    /// Bytes read plus bytes written per call, each element counted once.
    pub bytes: usize,
    pub time: CallTime,
    pub gb_per_s: f64,
    /// For the attention kernels: floating-point operations per second (a fused
    /// multiply-add counts 2), to set against the FMA ceiling.
    #[serde(default)]
    pub gflops: Option<f64>,
}

/// The ops measured, in report order.
pub(crate) const OPS: [&str; 6] = [
    "rms_norm",
    "softmax_inplace",
    "softmax_rows_f32",
    "dot_f16_rows",
    "dot_f16_rows_heads",
    "axpy_f16_rows_heads",
];

/// `n` random values as f16 (cached keys or values).
fn halves(n: usize, seed: u64) -> Vec<f16> {
    random_activations(n, seed)
        .into_iter()
        .map(f16::from_f32)
        .collect()
}

/// Measures op `name` (one of [`OPS`]); `None` for an unknown name.
pub(crate) fn measure(name: &str, timing: &TimingPlan) -> Option<OpRow> {
    let mut flops = None;
    let (shape, bytes, time) = match name {
        "rms_norm" => {
            let x = random_activations(ROWS * HIDDEN, 1);
            let weight = random_activations(HIDDEN, 2);
            let mut out = vec![0f32; ROWS * HIDDEN];
            let time = time_calls(timing, |_| {
                for (xr, or) in x.chunks_exact(HIDDEN).zip(out.chunks_exact_mut(HIDDEN)) {
                    ops::rms_norm(xr, &weight, 1e-5, or);
                }
            });
            std::hint::black_box(&out);
            // x and out per row, the weight once per row.
            (format!("{ROWS}×{HIDDEN}"), ROWS * HIDDEN * 12, time)
        }
        "softmax_inplace" => {
            let mut x = random_activations(ROWS * CONTEXT, 3);
            let time = time_calls(timing, |_| {
                for row in x.chunks_exact_mut(CONTEXT) {
                    ops::softmax_inplace(row);
                }
            });
            std::hint::black_box(&x);
            (format!("{ROWS}×{CONTEXT}"), ROWS * CONTEXT * 8, time)
        }
        "softmax_rows_f32" => {
            // Attention's form: all the rows in one call, their sums side by side.
            let mut x = random_activations(ROWS * CONTEXT, 3);
            let time = time_calls(timing, |_| ops::softmax_rows_f32(&mut x, CONTEXT));
            std::hint::black_box(&x);
            (format!("{ROWS}×{CONTEXT}"), ROWS * CONTEXT * 8, time)
        }
        "dot_f16_rows" => {
            let keys = halves(CONTEXT * HEAD_DIM, 4);
            let q = random_activations(HEAD_DIM, 5);
            let mut out = vec![0f32; CONTEXT];
            let time = time_calls(timing, |_| ops::dot_f16_rows(&keys, &q, 0.125, &mut out));
            std::hint::black_box(&out);
            flops = Some(2 * CONTEXT * HEAD_DIM);
            let bytes = CONTEXT * HEAD_DIM * 2 + HEAD_DIM * 4 + CONTEXT * 4;
            (format!("{CONTEXT} keys × {HEAD_DIM}"), bytes, time)
        }
        "dot_f16_rows_heads" => {
            // One attention task's scores at batch 1: a GQA group against the cache.
            let keys = halves(CONTEXT * HEAD_DIM, 4);
            let qs = random_activations(GQA_GROUP * HEAD_DIM, 5);
            let mut out = vec![0f32; GQA_GROUP * CONTEXT];
            let time = time_calls(timing, |_| {
                ops::dot_f16_rows_heads(&keys, &qs, HEAD_DIM, 0.125, &mut out, CONTEXT)
            });
            std::hint::black_box(&out);
            flops = Some(2 * GQA_GROUP * CONTEXT * HEAD_DIM);
            let bytes = CONTEXT * HEAD_DIM * 2 + GQA_GROUP * (HEAD_DIM + CONTEXT) * 4;
            (
                format!("{GQA_GROUP} heads × {CONTEXT} keys × {HEAD_DIM}"),
                bytes,
                time,
            )
        }
        "axpy_f16_rows_heads" => {
            // The same task's weighted sum of values.
            let values = halves(CONTEXT * HEAD_DIM, 6);
            let w = random_activations(GQA_GROUP * CONTEXT, 7);
            let mut ys = vec![0f32; GQA_GROUP * HEAD_DIM];
            let time = time_calls(timing, |_| {
                ops::axpy_f16_rows_heads(&w, CONTEXT, &values, HEAD_DIM, &mut ys)
            });
            std::hint::black_box(&ys);
            flops = Some(2 * GQA_GROUP * CONTEXT * HEAD_DIM);
            let bytes = CONTEXT * HEAD_DIM * 2 + GQA_GROUP * (CONTEXT + 2 * HEAD_DIM) * 4;
            (
                format!("{GQA_GROUP} heads × {CONTEXT} values × {HEAD_DIM}"),
                bytes,
                time,
            )
        }
        _ => return None,
    };
    Some(OpRow {
        op: name.to_owned(),
        shape,
        threads: 1,
        bytes,
        gb_per_s: bytes as f64 / time.median_s / 1e9,
        gflops: flops.map(|f| f as f64 / time.median_s / 1e9),
        time,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_listed_op_runs() {
        let plan = TimingPlan {
            warmup: 0,
            min_reps: 1,
            max_reps: 1,
            budget: Duration::ZERO,
        };
        for name in OPS {
            let row = measure(name, &plan).expect("listed op");
            assert_eq!(row.op, name);
            assert!(row.gb_per_s > 0.0 && row.bytes > 0);
            let arithmetic = name.contains("f16");
            assert_eq!(row.gflops.is_some(), arithmetic, "{name}");
        }
        assert!(measure("gelu", &plan).is_none());
    }
}
