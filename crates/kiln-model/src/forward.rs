//! The transformer forward pass shared by every architecture.
//!
//! One definition: architecture differences (biases, QK-norm, sandwich norms, GELU vs
//! SiLU, sliding windows, embedding scale, RoPE style) are data in [`ModelConfig`] and
//! optional weights, not separate code paths.

use kiln_backend::{
    matmul, matmul_same_input, paged_attention, AttentionParams, KvCache, MatmulScratch, QMatrix,
    ThreadPool,
};
use std::cell::Cell;
use std::time::{Duration, Instant};

use kiln_kernels::{ops, KernelTable};

use crate::config::{Activation, ModelConfig};
use crate::lora::{add_lora_delta, LoraBatch, Target};
use crate::weights::{LayerWeights, Weights};
use crate::workspace::Workspace;
use crate::BatchInput;

pub(crate) struct Ctx<'a> {
    pub cfg: &'a ModelConfig,
    pub weights: &'a Weights,
    pub pool: &'a ThreadPool,
    pub kt: &'static KernelTable,
    /// The step's adapters, applied after the projections they target.
    pub lora: LoraBatch<'a>,
    /// Time spent in matmuls and in attention during this pass (for the profile).
    pub matmul_time: Cell<Duration>,
    pub attention_time: Cell<Duration>,
}

/// Whether a projection's input is the one the previous projection read (Q, K and V of
/// a layer; gate and up), so its quantized activations can be reused.
#[derive(Clone, Copy, PartialEq)]
enum Input {
    New,
    Same,
}

impl Ctx<'_> {
    fn linear(
        &self,
        w: &QMatrix,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        act: &mut MatmulScratch,
        input: Input,
    ) {
        let start = Instant::now();
        let mm = match input {
            Input::New => matmul,
            Input::Same => matmul_same_input,
        };
        mm(
            self.pool,
            self.kt,
            w,
            &x[..rows * w.cols],
            rows,
            &mut out[..rows * w.rows],
            act,
        );
        self.matmul_time
            .set(self.matmul_time.get() + start.elapsed());
    }

    /// A block's projection `target` of layer `l`: the base matmul, then the LoRA delta
    /// of the rows whose adapter adapts it.
    #[allow(clippy::too_many_arguments)]
    fn project(
        &self,
        (l, target): (usize, Target),
        input: Input,
        w: &QMatrix,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        act: &mut MatmulScratch,
    ) {
        self.linear(w, x, rows, out, act, input);
        if self.lora.is_empty() {
            return;
        }
        let start = Instant::now();
        add_lora_delta(
            self.pool, &self.lora, l, target, x, w.cols, rows, out, w.rows,
        );
        self.matmul_time
            .set(self.matmul_time.get() + start.elapsed());
    }

    /// Runs every layer over the batch and writes logits for `batch.logits_rows`.
    pub fn forward(&self, batch: &BatchInput<'_>, kv: &mut KvCache, ws: &mut Workspace) {
        let (cfg, n) = (self.cfg, batch.n_rows());
        let d = cfg.d_model;
        for (r, &tok) in batch.token_ids.iter().enumerate() {
            let row = &mut ws.x[r * d..(r + 1) * d];
            self.weights
                .token_embd
                .dequantize_row(self.kt, tok as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        for (l, lw) in self.weights.layers.iter().enumerate() {
            self.attention_block(l, lw, batch, kv, ws);
            self.ffn_block(l, lw, n, ws);
        }
        let m = batch.logits_rows.len();
        for (i, &r) in batch.logits_rows.iter().enumerate() {
            let r = r as usize;
            ops::rms_norm(
                &ws.x[r * d..(r + 1) * d],
                &self.weights.output_norm,
                cfg.rms_eps,
                &mut ws.final_h[i * d..(i + 1) * d],
            );
        }
        let vocab = cfg.vocab_size;
        self.linear(
            &self.weights.output,
            &ws.final_h,
            m,
            &mut ws.logits[..m * vocab],
            &mut ws.act,
            Input::New,
        );
    }

    fn attention_block(
        &self,
        l: usize,
        lw: &LayerWeights,
        batch: &BatchInput<'_>,
        kv: &mut KvCache,
        ws: &mut Workspace,
    ) {
        let cfg = self.cfg;
        let (n, d, hd) = (batch.n_rows(), cfg.d_model, cfg.head_dim);
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        self.rms_norm_rows(&ws.x, &lw.attn_norm, n, &mut ws.h);
        let (h, act) = (&ws.h, &mut ws.act);
        self.project((l, Target::Q), Input::New, &lw.wq, h, n, &mut ws.q, act);
        self.project((l, Target::K), Input::Same, &lw.wk, h, n, &mut ws.k, act);
        self.project((l, Target::V), Input::Same, &lw.wv, h, n, &mut ws.v, act);
        add_bias(&mut ws.q[..n * qd], lw.bq.as_deref());
        add_bias(&mut ws.k[..n * kvd], lw.bk.as_deref());
        add_bias(&mut ws.v[..n * kvd], lw.bv.as_deref());
        if let Some(w) = &lw.q_norm {
            norm_rows_inplace(&mut ws.q[..n * qd], w, cfg.rms_eps, hd);
        }
        if let Some(w) = &lw.k_norm {
            norm_rows_inplace(&mut ws.k[..n * kvd], w, cfg.rms_eps, hd);
        }
        let local = cfg.layer_is_local[l];
        let base = if local {
            cfg.rope_base_local
        } else {
            cfg.rope_base
        };
        for r in 0..n {
            let pos = batch.positions[r];
            let q = &mut ws.q[r * qd..(r + 1) * qd];
            ops::rope_inplace(q, cfg.n_heads, hd, cfg.rope_dims, pos, base, cfg.rope_style);
            let k = &mut ws.k[r * kvd..(r + 1) * kvd];
            ops::rope_inplace(
                k,
                cfg.n_kv_heads,
                hd,
                cfg.rope_dims,
                pos,
                base,
                cfg.rope_style,
            );
            kv.write(
                l,
                batch.slot_mapping[r] as usize,
                &ws.k[r * kvd..(r + 1) * kvd],
                &ws.v[r * kvd..(r + 1) * kvd],
            );
        }
        let params = AttentionParams {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            scale: cfg.attn_scale,
            window: if local { cfg.sliding_window } else { None },
            max_context: ws.max_context.unwrap_or(cfg.context_length),
        };
        let start = Instant::now();
        paged_attention(
            self.pool,
            kv,
            l,
            &params,
            &ws.q[..n * qd],
            batch.positions,
            batch.seqs,
            batch.block_tables,
            &mut ws.attn[..n * qd],
        );
        self.attention_time
            .set(self.attention_time.get() + start.elapsed());
        self.project(
            (l, Target::O),
            Input::New,
            &lw.wo,
            &ws.attn,
            n,
            &mut ws.o,
            &mut ws.act,
        );
        if let Some(w) = &lw.post_attn_norm {
            norm_rows_inplace(&mut ws.o[..n * d], w, cfg.rms_eps, d);
        }
        self.add_rows(&mut ws.x[..n * d], &ws.o[..n * d]);
    }

    fn ffn_block(&self, l: usize, lw: &LayerWeights, n: usize, ws: &mut Workspace) {
        let cfg = self.cfg;
        let (d, ff) = (cfg.d_model, cfg.ffn_dim);
        self.rms_norm_rows(&ws.x, &lw.ffn_norm, n, &mut ws.h);
        let (h, act) = (&ws.h, &mut ws.act);
        self.project(
            (l, Target::Gate),
            Input::New,
            &lw.w_gate,
            h,
            n,
            &mut ws.gate,
            act,
        );
        self.project(
            (l, Target::Up),
            Input::Same,
            &lw.w_up,
            h,
            n,
            &mut ws.up,
            act,
        );
        let (gate, up) = (&mut ws.gate[..n * ff], &ws.up[..n * ff]);
        let act = match cfg.activation {
            Activation::Silu => ops::swiglu_inplace,
            Activation::GeluTanh => ops::geglu_tanh_inplace,
        };
        self.pool
            .for_each_chunk_mut(gate, ff, ROWS_PER_TASK, |r, g| {
                act(g, &up[r * ff..(r + 1) * ff])
            });
        self.project(
            (l, Target::Down),
            Input::New,
            &lw.w_down,
            &ws.gate,
            n,
            &mut ws.o,
            &mut ws.act,
        );
        if let Some(w) = &lw.post_ffn_norm {
            norm_rows_inplace(&mut ws.o[..n * d], w, cfg.rms_eps, d);
        }
        self.add_rows(&mut ws.x[..n * d], &ws.o[..n * d]);
    }

    /// `out[r] = rms_norm(x[r]) · w` for the first `n` rows, over the pool.
    fn rms_norm_rows(&self, x: &[f32], w: &[f32], n: usize, out: &mut [f32]) {
        let (d, eps) = (self.cfg.d_model, self.cfg.rms_eps);
        self.pool
            .for_each_chunk_mut(&mut out[..n * d], d, ROWS_PER_TASK, |r, o| {
                ops::rms_norm(&x[r * d..(r + 1) * d], w, eps, o);
            });
    }

    /// The residual add `x += o`, row by row over the pool.
    fn add_rows(&self, x: &mut [f32], o: &[f32]) {
        let d = self.cfg.d_model;
        self.pool.for_each_chunk_mut(x, d, ROWS_PER_TASK, |r, row| {
            ops::add_inplace(row, &o[r * d..(r + 1) * d]);
        });
    }
}

/// Rows per pool task for the element-wise ops: enough work to pay for the hand-off.
const ROWS_PER_TASK: usize = 4;

/// RMS-normalises each `width`-wide chunk of `x` in place (rows, or heads within rows).
fn norm_rows_inplace(x: &mut [f32], w: &[f32], eps: f32, width: usize) {
    for chunk in x.chunks_exact_mut(width) {
        ops::rms_norm_inplace(chunk, w, eps);
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            ops::add_inplace(row, b);
        }
    }
}
