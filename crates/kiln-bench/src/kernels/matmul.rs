//! `kiln_backend::matmul` on every weight type the catalogue's models use, at SmolLM2's
//! and Qwen2.5-0.5B's shapes, through the same public API the model calls.
//!
//! Each call reads a different matrix from a set larger than the last-level cache (the
//! set's size is a setting), so batch-1 calls stream their weights from memory as a
//! decode step over a whole model does, instead of finding them in cache.

use std::sync::Arc;

use kiln_backend::{matmul, MatmulScratch, QMatrix, ThreadPool, WeightBytes};
use kiln_kernels::packed::PackedType;
use kiln_kernels::{KernelTable, WeightType};
use serde::{Deserialize, Serialize};

use super::ceilings::Ceilings;
use super::timing::{time_calls, CallTime, TimingPlan};
use super::weights::{random_activations, random_rows};
use crate::error::{Error, Result};

/// A weight type on one matmul path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulKernel {
    pub ty: WeightType,
    /// Repacked for the batched kernel ([`QMatrix::pack`]) rather than one `vec_dot` per
    /// (row, token).
    pub packed: bool,
}

impl MatmulKernel {
    pub fn name(self) -> String {
        let path = if self.packed { "packed" } else { "vec_dot" };
        format!("{} {path}", self.ty.name())
    }
}

/// Every packed type (the catalogue's: SmolLM2 q4_1 with a q8_0 LM head; Gemma 3 and
/// Qwen2.5 Q4_K_M mostly q5_0 — their 640- and 896-wide rows are not whole k-quant
/// super-blocks — with q4_K / q6_K where they are, and q8_0; plus q4_0 and q5_K, common
/// elsewhere), then q5_0 and q4_K through one `vec_dot` per (row, token) for comparison.
pub(crate) const KERNELS: [MatmulKernel; 9] = [
    packed(WeightType::Q4_1),
    packed(WeightType::Q8_0),
    packed(WeightType::Q5_0),
    packed(WeightType::Q4_K),
    packed(WeightType::Q6_K),
    packed(WeightType::Q4_0),
    packed(WeightType::Q5_K),
    MatmulKernel {
        ty: WeightType::Q5_0,
        packed: false,
    },
    MatmulKernel {
        ty: WeightType::Q4_K,
        packed: false,
    },
];

const fn packed(ty: WeightType) -> MatmulKernel {
    MatmulKernel { ty, packed: true }
}

/// A weight matrix shape (`rows` outputs × `cols` inputs) and its role in a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub rows: usize,
    pub cols: usize,
    pub role: &'static str,
}

/// SmolLM2-135M's matmul shapes, then Qwen2.5-0.5B's (its LM head, 151,936 × 896, is
/// larger than the rotating weight set and is measured in the model's profile instead).
pub(crate) const CATALOGUE_SHAPES: [Shape; 7] = [
    shape(576, 576, "attn_q / attn_output"),
    shape(1536, 576, "ffn_gate / ffn_up"),
    shape(576, 1536, "ffn_down"),
    shape(49152, 576, "output (LM head)"),
    shape(896, 896, "qwen2.5 attn_q / attn_output"),
    shape(4864, 896, "qwen2.5 ffn_gate / ffn_up"),
    shape(896, 4864, "qwen2.5 ffn_down"),
];

/// The shapes of the Q4_K_M files people download most (rows 1536–4096 wide, whole
/// k-quant super-blocks): Qwen2.5-1.5B's, its 151,936-row LM head (one matrix larger
/// than any cache, so it streams from memory by itself), Llama-3.2-3B's, and the
/// 2048- and 4096-wide rows of Llama 3.2 1B and the 7–8B models.
pub(crate) const KQUANT_SHAPES: [Shape; 10] = [
    shape(1536, 1536, "qwen2.5-1.5b attn_q / attn_output"),
    shape(8960, 1536, "qwen2.5-1.5b ffn_gate / ffn_up"),
    shape(1536, 8960, "qwen2.5-1.5b ffn_down"),
    shape(151936, 1536, "qwen2.5-1.5b output (LM head)"),
    shape(2048, 2048, "llama-3.2-1b attn_q / attn_output"),
    shape(3072, 3072, "llama-3.2-3b attn_q / attn_output"),
    shape(8192, 3072, "llama-3.2-3b ffn_gate / ffn_up"),
    shape(3072, 8192, "llama-3.2-3b ffn_down"),
    shape(4096, 4096, "llama-3.1-8b attn_q / attn_output"),
    shape(14336, 4096, "llama-3.1-8b ffn_gate / ffn_up"),
];

/// The k-quant kernels the [`KQUANT_SHAPES`] run (those files are q4_K with q6_K for
/// `ffn_down`, `attn_v` and the LM head; q5_K for Q5_K_M), and q4_K through `vec_dot`.
pub(crate) const KQUANT_KERNELS: [MatmulKernel; 4] = [
    packed(WeightType::Q4_K),
    packed(WeightType::Q6_K),
    packed(WeightType::Q5_K),
    MatmulKernel {
        ty: WeightType::Q4_K,
        packed: false,
    },
];

const fn shape(rows: usize, cols: usize, role: &'static str) -> Shape {
    Shape { rows, cols, role }
}

/// One kernel at one shape and token count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatmulRow {
    /// `<type> packed` or `<type> vec_dot`.
    pub kernel: String,
    pub weight_type: String,
    pub packed: bool,
    pub role: String,
    pub rows: usize,
    pub cols: usize,
    pub tokens: usize,
    /// Bytes of one matrix as the kernel reads it (the packed copy when packed).
    pub weight_bytes: usize,
    /// Distinct matrices the calls rotate through.
    pub matrices: usize,
    pub time: CallTime,
    /// `2·rows·cols·tokens` per median call, / 10⁹.
    pub gops: f64,
    /// `gops` as a percentage of the int8 ceiling.
    pub int8_ceiling_pct: f64,
    /// Packed k-quants at more than one token (compute-bound): `gops` as a percentage of
    /// the k-quant mix ceiling, the rate of their inner loop alone.
    #[serde(default)]
    pub kquant_mix_pct: Option<f64>,
    /// Batch 1 only: weight bytes read per second (median call), / 10⁹.
    pub weight_gb_per_s: Option<f64>,
    /// Batch 1 only: `weight_gb_per_s` as a percentage of the memory ceiling.
    pub bandwidth_pct: Option<f64>,
}

/// A (kernel, shape) that could not run here, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub kernel: String,
    pub rows: usize,
    pub cols: usize,
    pub reason: String,
}

/// What one (kernel, shape) measurement needs besides the kernel and shape.
pub(crate) struct MatmulEnv<'a> {
    pub pool: &'a ThreadPool,
    pub kt: &'static KernelTable,
    pub ceilings: &'a Ceilings,
    pub timing: TimingPlan,
    /// Bytes of distinct weights the calls rotate through (0: one matrix, kept hot).
    pub weight_set_bytes: usize,
}

/// Why `kernel` can't run at `shape` on this machine, if it can't.
pub(crate) fn skip_reason(kernel: MatmulKernel, shape: Shape, kt: &KernelTable) -> Option<String> {
    if kernel.ty.row_bytes(shape.cols).is_none() {
        return Some(format!(
            "{} rows hold whole {}-element blocks; {} columns are not a multiple",
            kernel.ty,
            kernel.ty.block_elems(),
            shape.cols
        ));
    }
    let has_packed = kiln_kernels::packed::PackedType::for_weight(kernel.ty)
        .and_then(|p| kt.packed_gemm(p))
        .is_some();
    (kernel.packed && !has_packed).then(|| {
        format!(
            "no packed {} kernel for this CPU's instruction set ({})",
            kernel.ty,
            kt.isa()
        )
    })
}

/// Measures `kernel` at `shape` for each token count, calling `step` before each.
pub(crate) fn measure(
    env: &MatmulEnv<'_>,
    kernel: MatmulKernel,
    shape: Shape,
    token_counts: &[usize],
    step: &mut dyn FnMut(&str),
) -> Result<Vec<MatmulRow>> {
    let set = matrix_set(env, kernel, shape)?;
    let weight_bytes = match set.first() {
        Some(m) if kernel.packed => m.packed_bytes(),
        _ => kernel.ty.row_bytes(shape.cols).unwrap_or(0) * shape.rows,
    };
    let mut scratch = MatmulScratch::new();
    let k_quant = kernel.packed && PackedType::for_weight(kernel.ty).is_some_and(|p| p.is_k());
    let mut rows = Vec::with_capacity(token_counts.len());
    for &tokens in token_counts {
        step(&format!(
            "{} {}×{} × {tokens} tokens",
            kernel.name(),
            shape.rows,
            shape.cols
        ));
        let x = random_activations(tokens * shape.cols, tokens as u64);
        let mut out = vec![0f32; tokens * shape.rows];
        let time = time_calls(&env.timing, |i| {
            let w = &set[i % set.len()];
            matmul(env.pool, env.kt, w, &x, tokens, &mut out, &mut scratch);
        });
        std::hint::black_box(&out);
        let gops = 2.0 * (shape.rows * shape.cols * tokens) as f64 / time.median_s / 1e9;
        let weight_gb_per_s = (tokens == 1).then(|| weight_bytes as f64 / time.median_s / 1e9);
        rows.push(MatmulRow {
            kernel: kernel.name(),
            weight_type: kernel.ty.name().to_owned(),
            packed: kernel.packed,
            role: shape.role.to_owned(),
            rows: shape.rows,
            cols: shape.cols,
            tokens,
            weight_bytes,
            matrices: set.len(),
            time,
            gops,
            int8_ceiling_pct: 100.0 * gops / env.ceilings.int8.gops,
            kquant_mix_pct: env
                .ceilings
                .int8_kquant_mix
                .as_ref()
                .filter(|_| k_quant && tokens > 1)
                .map(|mix| 100.0 * gops / mix.gops),
            weight_gb_per_s,
            bandwidth_pct: weight_gb_per_s.map(|g| 100.0 * g / env.ceilings.memory.gb_per_s),
        });
    }
    Ok(rows)
}

/// Enough distinct random matrices of `kernel`'s type and `shape` to fill the weight
/// set (one when the set is 0), all views of one buffer; packed when the kernel is.
fn matrix_set(env: &MatmulEnv<'_>, kernel: MatmulKernel, shape: Shape) -> Result<Vec<QMatrix>> {
    let fail = |reason: String| Error::Kernel {
        kernel: kernel.name(),
        reason,
    };
    let matrix_bytes = kernel
        .ty
        .row_bytes(shape.cols)
        .and_then(|r| r.checked_mul(shape.rows))
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            fail(format!(
                "no {}×{} matrix of this type",
                shape.rows, shape.cols
            ))
        })?;
    let count = env.weight_set_bytes.div_ceil(matrix_bytes).max(1);
    let seed =
        (kernel.ty.ggml_type_id() as u64) << 40 ^ (shape.rows as u64) << 20 ^ shape.cols as u64;
    let bytes = random_rows(kernel.ty, shape.rows * count, shape.cols, seed)
        .ok_or_else(|| fail(format!("{} columns are not whole blocks", shape.cols)))?;
    let source: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes);
    (0..count)
        .map(|i| {
            let data = WeightBytes::Mapped {
                source: source.clone(),
                offset: i * matrix_bytes,
                len: matrix_bytes,
            };
            let mut m = QMatrix::new(kernel.ty, shape.rows, shape.cols, data)
                .ok_or_else(|| fail("the backend refused the matrix's shape".to_owned()))?;
            if kernel.packed && !m.pack(env.kt, env.pool) {
                return Err(fail(format!(
                    "the {} kernels could not pack it",
                    env.kt.isa()
                )));
            }
            Ok(m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_quants_skip_576_and_896_columns() {
        let kt = KernelTable::best();
        let q4k = KERNELS[8];
        assert!(skip_reason(q4k, CATALOGUE_SHAPES[0], kt).is_some_and(|r| r.contains("576")));
        assert!(skip_reason(q4k, CATALOGUE_SHAPES[4], kt).is_some_and(|r| r.contains("896")));
        assert_eq!(skip_reason(q4k, CATALOGUE_SHAPES[2], kt), None);
        assert_eq!(skip_reason(q4k, CATALOGUE_SHAPES[6], kt), None);
        assert_eq!(skip_reason(KERNELS[7], CATALOGUE_SHAPES[3], kt), None);
        assert_eq!(KERNELS[0].name(), "q4_1 packed");
        assert_eq!(KERNELS[3].name(), "q4_K packed");
        assert_eq!(KERNELS[7].name(), "q5_0 vec_dot");
    }
}
