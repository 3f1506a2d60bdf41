//! Hyper-parameters read from GGUF metadata, plus the per-architecture constants that the
//! files don't carry.

use kiln_backend::Activation;
use kiln_formats::GgufFile;
use kiln_kernels::ops::RopeStyle;

use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Gemma3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gemma3 => "gemma3",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rms_eps: f32,
    pub rope_style: RopeStyle,
    /// Leading dimensions of each head that RoPE rotates.
    pub rope_dims: usize,
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3 uses a smaller one there).
    pub rope_base_local: f32,
    /// Attention window of local layers, `None` when every layer is global.
    pub sliding_window: Option<usize>,
    /// Per layer: does it use the sliding window (and the local RoPE base)?
    pub layer_is_local: Vec<bool>,
    /// Multiplies q·k inside the softmax.
    pub attn_scale: f32,
    /// Multiplies the token embeddings (Gemma: sqrt(d_model)).
    pub embed_scale: Option<f32>,
    pub activation: Activation,
}

/// Gemma 3: five sliding-window layers, then one global layer (not in the GGUF metadata).
const GEMMA3_SWA_PERIOD: usize = 6;
/// Gemma 3's RoPE base on sliding-window layers (not in the GGUF metadata).
const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

impl ModelConfig {
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let arch_name = f.require_str("general.architecture")?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "gemma3" => Arch::Gemma3,
            other => return Err(Error::UnsupportedArchitecture(other.to_string())),
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let usize_key = |k: &str| -> Result<usize> { Ok(f.require_u64(&key(k))? as usize) };
        let n_layers = usize_key("block_count")?;
        let d_model = usize_key("embedding_length")?;
        let n_heads = usize_key("attention.head_count")?;
        let n_kv_heads = match f.get_u64(&key("attention.head_count_kv"))? {
            Some(v) => v as usize,
            None => n_heads,
        };
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(Error::Config(format!(
                "{n_heads} query heads can't be grouped over {n_kv_heads} KV heads"
            )));
        }
        let head_dim = match f.get_u64(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => d_model / n_heads,
        };
        let ffn_dim = usize_key("feed_forward_length")?;
        let vocab_size = match f.get_u64(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => f
                .get_array("tokenizer.ggml.tokens")?
                .map(|a| a.len())
                .ok_or_else(|| Error::Config("no vocab size in metadata".into()))?,
        };
        let context_length = usize_key("context_length")?;
        let rms_eps = f.require_f64(&key("attention.layer_norm_rms_epsilon"))? as f32;
        let rope_base = f.get_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32;
        let rope_dims = match f.get_u64(&key("rope.dimension_count"))? {
            Some(v) => v as usize,
            None => head_dim,
        };
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(Error::Config(format!(
                "rope dimension {rope_dims} doesn't fit head size {head_dim}"
            )));
        }
        let mut cfg = ModelConfig {
            arch,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab_size,
            context_length,
            rms_eps,
            rope_style: RopeStyle::Norm,
            rope_dims,
            rope_base,
            rope_base_local: rope_base,
            sliding_window: None,
            layer_is_local: vec![false; n_layers],
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            embed_scale: None,
            activation: Activation::Silu,
        };
        match arch {
            Arch::Llama => {}
            Arch::Qwen2 => cfg.rope_style = RopeStyle::Neox,
            Arch::Gemma3 => {
                cfg.rope_style = RopeStyle::Neox;
                cfg.activation = Activation::GeluTanh;
                cfg.embed_scale = Some((d_model as f32).sqrt());
                cfg.rope_base_local = GEMMA3_LOCAL_ROPE_BASE;
                cfg.sliding_window = f
                    .get_u64(&key("attention.sliding_window"))?
                    .map(|w| w as usize);
                if cfg.sliding_window.is_some() {
                    cfg.layer_is_local = (0..n_layers)
                        .map(|l| (l + 1) % GEMMA3_SWA_PERIOD != 0)
                        .collect();
                }
            }
        }
        Ok(cfg)
    }

    /// Width of the query projection (`n_heads × head_dim`).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of the key/value projections (`n_kv_heads × head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
