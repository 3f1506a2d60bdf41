//! The transformer forward pass shared by every architecture, over any [`Backend`].
//!
//! One definition: architecture differences (biases, QK-norm, sandwich norms, GELU vs
//! SiLU, sliding windows, embedding scale, RoPE style) are data in [`ModelConfig`] and
//! optional weights, not separate code paths. Every op is a backend call over the whole
//! step's rows, so the pass reads as the model's math and the backend owns the memory.

use std::cell::Cell;
use std::time::{Duration, Instant};

use kiln_backend::{AttentionParams, Backend, LowRank, MatmulInput, Rope, WeightMatrix};

use crate::config::ModelConfig;
use crate::lora::{LoraBatch, Target};
use crate::weights::{LayerWeights, Weights};
use crate::workspace::Workspace;
use crate::BatchInput;

pub(crate) struct Ctx<'a, B: Backend> {
    pub cfg: &'a ModelConfig,
    pub weights: &'a Weights<B>,
    pub backend: &'a B,
    /// The step's adapters, applied after the projections they target.
    pub lora: LoraBatch<'a>,
    /// Time spent in matmuls and in attention during this pass (for the profile).
    pub matmul_time: Cell<Duration>,
    pub attention_time: Cell<Duration>,
}

impl<B: Backend> Ctx<'_, B> {
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &self,
        w: &B::Matrix,
        x: &B::Activations,
        rows: usize,
        out: &mut B::Activations,
        act: &mut B::MatmulScratch,
        input: MatmulInput,
    ) {
        let start = Instant::now();
        self.backend.matmul(w, x, rows, out, act, input);
        self.matmul_time
            .set(self.matmul_time.get() + start.elapsed());
    }

    /// A block's projection `target` of layer `l`: the base matmul, then the LoRA delta
    /// of the rows whose adapter adapts it.
    #[allow(clippy::too_many_arguments)]
    fn project(
        &self,
        (l, target): (usize, Target),
        input: MatmulInput,
        w: &B::Matrix,
        x: &B::Activations,
        rows: usize,
        out: &mut B::Activations,
        act: &mut B::MatmulScratch,
    ) {
        self.linear(w, x, rows, out, act, input);
        if self.lora.is_empty() {
            return;
        }
        let start = Instant::now();
        let (inputs, outputs) = (w.cols(), w.rows());
        let lora = &self.lora;
        self.backend
            .add_low_rank(x, inputs, rows, out, outputs, |r| {
                let p = lora.adapter(r)?.pair(l, target)?;
                // Batch validation checked every adapter fits the model; this keeps a
                // mismatch from ever indexing out of bounds.
                ((p.inputs, p.outputs) == (inputs, outputs)).then_some(LowRank {
                    rank: p.rank,
                    a: &p.a,
                    b_t: &p.b_t,
                })
            });
        self.matmul_time
            .set(self.matmul_time.get() + start.elapsed());
    }

    /// Runs every layer over the batch and writes logits for `batch.logits_rows`.
    pub fn forward(&self, batch: &BatchInput<'_>, kv: &mut B::Kv, ws: &mut Workspace<B>) {
        let (cfg, b, w) = (self.cfg, self.backend, self.weights);
        b.embed(&w.token_embd, batch.token_ids, cfg.embed_scale, &mut ws.x);
        for (l, lw) in w.layers.iter().enumerate() {
            self.attention_block(l, lw, batch, kv, ws);
            self.ffn_block(l, lw, batch.n_rows(), ws);
        }
        let (d, eps) = (cfg.d_model, cfg.rms_eps);
        b.gather_rms_norm(
            &ws.x,
            batch.logits_rows,
            &w.output_norm,
            eps,
            d,
            &mut ws.final_h,
        );
        let m = batch.logits_rows.len();
        let (final_h, act) = (&ws.final_h, &mut ws.act);
        self.linear(&w.output, final_h, m, &mut ws.logits, act, MatmulInput::New);
    }

    fn attention_block(
        &self,
        l: usize,
        lw: &LayerWeights<B>,
        batch: &BatchInput<'_>,
        kv: &mut B::Kv,
        ws: &mut Workspace<B>,
    ) {
        let (cfg, b) = (self.cfg, self.backend);
        let (n, d, hd, eps) = (batch.n_rows(), cfg.d_model, cfg.head_dim, cfg.rms_eps);
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        b.rms_norm(&ws.x, &lw.attn_norm, eps, n, d, &mut ws.h);
        let (h, act) = (&ws.h, &mut ws.act);
        let (new, same) = (MatmulInput::New, MatmulInput::Same);
        self.project((l, Target::Q), new, &lw.wq, h, n, &mut ws.q, act);
        self.project((l, Target::K), same, &lw.wk, h, n, &mut ws.k, act);
        self.project((l, Target::V), same, &lw.wv, h, n, &mut ws.v, act);
        for (x, bias, width) in [
            (&mut ws.q, &lw.bq, qd),
            (&mut ws.k, &lw.bk, kvd),
            (&mut ws.v, &lw.bv, kvd),
        ] {
            if let Some(bias) = bias {
                b.add_bias(x, bias, n, width);
            }
        }
        if let Some(w) = &lw.q_norm {
            b.rms_norm_inplace(&mut ws.q, w, eps, n * qd, hd);
        }
        if let Some(w) = &lw.k_norm {
            b.rms_norm_inplace(&mut ws.k, w, eps, n * kvd, hd);
        }
        let local = cfg.layer_is_local[l];
        let rope = Rope {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            dims: cfg.rope_dims,
            base: if local {
                cfg.rope_base_local
            } else {
                cfg.rope_base
            },
            style: cfg.rope_style,
        };
        let (q, k, v) = (&mut ws.q, &mut ws.k, &ws.v);
        b.rope_and_store_kv(&rope, batch.positions, q, k, v, kv, l, batch.slot_mapping);
        let params = AttentionParams {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            scale: cfg.attn_scale,
            window: if local { cfg.sliding_window } else { None },
            max_context: ws.max_context.unwrap_or(cfg.context_length),
        };
        let start = Instant::now();
        b.attention(
            kv,
            l,
            &params,
            &ws.q,
            batch.positions,
            batch.seqs,
            batch.block_tables,
            &mut ws.attn,
        );
        self.attention_time
            .set(self.attention_time.get() + start.elapsed());
        let (attn, act) = (&ws.attn, &mut ws.act);
        let o = &mut ws.o;
        self.project((l, Target::O), MatmulInput::New, &lw.wo, attn, n, o, act);
        if let Some(w) = &lw.post_attn_norm {
            b.rms_norm_inplace(&mut ws.o, w, eps, n * d, d);
        }
        b.add_rows(&mut ws.x, &ws.o, n, d);
    }

    fn ffn_block(&self, l: usize, lw: &LayerWeights<B>, n: usize, ws: &mut Workspace<B>) {
        let (cfg, b) = (self.cfg, self.backend);
        let (d, ff, eps) = (cfg.d_model, cfg.ffn_dim, cfg.rms_eps);
        b.rms_norm(&ws.x, &lw.ffn_norm, eps, n, d, &mut ws.h);
        let (h, act) = (&ws.h, &mut ws.act);
        let (new, same) = (MatmulInput::New, MatmulInput::Same);
        self.project((l, Target::Gate), new, &lw.w_gate, h, n, &mut ws.gate, act);
        self.project((l, Target::Up), same, &lw.w_up, h, n, &mut ws.up, act);
        b.gated_activation(&mut ws.gate, &ws.up, n, ff, cfg.activation);
        let (gate, act) = (&ws.gate, &mut ws.act);
        self.project((l, Target::Down), new, &lw.w_down, gate, n, &mut ws.o, act);
        if let Some(w) = &lw.post_ffn_norm {
            b.rms_norm_inplace(&mut ws.o, w, eps, n * d, d);
        }
        b.add_rows(&mut ws.x, &ws.o, n, d);
    }
}
