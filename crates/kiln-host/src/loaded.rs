//! A model in memory: an enum over the kinds of model Kiln hosts (text generation on
//! the engine, and encoders: embeddings and text classification), so that hosting, the
//! memory budget and the metrics are shared by every kind.

use std::sync::Arc;

use kiln_backend::KvShape;
use kiln_encoder::{Classifier, Embedder};
use kiln_engine::{ServingModel, StatsSnapshot};

use crate::encoder::{Encoder, CONCURRENT_PASSES};
use crate::kind::ModelKind;

/// A model in memory, ready for requests; cheap to clone.
#[derive(Clone)]
pub enum LoadedModel {
    /// A text-generation model and its engine thread.
    Generate(Arc<ServingModel>),
    /// A sentence-embedding model.
    Embed(Arc<Encoder<Embedder>>),
    /// A text classifier.
    Classify(Arc<Encoder<Classifier>>),
}

impl LoadedModel {
    pub fn kind(&self) -> ModelKind {
        match self {
            LoadedModel::Generate(_) => ModelKind::Generate,
            LoadedModel::Embed(_) => ModelKind::Embed,
            LoadedModel::Classify(_) => ModelKind::Classify,
        }
    }

    /// The text-generation model, if this is one.
    pub fn generate(&self) -> Option<&Arc<ServingModel>> {
        match self {
            LoadedModel::Generate(m) => Some(m),
            _ => None,
        }
    }

    /// What the model takes against the memory budget: for a text model its weights
    /// file (`file_bytes`, mapped) plus the KV cache it allocated; for an encoder its
    /// weights as decoded into memory.
    pub fn memory_bytes(&self, file_bytes: u64) -> u64 {
        match self {
            LoadedModel::Generate(_) => file_bytes.saturating_add(self.kv_bytes()),
            LoadedModel::Embed(e) => e.weights().bytes,
            LoadedModel::Classify(c) => c.weights().bytes,
        }
    }

    /// Bytes of the KV cache it allocated (none for an encoder).
    pub fn kv_bytes(&self) -> u64 {
        match self {
            LoadedModel::Generate(m) => {
                let (c, e) = (&m.model_config, &m.engine_config);
                let shape = KvShape {
                    n_layers: c.n_layers,
                    n_kv_heads: c.n_kv_heads,
                    head_dim: c.head_dim,
                    block_size: e.block_size,
                    num_blocks: e.num_kv_blocks,
                };
                (shape.block_bytes(e.kv_dtype) as u64).saturating_mul(e.num_kv_blocks as u64)
            }
            LoadedModel::Embed(_) | LoadedModel::Classify(_) => 0,
        }
    }

    /// Weights of the model. A text model's transformer blocks plus one embedding matrix
    /// (counted from the configuration, so tied and untied output layers count the
    /// same); an encoder's float tensors.
    pub fn parameters(&self) -> u64 {
        match self {
            LoadedModel::Generate(m) => {
                let c = &m.model_config;
                let (d, q, kv, f) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
                let attention = d * q + 2 * d * kv + q * d;
                let ffn = 3 * d * f;
                (c.vocab_size * d + c.n_layers * (attention + ffn)) as u64
            }
            LoadedModel::Embed(e) => e.weights().parameters,
            LoadedModel::Classify(c) => c.weights().parameters,
        }
    }

    /// Sequences that run at once (encoder requests: one each); the admission queue's
    /// running share.
    pub fn max_running(&self) -> usize {
        match self {
            LoadedModel::Generate(m) => m.engine_config.max_num_seqs,
            LoadedModel::Embed(_) | LoadedModel::Classify(_) => CONCURRENT_PASSES,
        }
    }

    /// Longest input in tokens: prompt plus completion, or one text for an encoder.
    pub fn max_model_len(&self) -> Option<usize> {
        match self {
            LoadedModel::Generate(m) => Some(m.engine_config.max_model_len),
            LoadedModel::Embed(e) => Some(e.model().max_tokens()),
            LoadedModel::Classify(c) => Some(c.model().max_tokens()),
        }
    }

    /// The engine's counters, for `/metrics` (encoders have no engine).
    pub fn engine_stats(&self) -> Option<StatsSnapshot> {
        match self {
            LoadedModel::Generate(m) => Some(m.handle().stats().snapshot()),
            LoadedModel::Embed(_) | LoadedModel::Classify(_) => None,
        }
    }

    /// Stops the model (blocking): drains its engine and joins its thread. A model still
    /// referenced elsewhere is only told to drain; its thread ends with the last
    /// reference.
    pub fn stop(self) {
        match self {
            LoadedModel::Generate(m) => match Arc::try_unwrap(m) {
                Ok(m) => m.shutdown(),
                Err(shared) => shared.handle().drain(),
            },
            // No thread of its own: freed with the last reference (a pass under way
            // holds one until it ends).
            LoadedModel::Embed(_) | LoadedModel::Classify(_) => {}
        }
    }

    /// `system_fingerprint`: `fp_` and 10 hex digits of an FNV-1a hash over Kiln's
    /// version, the model name and the settings that change outputs.
    pub(crate) fn fingerprint(&self, name: &str) -> String {
        let key = match self {
            LoadedModel::Generate(m) => {
                let c = &m.engine_config;
                format!(
                    "{}|{name}|{}|{}|{:?}|{}",
                    env!("CARGO_PKG_VERSION"),
                    c.max_model_len,
                    c.block_size,
                    c.kv_dtype,
                    m.model_config.vocab_size
                )
            }
            LoadedModel::Embed(e) => {
                let m = e.model();
                format!(
                    "{}|{name}|embeddings|{}|{}|{}|{}",
                    env!("CARGO_PKG_VERSION"),
                    m.dim(),
                    m.max_tokens(),
                    m.normalizes(),
                    e.weights().parameters
                )
            }
            LoadedModel::Classify(c) => format!(
                "{}|{name}|text-classification|{}|{}|{}",
                env!("CARGO_PKG_VERSION"),
                c.model().labels().join(","),
                c.model().max_tokens(),
                c.weights().parameters
            ),
        };
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("fp_{:010x}", h & 0xff_ffff_ffff)
    }
}
