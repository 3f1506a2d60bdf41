//! BERT's encoder stack (post-norm), run over a flat batch of packed sequences.

use kiln_backend::ThreadPool;

use crate::attention::{attention, Heads, Span};
use crate::bert::config::BertConfig;
use crate::error::Result;
use crate::linear::Linear;
use crate::ops::{gelu_erf_inplace, layer_norm, mean_rows};
use crate::rows::for_each_row_block;
use crate::weights::Tensors;

/// A `LayerNorm`'s parameters.
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Norm {
    fn load(t: &Tensors, prefix: &str, dim: usize) -> Result<Self> {
        Ok(Self {
            weight: t.f32(&format!("{prefix}.weight"), &[dim])?,
            bias: t.f32(&format!("{prefix}.bias"), &[dim])?,
        })
    }

    fn apply_rows(&self, x: &mut [f32], eps: f32) {
        for row in x.chunks_exact_mut(self.weight.len()) {
            layer_norm(row, &self.weight, &self.bias, eps);
        }
    }
}

struct Layer {
    /// Query, key and value projections fused into one `3·d × d` product.
    qkv: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// BERT weights, f32.
pub(crate) struct BertModel {
    cfg: BertConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    /// Row 0 of the token-type table: every input is a single segment.
    token_type0: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

impl BertModel {
    pub fn load(t: Tensors, cfg: &BertConfig) -> Result<Self> {
        let t = t.with_prefix_if_needed("embeddings.word_embeddings.weight", "bert.");
        let d = cfg.hidden_size;
        let mut token_type0 = t.f32(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, d],
        )?;
        token_type0.truncate(d);
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let proj =
                |name: &str| Linear::load(&t, &format!("{p}.attention.self.{name}"), d, d, true);
            layers.push(Layer {
                qkv: Linear::concat(vec![proj("query")?, proj("key")?, proj("value")?]),
                attn_out: Linear::load(&t, &format!("{p}.attention.output.dense"), d, d, true)?,
                attn_norm: Norm::load(&t, &format!("{p}.attention.output.LayerNorm"), d)?,
                intermediate: Linear::load(
                    &t,
                    &format!("{p}.intermediate.dense"),
                    cfg.intermediate_size,
                    d,
                    true,
                )?,
                output: Linear::load(
                    &t,
                    &format!("{p}.output.dense"),
                    d,
                    cfg.intermediate_size,
                    true,
                )?,
                output_norm: Norm::load(&t, &format!("{p}.output.LayerNorm"), d)?,
            });
        }
        Ok(Self {
            word: t.f32("embeddings.word_embeddings.weight", &[cfg.vocab_size, d])?,
            position: t.f32(
                "embeddings.position_embeddings.weight",
                &[cfg.max_position_embeddings, d],
            )?,
            token_type0,
            embed_norm: Norm::load(&t, "embeddings.LayerNorm", d)?,
            layers,
            cfg: cfg.clone(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    /// Mean-pooled last hidden states, one `hidden_size` row per span.
    ///
    /// `ids` holds the spans' tokens back to back; every id must be below `vocab_size`
    /// and every span at most `max_position_embeddings` long (the caller checks both).
    pub fn forward(&self, pool: &ThreadPool, ids: &[u32], spans: &[Span]) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let eps = self.cfg.layer_norm_eps;
        let rows = ids.len();
        let mut h = vec![0f32; rows * d];
        for span in spans {
            for p in 0..span.len {
                let r = span.start + p;
                let id = ids[r] as usize;
                let out = &mut h[r * d..(r + 1) * d];
                out.copy_from_slice(&self.word[id * d..(id + 1) * d]);
                kiln_kernels::ops::add_inplace(out, &self.position[p * d..(p + 1) * d]);
                kiln_kernels::ops::add_inplace(out, &self.token_type0);
            }
        }
        self.embed_norm.apply_rows(&mut h, eps);

        let heads = Heads {
            n_heads: self.cfg.num_attention_heads,
            head_dim: self.cfg.head_dim(),
        };
        let scale = 1.0 / (heads.head_dim as f32).sqrt();
        let mut qkv = vec![0f32; rows * 3 * d];
        let mut ctx = vec![0f32; rows * d];
        let mut tmp = vec![0f32; rows * d];
        let mut inter = vec![0f32; rows * self.cfg.intermediate_size];
        for layer in &self.layers {
            layer.qkv.forward(pool, &h, rows, &mut qkv);
            attention(pool, &qkv, spans, heads, scale, &mut ctx);
            layer.attn_out.forward(pool, &ctx, rows, &mut tmp);
            kiln_kernels::ops::add_inplace(&mut h, &tmp);
            layer.attn_norm.apply_rows(&mut h, eps);
            layer.intermediate.forward(pool, &h, rows, &mut inter);
            for_each_row_block(pool, &mut inter, self.cfg.intermediate_size, |_, block| {
                gelu_erf_inplace(block);
            });
            layer.output.forward(pool, &inter, rows, &mut tmp);
            kiln_kernels::ops::add_inplace(&mut h, &tmp);
            layer.output_norm.apply_rows(&mut h, eps);
        }

        let mut pooled = vec![0f32; spans.len() * d];
        for (span, out) in spans.iter().zip(pooled.chunks_exact_mut(d)) {
            mean_rows(&h[span.start * d..(span.start + span.len) * d], d, out);
        }
        pooled
    }
}
