//! BERT's encoder stack (post-norm), run over a flat batch of packed sequences.

use kiln_backend::{EncoderActivation, EncoderBackend, Heads, RowSpan};

use crate::bert::config::BertConfig;
use crate::error::Result;
use crate::linear::Linear;
use crate::weights::Tensors;

/// A `LayerNorm`'s parameters.
struct Norm<B: EncoderBackend> {
    weight: B::Vector,
    bias: B::Vector,
}

impl<B: EncoderBackend> Norm<B> {
    fn load(t: &Tensors, prefix: &str, dim: usize, b: &B) -> Result<Self> {
        Ok(Self {
            weight: b.vector(t.f32(&format!("{prefix}.weight"), &[dim])?),
            bias: b.vector(t.f32(&format!("{prefix}.bias"), &[dim])?),
        })
    }

    fn apply_rows(&self, b: &B, x: &mut B::Activations, eps: f32, rows: usize, dim: usize) {
        b.layer_norm(x, &self.weight, &self.bias, eps, rows, dim);
    }
}

struct Layer<B: EncoderBackend> {
    /// Query, key and value projections fused into one `3·d × d` product.
    qkv: B::Dense,
    attn_out: B::Dense,
    attn_norm: Norm<B>,
    intermediate: B::Dense,
    output: B::Dense,
    output_norm: Norm<B>,
}

/// BERT weights, f32, in the backend's memory.
pub(crate) struct BertModel<B: EncoderBackend> {
    cfg: BertConfig,
    word: B::Vector,
    position: B::Vector,
    /// Row 0 of the token-type table: every input is a single segment.
    token_type0: B::Vector,
    embed_norm: Norm<B>,
    layers: Vec<Layer<B>>,
}

impl<B: EncoderBackend> BertModel<B> {
    pub fn load(t: Tensors, cfg: &BertConfig, b: &B) -> Result<Self> {
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
                qkv: Linear::concat(vec![proj("query")?, proj("key")?, proj("value")?]).bind(b),
                attn_out: Linear::load(&t, &format!("{p}.attention.output.dense"), d, d, true)?
                    .bind(b),
                attn_norm: Norm::load(&t, &format!("{p}.attention.output.LayerNorm"), d, b)?,
                intermediate: Linear::load(
                    &t,
                    &format!("{p}.intermediate.dense"),
                    cfg.intermediate_size,
                    d,
                    true,
                )?
                .bind(b),
                output: Linear::load(
                    &t,
                    &format!("{p}.output.dense"),
                    d,
                    cfg.intermediate_size,
                    true,
                )?
                .bind(b),
                output_norm: Norm::load(&t, &format!("{p}.output.LayerNorm"), d, b)?,
            });
        }
        Ok(Self {
            word: b.vector(t.f32("embeddings.word_embeddings.weight", &[cfg.vocab_size, d])?),
            position: b.vector(t.f32(
                "embeddings.position_embeddings.weight",
                &[cfg.max_position_embeddings, d],
            )?),
            token_type0: b.vector(token_type0),
            embed_norm: Norm::load(&t, "embeddings.LayerNorm", d, b)?,
            layers,
            cfg: cfg.clone(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    /// Mean-pooled last hidden states, one `hidden_size` row per span, L2-normalised
    /// when `normalize`.
    ///
    /// `ids` holds the spans' tokens back to back; every id must be below `vocab_size`
    /// and every span at most `max_position_embeddings` long (the caller checks both).
    pub fn forward(&self, b: &B, ids: &[u32], spans: &[RowSpan], normalize: bool) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let eps = self.cfg.layer_norm_eps;
        let rows = ids.len();
        let buffer = |len: usize| {
            let mut a = B::Activations::default();
            b.reserve(&mut a, len);
            a
        };
        // Each row's position inside its own span.
        let mut positions = vec![0u32; rows];
        for span in spans {
            for (p, pos) in positions[span.start..span.start + span.len]
                .iter_mut()
                .enumerate()
            {
                *pos = p as u32;
            }
        }
        let mut h = buffer(rows * d);
        b.lookup_rows(&self.word, d, ids, &mut h);
        b.add_lookup_rows(&self.position, d, &positions, &mut h);
        b.add_bias(&mut h, &self.token_type0, rows, d);
        self.embed_norm.apply_rows(b, &mut h, eps, rows, d);

        let heads = Heads {
            n_heads: self.cfg.num_attention_heads,
            head_dim: self.cfg.head_dim(),
        };
        let scale = 1.0 / (heads.head_dim as f32).sqrt();
        let all: Vec<usize> = spans.iter().map(|s| s.len).collect();
        let inter_dim = self.cfg.intermediate_size;
        let mut qkv = buffer(rows * 3 * d);
        let mut ctx = buffer(rows * d);
        let mut tmp = buffer(rows * d);
        let mut inter = buffer(rows * inter_dim);
        for layer in &self.layers {
            b.dense_forward(&layer.qkv, &h, rows, &mut qkv);
            b.bidirectional_attention(&qkv, rows, spans, &all, heads, scale, &mut ctx);
            b.dense_forward(&layer.attn_out, &ctx, rows, &mut tmp);
            b.add_rows(&mut h, &tmp, rows, d);
            layer.attn_norm.apply_rows(b, &mut h, eps, rows, d);
            b.dense_forward(&layer.intermediate, &h, rows, &mut inter);
            b.activation(&mut inter, rows, inter_dim, EncoderActivation::GeluErf);
            b.dense_forward(&layer.output, &inter, rows, &mut tmp);
            b.add_rows(&mut h, &tmp, rows, d);
            layer.output_norm.apply_rows(b, &mut h, eps, rows, d);
        }

        let mut pooled = buffer(spans.len() * d);
        b.mean_pool(&h, spans, d, &mut pooled);
        if normalize {
            b.l2_normalize(&mut pooled, spans.len(), d);
        }
        b.host(&mut pooled, spans.len() * d).to_vec()
    }
}
