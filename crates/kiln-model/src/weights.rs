//! Binding GGUF tensors to backend weights, zero-copy from the mapping.

use std::sync::Arc;

use kiln_backend::{Backend, Prepared, WeightBytes, WeightMatrix};
use kiln_formats::{GgmlType, GgufFile};
use kiln_kernels::WeightType;

use crate::config::{Arch, ModelConfig};
use crate::pack_cache::{CachedPack, PackCache, PackOutcome, SourceMatrix};
use crate::{Error, Result};

/// One transformer block's weights, in backend `B`'s memory. Optional parts exist only
/// for some architectures.
pub struct LayerWeights<B: Backend> {
    pub attn_norm: B::Vector,
    pub wq: B::Matrix,
    pub wk: B::Matrix,
    pub wv: B::Matrix,
    pub wo: B::Matrix,
    /// Qwen2's QKV biases.
    pub bq: Option<B::Vector>,
    pub bk: Option<B::Vector>,
    pub bv: Option<B::Vector>,
    /// Gemma 3's per-head RMSNorm of q and k.
    pub q_norm: Option<B::Vector>,
    pub k_norm: Option<B::Vector>,
    /// Gemma 3's "sandwich" norms after attention and after the FFN.
    pub post_attn_norm: Option<B::Vector>,
    pub ffn_norm: B::Vector,
    pub w_gate: B::Matrix,
    pub w_up: B::Matrix,
    pub w_down: B::Matrix,
    pub post_ffn_norm: Option<B::Vector>,
}

pub struct Weights<B: Backend> {
    pub token_embd: B::Matrix,
    pub layers: Vec<LayerWeights<B>>,
    pub output_norm: B::Vector,
    /// The LM head: `output.weight`, or the embedding matrix when they are tied.
    pub output: B::Matrix,
}

pub(crate) fn weight_type(t: GgmlType) -> Option<WeightType> {
    Some(match t {
        GgmlType::F32 => WeightType::F32,
        GgmlType::F16 => WeightType::F16,
        GgmlType::BF16 => WeightType::BF16,
        GgmlType::Q4_0 => WeightType::Q4_0,
        GgmlType::Q4_1 => WeightType::Q4_1,
        GgmlType::Q5_0 => WeightType::Q5_0,
        GgmlType::Q8_0 => WeightType::Q8_0,
        GgmlType::Q4_K => WeightType::Q4_K,
        GgmlType::Q5_K => WeightType::Q5_K,
        GgmlType::Q6_K => WeightType::Q6_K,
        _ => return None,
    })
}

struct Loader<'a, B> {
    file: &'a Arc<GgufFile>,
    backend: &'a B,
}

impl<B: Backend> Loader<'_, B> {
    fn shape_err(name: &str, expected: &[usize], found: &[u64]) -> Error {
        Error::TensorShape {
            name: name.to_string(),
            expected: expected.iter().map(|&d| d as u64).collect(),
            found: found.to_vec(),
        }
    }

    /// A `rows × cols` matrix (GGUF shape `[cols, rows]`), kept in the mapping.
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<B::Matrix> {
        let info =
            self.file
                .tensor_info(name)
                .ok_or_else(|| kiln_formats::Error::MissingTensor {
                    path: self.file.path().to_path_buf(),
                    name: name.to_string(),
                })?;
        if info.shape != [cols as u64, rows as u64] {
            return Err(Self::shape_err(name, &[cols, rows], &info.shape));
        }
        let ty = weight_type(info.dtype).ok_or_else(|| Error::UnsupportedWeightType {
            name: name.to_string(),
            ty: info.dtype.to_string(),
        })?;
        let source: Arc<dyn AsRef<[u8]> + Send + Sync> = self.file.clone();
        let bytes = WeightBytes::Mapped {
            source,
            offset: info.offset as usize,
            len: info.size as usize,
        };
        self.backend
            .matrix(ty, rows, cols, bytes)
            .ok_or_else(|| Error::UnsupportedWeightType {
                name: name.to_string(),
                ty: format!("{} with rows of {cols}", info.dtype),
            })
    }

    /// A small F32 vector (norm weights, biases), copied out of the mapping.
    fn vector(&self, name: &str, len: usize) -> Result<B::Vector> {
        let t = self.file.tensor(name)?;
        if t.shape != [len as u64] {
            return Err(Self::shape_err(name, &[len], t.shape));
        }
        if t.dtype != GgmlType::F32 {
            return Err(Error::UnsupportedWeightType {
                name: name.to_string(),
                ty: format!("{} (vectors must be F32)", t.dtype),
            });
        }
        let values = t
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(self.backend.vector(values))
    }

    fn optional_vector(&self, name: &str, len: usize) -> Result<Option<B::Vector>> {
        if self.file.has_tensor(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<B: Backend> Weights<B> {
    /// Weight bytes one forward pass streams through its matmuls (every layer's
    /// projections and the LM head), whatever the batch size: what bounds batch-1 decode.
    pub fn matmul_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .flat_map(|lw| {
                [
                    &lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down,
                ]
            })
            .map(WeightMatrix::bytes_read)
            .sum();
        layers + self.output.bytes_read()
    }

    /// Every prepared matrix (not the embedding table, which is only looked up), with
    /// its tensor's name, in one fixed order.
    fn prepared_mut<'w>(
        &'w mut self,
        file: &GgufFile,
    ) -> impl Iterator<Item = (String, &'w mut B::Matrix)> + 'w {
        let output = if file.has_tensor("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let layers = self.layers.iter_mut().enumerate().flat_map(|(i, lw)| {
            [
                ("attn_q", &mut lw.wq),
                ("attn_k", &mut lw.wk),
                ("attn_v", &mut lw.wv),
                ("attn_output", &mut lw.wo),
                ("ffn_gate", &mut lw.w_gate),
                ("ffn_up", &mut lw.w_up),
                ("ffn_down", &mut lw.w_down),
            ]
            .map(|(s, m)| (format!("blk.{i}.{s}.weight"), m))
        });
        layers.chain([(output.to_string(), &mut self.output)])
    }

    /// Prepares every matmul weight for the backend's kernels, and hands back to the OS
    /// the mapped pages the backend will not read again; returns the bytes the
    /// backend's copies take and how the cache served. With a `cache`, copies an earlier
    /// load made of the same tensors are mapped instead of made, and copies made now are
    /// written for the next load while this one serves.
    pub fn prepare(
        &mut self,
        backend: &B,
        file: &GgufFile,
        cache: Option<&PackCache>,
        content: &[u8; 32],
    ) -> (usize, PackOutcome) {
        let Some((cache, layout)) = cache.zip(backend.prepared_layout()) else {
            return (self.prepare_each(backend, file, None), PackOutcome::Off);
        };
        let names: Vec<String> = self.prepared_mut(file).map(|(n, _)| n).collect();
        let sources: Option<Vec<SourceMatrix<'_>>> = names
            .iter()
            .map(|name| {
                let t = file.tensor(name).ok()?;
                Some(SourceMatrix {
                    name,
                    dtype: t.dtype.to_string(),
                    shape: t.shape,
                })
            })
            .collect();
        let Some(sources) = sources else {
            return (self.prepare_each(backend, file, None), PackOutcome::Off);
        };
        let key = PackCache::fingerprint(&layout, &sources, content);
        match cache.open(&key, names.len()) {
            Ok(Some(pack)) => {
                tracing::info!(dir = %cache.dir().display(), "prepared weights mapped from the pack cache");
                return (
                    self.prepare_each(backend, file, Some(&pack)),
                    PackOutcome::Mapped,
                );
            }
            Ok(None) => {}
            Err(why) => tracing::warn!(%why, "ignoring an unusable pack cache file"),
        }
        let bytes = self.prepare_each(backend, file, None);
        let copies: Vec<_> = self
            .prepared_mut(file)
            .map(|(_, m)| backend.prepared_copy(m))
            .collect();
        match cache.write_in_background(key, copies) {
            Ok(writer) => (bytes, PackOutcome::Writing(writer)),
            Err(e) => {
                tracing::warn!(error = %e, "could not start writing the pack cache");
                (bytes, PackOutcome::Off)
            }
        }
    }

    /// [`prepare`](Self::prepare) matrix by matrix: adopting `pack`'s copy where it has
    /// one the backend takes, preparing afresh otherwise.
    fn prepare_each(&mut self, backend: &B, file: &GgufFile, pack: Option<&CachedPack>) -> usize {
        let mut bytes = 0;
        for (i, (_, m)) in self.prepared_mut(file).enumerate() {
            let adopted = pack
                .and_then(|p| p.entry(i))
                .map(|b| backend.adopt_prepared(m, b))
                .filter(|p| *p != Prepared::default());
            let prepared = adopted.unwrap_or_else(|| backend.prepare(m));
            bytes += prepared.copy_bytes;
            if let Some((offset, len)) = prepared.unused_mapping {
                file.release_range(offset, len);
            }
        }
        bytes
    }

    pub fn load(file: &Arc<GgufFile>, cfg: &ModelConfig, backend: &B) -> Result<Self> {
        let l = Loader { file, backend };
        let (d, q, kv, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let gemma = cfg.arch == Arch::Gemma3;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let required_if = |cond: bool, name: String, len: usize| -> Result<Option<B::Vector>> {
                if cond {
                    l.vector(&name, len).map(Some)
                } else {
                    l.optional_vector(&name, len)
                }
            };
            layers.push(LayerWeights {
                attn_norm: l.vector(&n("attn_norm.weight"), d)?,
                wq: l.matrix(&n("attn_q.weight"), q, d)?,
                wk: l.matrix(&n("attn_k.weight"), kv, d)?,
                wv: l.matrix(&n("attn_v.weight"), kv, d)?,
                wo: l.matrix(&n("attn_output.weight"), d, q)?,
                bq: required_if(cfg.arch == Arch::Qwen2, n("attn_q.bias"), q)?,
                bk: required_if(cfg.arch == Arch::Qwen2, n("attn_k.bias"), kv)?,
                bv: required_if(cfg.arch == Arch::Qwen2, n("attn_v.bias"), kv)?,
                q_norm: required_if(gemma, n("attn_q_norm.weight"), cfg.head_dim)?,
                k_norm: required_if(gemma, n("attn_k_norm.weight"), cfg.head_dim)?,
                post_attn_norm: required_if(gemma, n("post_attention_norm.weight"), d)?,
                ffn_norm: l.vector(&n("ffn_norm.weight"), d)?,
                w_gate: l.matrix(&n("ffn_gate.weight"), ff, d)?,
                w_up: l.matrix(&n("ffn_up.weight"), ff, d)?,
                w_down: l.matrix(&n("ffn_down.weight"), d, ff)?,
                post_ffn_norm: required_if(gemma, n("post_ffw_norm.weight"), d)?,
            });
        }
        let token_embd = l.matrix("token_embd.weight", cfg.vocab_size, d)?;
        let output = if file.has_tensor("output.weight") {
            l.matrix("output.weight", cfg.vocab_size, d)?
        } else {
            l.matrix("token_embd.weight", cfg.vocab_size, d)?
        };
        Ok(Self {
            token_embd,
            layers,
            output_norm: l.vector("output_norm.weight", d)?,
            output,
        })
    }
}
