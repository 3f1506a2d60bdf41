//! `out = x · Wᵀ` for quantized weights, the op that dominates every step.
//!
//! Activations are quantized once per token row into the type the weight's dot product
//! wants (as llama.cpp does: q8_0 for q4_0/q5_0/q8_0, q8_1 for q4_1, q8_K for k-quants),
//! then output rows are split over the pool in chunks.

use std::sync::Arc;

use kiln_kernels::{KernelTable, WeightType};

use crate::pool::ThreadPool;
use crate::sync_ptr::SyncPtr;

/// Output rows per pool task: small enough to balance, large enough to amortise.
const ROWS_PER_TASK: usize = 16;

/// Where a weight matrix's bytes live.
pub enum WeightBytes {
    /// A range of a memory-mapped model file (zero copy).
    Mapped {
        source: Arc<dyn AsRef<[u8]> + Send + Sync>,
        offset: usize,
        len: usize,
    },
    /// Bytes owned by the backend (e.g. repacked at load time).
    Owned(Vec<u8>),
}

impl WeightBytes {
    pub fn bytes(&self) -> &[u8] {
        match self {
            WeightBytes::Mapped {
                source,
                offset,
                len,
            } => &(**source).as_ref()[*offset..*offset + *len],
            WeightBytes::Owned(v) => v,
        }
    }
}

/// A `rows × cols` weight matrix, row-major, each row `row_bytes` long.
pub struct QMatrix {
    pub ty: WeightType,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    /// Bytes of one activation row quantized for this weight's dot product.
    act_row_bytes: usize,
    data: WeightBytes,
}

impl QMatrix {
    /// `None` if the byte length doesn't match the shape and type, or a row can't be
    /// quantized to the activation type the weight's dot product expects.
    pub fn new(ty: WeightType, rows: usize, cols: usize, data: WeightBytes) -> Option<Self> {
        let row_bytes = ty.row_bytes(cols)?;
        let act_row_bytes = ty.act_type().row_bytes(cols)?;
        (data.bytes().len() == row_bytes.checked_mul(rows)?).then_some(Self {
            ty,
            rows,
            cols,
            row_bytes,
            act_row_bytes,
            data,
        })
    }

    pub fn row(&self, r: usize) -> &[u8] {
        &self.data.bytes()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `out` (`out.len() == cols`).
    pub fn dequantize_row(&self, kt: &KernelTable, r: usize, out: &mut [f32]) {
        (kt.weight(self.ty).dequantize_row)(self.row(r), out);
    }
}

/// `out[t, r] = Σ_k x[t, k] · w[r, k]` for `n_tokens` rows of `x`.
///
/// `x` is `n_tokens × w.cols`, `out` is `n_tokens × w.rows`; `act_scratch` is reused
/// between calls to hold the quantized activations.
pub fn matmul(
    pool: &ThreadPool,
    kt: &KernelTable,
    w: &QMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    act_scratch: &mut Vec<u8>,
) {
    assert_eq!(x.len(), n_tokens * w.cols, "matmul input shape");
    assert_eq!(out.len(), n_tokens * w.rows, "matmul output shape");
    let tk = kt.weight(w.ty);
    let act_row = w.act_row_bytes;
    let quantize = kt.quantize(tk.act);
    if act_scratch.len() < act_row * n_tokens {
        act_scratch.resize(act_row * n_tokens, 0);
    }
    for t in 0..n_tokens {
        quantize(
            &x[t * w.cols..(t + 1) * w.cols],
            &mut act_scratch[t * act_row..(t + 1) * act_row],
        );
    }
    let acts = &act_scratch[..act_row * n_tokens];
    let n_tasks = w.rows.div_ceil(ROWS_PER_TASK);
    let out_ptr = SyncPtr::new(out);
    let rows = w.rows;
    let vec_dot = tk.vec_dot;
    pool.run(n_tasks, |task| {
        let r0 = task * ROWS_PER_TASK;
        let r1 = (r0 + ROWS_PER_TASK).min(rows);
        for r in r0..r1 {
            let wrow = w.row(r);
            for t in 0..n_tokens {
                let v = vec_dot(w.cols, wrow, &acts[t * act_row..(t + 1) * act_row]);
                // SAFETY: (t, r) pairs are unique to this task's row range.
                unsafe { out_ptr.write(t * rows + r, v) };
            }
        }
    });
}
