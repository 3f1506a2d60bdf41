//! NanoGuard's forward pass: a 4-layer bidirectional transformer (nanochat style) with
//! mean pooling and a classification head.
//!
//! Per `nanoguard/model.py`: token embeddings, RMS-normalised (no weights anywhere, eps =
//! f32's machine epsilon as `F.rms_norm` defaults to); each block first mixes the stream
//! with the normalised embeddings (`resid_λ·x + x0_λ·x0`), then pre-norm attention with
//! RoPE and per-head QK RMS norm, then a `relu²` MLP; a final RMS norm, the mean over the
//! real tokens, `LayerNorm`, and a linear head.
//!
//! Two details decide whether scores match the package's: every input is padded to
//! `sequence_len` and attention has no mask, so pad tokens are attended to (only the
//! pooling skips them); and the RoPE tables are rounded to bf16, as the model keeps them.

use half::bf16;
use kiln_backend::ThreadPool;

use super::config::NanoGuardConfig;
use crate::attention::{attention, attention_queries, Heads, Span};
use crate::error::Result;
use crate::linear::Linear;
use crate::ops::{layer_norm, mean_rows, relu_squared_inplace, rms_norm};
use crate::qlinear::QLinear;
use crate::rows::for_each_row_block;
use crate::weights::Tensors;

/// `torch.finfo(torch.float32).eps`: `F.rms_norm`'s eps when none is given.
const RMS_EPS: f32 = f32::EPSILON;
/// `nn.LayerNorm`'s default eps.
const LAYER_NORM_EPS: f32 = 1e-5;

struct Block {
    /// `c_q`, `c_k`, `c_v` fused.
    qkv: Linear,
    attn_proj: Linear,
    fc: Linear,
    mlp_proj: Linear,
    /// The same four in int8, for [`Precision::Int8`].
    int8: Option<[QLinear; 4]>,
}

/// How the block's linear layers are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 throughout: the package's scores to within 1e-4.
    F32,
    /// The linear layers in int8 (q8_0 weights and activations, the engine's VNNI
    /// kernels); attention and norms in f32. Several times faster, scores within a
    /// few thousandths.
    Int8,
}

impl Block {
    /// Layer `i` (qkv, attn_proj, fc, mlp_proj) at `p`.
    fn project(
        &self,
        i: usize,
        p: Precision,
        pool: &ThreadPool,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
    ) {
        match (&self.int8, p) {
            (Some(q), Precision::Int8) => q[i].forward(pool, x, rows, out),
            _ => [&self.qkv, &self.attn_proj, &self.fc, &self.mlp_proj][i]
                .forward(pool, x, rows, out),
        }
    }
}

/// A forward pass's buffers, kept between passes: allocating them afresh cost page
/// faults and clearing on every call.
#[derive(Default)]
pub(crate) struct Scratch {
    x: Vec<f32>,
    x0: Vec<f32>,
    xn: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    tmp: Vec<f32>,
    hidden: Vec<f32>,
}

impl Scratch {
    /// Sizes every buffer for `rows` rows of width `d` (contents are overwritten by
    /// each stage before they are read).
    fn fit(&mut self, rows: usize, d: usize) {
        for (buf, width) in [
            (&mut self.x, d),
            (&mut self.x0, d),
            (&mut self.xn, d),
            (&mut self.qkv, 3 * d),
            (&mut self.ctx, d),
            (&mut self.tmp, d),
            (&mut self.hidden, 4 * d),
        ] {
            buf.resize(rows * width, 0.0);
        }
    }
}

pub(crate) struct NanoGuardModel {
    cfg: NanoGuardConfig,
    wte: Vec<f32>,
    blocks: Vec<Block>,
    resid_lambdas: Vec<f32>,
    x0_lambdas: Vec<f32>,
    cls_norm_weight: Vec<f32>,
    cls_norm_bias: Vec<f32>,
    cls_head: Linear,
    /// `cos` and `sin` of each position's rotation angles, `sequence_len × head_dim/2`.
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
}

impl NanoGuardModel {
    pub fn load(t: &Tensors, cfg: &NanoGuardConfig, pool: &ThreadPool) -> Result<Self> {
        let d = cfg.n_embd;
        let blocks = (0..cfg.n_layer)
            .map(|i| {
                let p = format!("transformer.h.{i}");
                let lin = |name: &str, out: usize, inp: usize| {
                    Linear::load(t, &format!("{p}.{name}"), out, inp, false)
                };
                let qkv = Linear::concat(vec![
                    lin("attn.c_q", d, d)?,
                    lin("attn.c_k", d, d)?,
                    lin("attn.c_v", d, d)?,
                ]);
                let attn_proj = lin("attn.c_proj", d, d)?;
                let fc = lin("mlp.c_fc", 4 * d, d)?;
                let mlp_proj = lin("mlp.c_proj", d, 4 * d)?;
                let q = |l: &Linear| QLinear::from_linear(l, pool);
                let int8 = match (q(&qkv), q(&attn_proj), q(&fc), q(&mlp_proj)) {
                    (Some(a), Some(b), Some(c), Some(e)) => Some([a, b, c, e]),
                    _ => None,
                };
                Ok(Block {
                    qkv,
                    attn_proj,
                    fc,
                    mlp_proj,
                    int8,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (rope_cos, rope_sin) = rope_tables(cfg.sequence_len, cfg.head_dim(), cfg.rope_base);
        Ok(Self {
            wte: t.f32("transformer.wte.weight", &[cfg.vocab_size, d])?,
            blocks,
            resid_lambdas: t.f32("resid_lambdas", &[cfg.n_layer])?,
            x0_lambdas: t.f32("x0_lambdas", &[cfg.n_layer])?,
            cls_norm_weight: t.f32("cls_norm.weight", &[d])?,
            cls_norm_bias: t.f32("cls_norm.bias", &[d])?,
            cls_head: Linear::load(t, "cls_head", cfg.num_classes, d, true)?,
            rope_cos,
            rope_sin,
            cfg: cfg.clone(),
        })
    }

    /// Class probabilities for each input (`num_classes` per input).
    ///
    /// Every input is `sequence_len` ids (padded); `n_real[i]` of them are real tokens.
    /// Ids must be below `vocab_size` (the caller checks).
    pub fn forward(
        &self,
        pool: &ThreadPool,
        ids: &[u32],
        n_real: &[usize],
        p: Precision,
        s: &mut Scratch,
    ) -> Vec<f32> {
        let d = self.cfg.n_embd;
        let t = self.cfg.sequence_len;
        let rows = ids.len();
        let spans: Vec<Span> = (0..n_real.len())
            .map(|i| Span {
                start: i * t,
                len: t,
            })
            .collect();

        s.fit(rows, d);
        let Scratch {
            x,
            x0,
            xn,
            qkv,
            ctx,
            tmp,
            hidden,
        } = s;
        for (row, &id) in x.chunks_exact_mut(d).zip(ids) {
            let id = id as usize;
            row.copy_from_slice(&self.wte[id * d..(id + 1) * d]);
            rms_norm(row, RMS_EPS);
        }
        x0.copy_from_slice(x);
        let heads = Heads {
            n_heads: self.cfg.n_head,
            head_dim: self.cfg.head_dim(),
        };
        let scale = 1.0 / (heads.head_dim as f32).sqrt();
        // Real rows per input (BOS at least): after the last layer only they are read.
        let real: Vec<usize> = n_real.iter().map(|&n| n.clamp(1, t)).collect();
        let last = self.blocks.len().saturating_sub(1);
        for (i, block) in self.blocks.iter().enumerate() {
            let (a, b) = (self.resid_lambdas[i], self.x0_lambdas[i]);
            for (v, &v0) in x.iter_mut().zip(x0.iter()) {
                *v = a * *v + b * v0;
            }
            normed_rows(x, xn, d);
            if i == 0 {
                self.first_qkv(block, p, pool, xn, &spans, &real, qkv);
            } else {
                block.project(0, p, pool, xn, rows, qkv);
            }
            for_each_row_block(pool, qkv, 3 * d, |first, block| {
                for (r, row) in block.chunks_exact_mut(3 * d).enumerate() {
                    let pos = (first + r) % t;
                    // Queries and keys: rotate, then RMS-normalise each head.
                    for head in row[..2 * d].chunks_exact_mut(heads.head_dim) {
                        self.rotate(head, pos);
                        rms_norm(head, RMS_EPS);
                    }
                }
            });
            let n = if i < last {
                attention(pool, qkv, &spans, heads, scale, ctx);
                rows
            } else {
                // The padding is still every query's key and value, but its own outputs
                // go nowhere past this layer: the rest of the layer runs on the real
                // rows alone, gathered to the front, the same arithmetic for each.
                attention_queries(pool, qkv, &spans, &real, heads, scale, ctx);
                let n = gather_front(x, &spans, &real, d);
                gather_front(ctx, &spans, &real, d);
                n
            };
            let x = &mut x[..n * d];
            block.project(1, p, pool, &ctx[..n * d], n, &mut tmp[..n * d]);
            kiln_kernels::ops::add_inplace(x, &tmp[..n * d]);

            normed_rows(x, &mut xn[..n * d], d);
            block.project(2, p, pool, &xn[..n * d], n, &mut hidden[..n * 4 * d]);
            for_each_row_block(pool, &mut hidden[..n * 4 * d], 4 * d, |_, block| {
                relu_squared_inplace(block)
            });
            block.project(3, p, pool, &hidden[..n * 4 * d], n, &mut tmp[..n * d]);
            kiln_kernels::ops::add_inplace(x, &tmp[..n * d]);
        }
        // `x` now starts with the real rows, input after input.
        let n: usize = real.iter().sum();
        normed_rows(&x[..n * d], &mut xn[..n * d], d);

        let mut pooled = vec![0f32; n_real.len() * d];
        let mut at = 0;
        for (&n, out) in real.iter().zip(pooled.chunks_exact_mut(d)) {
            let rows = &xn[at * d..(at + n) * d];
            at += n;
            mean_rows(rows, d, out);
            layer_norm(
                out,
                &self.cls_norm_weight,
                &self.cls_norm_bias,
                LAYER_NORM_EPS,
            );
        }
        let c = self.cfg.num_classes;
        let mut probs = vec![0f32; n_real.len() * c];
        self.cls_head.forward_rows(&pooled, &mut probs);
        for row in probs.chunks_exact_mut(c) {
            kiln_kernels::ops::softmax_inplace(row);
        }
        probs
    }

    /// The first layer's Q, K and V. Its padding rows are all the same row (one token's
    /// embedding, nothing mixed in yet), so that row is projected once and copied: the
    /// real rows and one padding row go through the layer, row by row as ever.
    #[allow(clippy::too_many_arguments)]
    fn first_qkv(
        &self,
        block: &Block,
        p: Precision,
        pool: &ThreadPool,
        xn: &[f32],
        spans: &[Span],
        real: &[usize],
        qkv: &mut [f32],
    ) {
        let d = self.cfg.n_embd;
        let rows = xn.len() / d;
        let pad_row = spans
            .iter()
            .zip(real)
            .find(|(s, &n)| n < s.len)
            .map(|(s, &n)| s.start + n);
        let picked: Vec<usize> = spans
            .iter()
            .zip(real)
            .flat_map(|(s, &n)| s.start..s.start + n)
            .chain(pad_row)
            .collect();
        if picked.len() * 2 > rows {
            block.project(0, p, pool, xn, rows, qkv);
            return;
        }
        let mut input = Vec::with_capacity(picked.len() * d);
        for &r in &picked {
            input.extend_from_slice(&xn[r * d..(r + 1) * d]);
        }
        let mut out = vec![0f32; picked.len() * 3 * d];
        block.project(0, p, pool, &input, picked.len(), &mut out);
        let w = 3 * d;
        for (k, &r) in picked.iter().enumerate() {
            qkv[r * w..(r + 1) * w].copy_from_slice(&out[k * w..(k + 1) * w]);
        }
        if pad_row.is_some() {
            let pad = &out[(picked.len() - 1) * w..];
            for (s, &n) in spans.iter().zip(real) {
                for r in s.start + n..s.start + s.len {
                    qkv[r * w..(r + 1) * w].copy_from_slice(pad);
                }
            }
        }
    }

    /// nanochat's rotation of one head at position `pos`: the two halves `(x1, x2)` become
    /// `(x1·cos + x2·sin, −x1·sin + x2·cos)`.
    fn rotate(&self, head: &mut [f32], pos: usize) {
        let half = head.len() / 2;
        let cos = &self.rope_cos[pos * half..(pos + 1) * half];
        let sin = &self.rope_sin[pos * half..(pos + 1) * half];
        let (x1, x2) = head.split_at_mut(half);
        for j in 0..half {
            let (a, b) = (x1[j], x2[j]);
            x1[j] = a * cos[j] + b * sin[j];
            x2[j] = a * -sin[j] + b * cos[j];
        }
    }

    pub fn config(&self) -> &NanoGuardConfig {
        &self.cfg
    }
}

/// Moves the first `real[i]` rows of each span of `x` to the front, one after another
/// (spans are in order, so each lands at or before where it was); how many rows.
fn gather_front(x: &mut [f32], spans: &[Span], real: &[usize], d: usize) -> usize {
    let mut at = 0;
    for (s, &n) in spans.iter().zip(real) {
        x.copy_within(s.start * d..(s.start + n) * d, at * d);
        at += n;
    }
    at
}

/// `out = rms_norm(x)` row by row.
fn normed_rows(x: &[f32], out: &mut [f32], d: usize) {
    out.copy_from_slice(x);
    for row in out.chunks_exact_mut(d) {
        rms_norm(row, RMS_EPS);
    }
}

/// `Classifier._precompute_rotary`: angles `pos · base^(−2j/head_dim)` computed in f32,
/// their cosines and sines rounded to bf16 (the model's buffers are bf16).
pub(crate) fn rope_tables(seq_len: usize, head_dim: usize, base: u32) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| 1.0 / (base as f32).powf((2 * j) as f32 / head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(seq_len * half);
    let mut sin = Vec::with_capacity(seq_len * half);
    for pos in 0..seq_len {
        for &f in &inv_freq {
            let angle = pos as f32 * f;
            cos.push(bf16::from_f32(angle.cos()).to_f32());
            sin.push(bf16::from_f32(angle.sin()).to_f32());
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// The tables must equal the model's own bf16 buffers bit for bit: their sha256 was
    /// recorded from the package by `scripts/fixtures/nanoguard_reference.py`.
    #[test]
    fn rope_tables_match_the_models_bf16_buffers() {
        let fixture: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/nanoguard_reference.json"
        ))
        .expect("fixture is JSON");
        let (cos, sin) = super::rope_tables(512, 128, 10_000);
        for (name, table) in [("cos", cos), ("sin", sin)] {
            let bytes: Vec<u8> = table
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect();
            assert_eq!(
                hex::encode(Sha256::digest(&bytes)),
                fixture["rope_bf16_sha256"][name]
                    .as_str()
                    .unwrap_or_default(),
                "{name} table"
            );
        }
    }
}
