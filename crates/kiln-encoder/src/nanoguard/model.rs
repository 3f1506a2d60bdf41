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
use kiln_backend::{EncoderActivation, EncoderBackend, Heads, RopeTables, RowCopy, RowSpan};

use super::config::NanoGuardConfig;
use crate::error::Result;
use crate::linear::Linear;
use crate::qlinear::QLinear;
use crate::weights::Tensors;

/// `torch.finfo(torch.float32).eps`: `F.rms_norm`'s eps when none is given.
const RMS_EPS: f32 = f32::EPSILON;
/// `nn.LayerNorm`'s default eps.
const LAYER_NORM_EPS: f32 = 1e-5;

struct Block<B: EncoderBackend> {
    /// `c_q`, `c_k`, `c_v` fused.
    qkv: B::Dense,
    attn_proj: B::Dense,
    fc: B::Dense,
    mlp_proj: B::Dense,
    /// The same four in int8, for [`Precision::Int8`].
    int8: Option<[QLinear<B>; 4]>,
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

impl<B: EncoderBackend> Block<B> {
    /// Layer `i` (qkv, attn_proj, fc, mlp_proj) at `p`, for the first `rows` rows.
    fn project(
        &self,
        i: usize,
        p: Precision,
        b: &B,
        x: &B::Activations,
        rows: usize,
        out: &mut B::Activations,
    ) {
        match (&self.int8, p) {
            (Some(q), Precision::Int8) => q[i].forward(b, x, rows, out),
            _ => b.dense_forward(
                [&self.qkv, &self.attn_proj, &self.fc, &self.mlp_proj][i],
                x,
                rows,
                out,
            ),
        }
    }
}

/// A forward pass's buffers, kept between passes: allocating them afresh cost page
/// faults and clearing on every call.
pub(crate) struct Scratch<B: EncoderBackend> {
    x: B::Activations,
    x0: B::Activations,
    xn: B::Activations,
    qkv: B::Activations,
    ctx: B::Activations,
    tmp: B::Activations,
    hidden: B::Activations,
}

impl<B: EncoderBackend> Default for Scratch<B> {
    fn default() -> Self {
        Self {
            x: Default::default(),
            x0: Default::default(),
            xn: Default::default(),
            qkv: Default::default(),
            ctx: Default::default(),
            tmp: Default::default(),
            hidden: Default::default(),
        }
    }
}

impl<B: EncoderBackend> Scratch<B> {
    /// Grows every buffer to hold `rows` rows of width `d` (contents are overwritten by
    /// each stage before they are read).
    fn fit(&mut self, b: &B, rows: usize, d: usize) {
        for (buf, width) in [
            (&mut self.x, d),
            (&mut self.x0, d),
            (&mut self.xn, d),
            (&mut self.qkv, 3 * d),
            (&mut self.ctx, d),
            (&mut self.tmp, d),
            (&mut self.hidden, 4 * d),
        ] {
            b.reserve(buf, rows * width);
        }
    }
}

pub(crate) struct NanoGuardModel<B: EncoderBackend> {
    cfg: NanoGuardConfig,
    wte: B::Vector,
    blocks: Vec<Block<B>>,
    resid_lambdas: Vec<f32>,
    x0_lambdas: Vec<f32>,
    cls_norm_weight: B::Vector,
    cls_norm_bias: B::Vector,
    cls_head: B::Dense,
    /// `cos` and `sin` of each position's rotation angles, `sequence_len × head_dim/2`.
    rope_cos: B::Vector,
    rope_sin: B::Vector,
}

impl<B: EncoderBackend> NanoGuardModel<B> {
    pub fn load(t: &Tensors, cfg: &NanoGuardConfig, b: &B) -> Result<Self> {
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
                let q = |l: &Linear| QLinear::from_linear(l, b);
                let int8 = match (q(&qkv), q(&attn_proj), q(&fc), q(&mlp_proj)) {
                    (Some(a), Some(c), Some(e), Some(f)) => Some([a, c, e, f]),
                    _ => None,
                };
                Ok(Block {
                    qkv: qkv.bind(b),
                    attn_proj: attn_proj.bind(b),
                    fc: fc.bind(b),
                    mlp_proj: mlp_proj.bind(b),
                    int8,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (rope_cos, rope_sin) = rope_tables(cfg.sequence_len, cfg.head_dim(), cfg.rope_base);
        Ok(Self {
            wte: b.vector(t.f32("transformer.wte.weight", &[cfg.vocab_size, d])?),
            blocks,
            resid_lambdas: t.f32("resid_lambdas", &[cfg.n_layer])?,
            x0_lambdas: t.f32("x0_lambdas", &[cfg.n_layer])?,
            cls_norm_weight: b.vector(t.f32("cls_norm.weight", &[d])?),
            cls_norm_bias: b.vector(t.f32("cls_norm.bias", &[d])?),
            cls_head: Linear::load(t, "cls_head", cfg.num_classes, d, true)?.bind(b),
            rope_cos: b.vector(rope_cos),
            rope_sin: b.vector(rope_sin),
            cfg: cfg.clone(),
        })
    }

    /// Class probabilities for each input (`num_classes` per input).
    ///
    /// Every input is `sequence_len` ids (padded); `n_real[i]` of them are real tokens.
    /// Ids must be below `vocab_size` (the caller checks).
    pub fn forward(
        &self,
        b: &B,
        ids: &[u32],
        n_real: &[usize],
        p: Precision,
        s: &mut Scratch<B>,
    ) -> Vec<f32> {
        let d = self.cfg.n_embd;
        let t = self.cfg.sequence_len;
        let rows = ids.len();
        let spans: Vec<RowSpan> = (0..n_real.len())
            .map(|i| RowSpan {
                start: i * t,
                len: t,
            })
            .collect();

        s.fit(b, rows, d);
        let Scratch {
            x,
            x0,
            xn,
            qkv,
            ctx,
            tmp,
            hidden,
        } = s;
        b.lookup_rows(&self.wte, d, ids, xn);
        b.plain_rms_norm(xn, x, RMS_EPS, rows, d);
        b.copy(x, x0, rows * d);
        let heads = Heads {
            n_heads: self.cfg.n_head,
            head_dim: self.cfg.head_dim(),
        };
        let scale = 1.0 / (heads.head_dim as f32).sqrt();
        let all: Vec<usize> = spans.iter().map(|s| s.len).collect();
        // Real rows per input (BOS at least): after the last layer only they are read.
        let real: Vec<usize> = n_real.iter().map(|&n| n.clamp(1, t)).collect();
        let last = self.blocks.len().saturating_sub(1);
        for (i, block) in self.blocks.iter().enumerate() {
            b.mix(x, self.resid_lambdas[i], x0, self.x0_lambdas[i], rows * d);
            b.plain_rms_norm(x, xn, RMS_EPS, rows, d);
            if i == 0 {
                self.first_qkv(block, p, b, xn, rows, &spans, &real, qkv);
            } else {
                block.project(0, p, b, xn, rows, qkv);
            }
            // Queries and keys: rotate, then RMS-normalise each head.
            let rope = RopeTables {
                cos: &self.rope_cos,
                sin: &self.rope_sin,
                period: t,
            };
            b.rotate_and_norm_qk(qkv, rows, heads, rope, RMS_EPS);
            let n = if i < last {
                b.bidirectional_attention(qkv, rows, &spans, &all, heads, scale, ctx);
                rows
            } else {
                // The padding is still every query's key and value, but its own outputs
                // go nowhere past this layer: the rest of the layer runs on the real
                // rows alone, gathered to the front, the same arithmetic for each.
                b.bidirectional_attention(qkv, rows, &spans, &real, heads, scale, ctx);
                let front = front_copies(&spans, &real);
                b.move_rows(x, d, &front);
                b.move_rows(ctx, d, &front);
                real.iter().sum()
            };
            block.project(1, p, b, ctx, n, tmp);
            b.add_rows(x, tmp, n, d);

            b.plain_rms_norm(x, xn, RMS_EPS, n, d);
            block.project(2, p, b, xn, n, hidden);
            b.activation(hidden, n, 4 * d, EncoderActivation::ReluSquared);
            block.project(3, p, b, hidden, n, tmp);
            b.add_rows(x, tmp, n, d);
        }
        // `x` now starts with the real rows, input after input.
        let n: usize = real.iter().sum();
        b.plain_rms_norm(x, xn, RMS_EPS, n, d);

        let k = n_real.len();
        let mut at = 0;
        let pools: Vec<RowSpan> = real
            .iter()
            .map(|&n| {
                let span = RowSpan { start: at, len: n };
                at += n;
                span
            })
            .collect();
        let buffer = |len: usize| {
            let mut a = B::Activations::default();
            b.reserve(&mut a, len);
            a
        };
        let mut pooled = buffer(k * d);
        b.mean_pool(xn, &pools, d, &mut pooled);
        let (w, bias) = (&self.cls_norm_weight, &self.cls_norm_bias);
        b.layer_norm(&mut pooled, w, bias, LAYER_NORM_EPS, k, d);
        let c = self.cfg.num_classes;
        let mut probs = buffer(k * c);
        b.dense_forward(&self.cls_head, &pooled, k, &mut probs);
        b.softmax(&mut probs, k, c);
        b.host(&mut probs, k * c).to_vec()
    }

    /// The first layer's Q, K and V. Its padding rows are all the same row (one token's
    /// embedding, nothing mixed in yet), so that row is projected once and copied: the
    /// real rows and one padding row go through the layer, row by row as ever.
    #[allow(clippy::too_many_arguments)]
    fn first_qkv(
        &self,
        block: &Block<B>,
        p: Precision,
        b: &B,
        xn: &B::Activations,
        rows: usize,
        spans: &[RowSpan],
        real: &[usize],
        qkv: &mut B::Activations,
    ) {
        let d = self.cfg.n_embd;
        let pad_row = spans
            .iter()
            .zip(real)
            .find(|(s, &n)| n < s.len)
            .map(|(s, &n)| s.start + n);
        // The picked rows packed to the front: the real rows of each span, then the pad.
        let mut picked = front_copies(spans, real);
        let n_real: usize = real.iter().sum();
        picked.extend(pad_row.map(|src| RowCopy {
            src,
            dst: n_real,
            rows: 1,
        }));
        let n_picked = n_real + usize::from(pad_row.is_some());
        if n_picked * 2 > rows {
            block.project(0, p, b, xn, rows, qkv);
            return;
        }
        let buffer = |len: usize| {
            let mut a = B::Activations::default();
            b.reserve(&mut a, len);
            a
        };
        let mut input = buffer(n_picked * d);
        b.copy_rows(xn, &mut input, d, &picked);
        let mut out = buffer(n_picked * 3 * d);
        block.project(0, p, b, &input, n_picked, &mut out);
        // Back where each row came from, and the pad row into every padding row.
        let mut back: Vec<RowCopy> = picked
            .iter()
            .map(|c| RowCopy {
                src: c.dst,
                dst: c.src,
                rows: c.rows,
            })
            .collect();
        if pad_row.is_some() {
            for (s, &n) in spans.iter().zip(real) {
                back.extend((s.start + n..s.start + s.len).map(|dst| RowCopy {
                    src: n_real,
                    dst,
                    rows: 1,
                }));
            }
        }
        b.copy_rows(&out, qkv, 3 * d, &back);
    }

    pub fn config(&self) -> &NanoGuardConfig {
        &self.cfg
    }
}

/// The copies that move the first `real[i]` rows of each span to the front, one after
/// another (spans are in order, so each lands at or before where it was).
fn front_copies(spans: &[RowSpan], real: &[usize]) -> Vec<RowCopy> {
    let mut at = 0;
    spans
        .iter()
        .zip(real)
        .map(|(s, &n)| {
            let c = RowCopy {
                src: s.start,
                dst: at,
                rows: n,
            };
            at += n;
            c
        })
        .collect()
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
