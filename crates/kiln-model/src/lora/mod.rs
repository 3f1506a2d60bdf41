//! LoRA adapters: low-rank deltas added to a base model's projections, per batch row.
//!
//! An adapter is PEFT's format (an `adapter_config.json` and `adapter_model.safetensors`
//! with `lora_A` / `lora_B` pairs per projection), loaded once for a given base model and
//! shared by every sequence that uses it. The base weights are never touched: each
//! projection computes `y = W·x` for the whole batch, then rows whose sequence has an
//! adapter add `scale · B·(A·x)`. Requests for different adapters, and for none, run in
//! the same step; a row's adapter is an index into the step's adapter list
//! ([`LoraBatch`]). The adapter's matrices are kept in f32: at the ranks adapters use
//! (8–64) they are small next to the base, and the delta is two skinny matrix-vector
//! products per row.

mod config;
mod error;
mod load;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use config::AdapterConfig;
pub use error::LoraError;
pub use load::is_adapter_dir;

use crate::config::ModelConfig;

/// Highest rank accepted (the per-row intermediate lives on the stack).
pub const MAX_RANK: usize = kiln_backend::MAX_LOW_RANK;

/// The projections an adapter can target, in the order of [`LayerLora`]'s array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The Hugging Face module name (`q_proj`, ...).
    pub fn hf_name(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
        }
    }

    pub fn from_hf_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.hf_name() == name)
    }

    /// `(inputs, outputs)` of this projection in `cfg`.
    pub fn dims(self, cfg: &ModelConfig) -> (usize, usize) {
        let (d, q, kv, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        match self {
            Target::Q => (d, q),
            Target::K | Target::V => (d, kv),
            Target::O => (q, d),
            Target::Gate | Target::Up => (d, ff),
            Target::Down => (ff, d),
        }
    }
}

/// One projection's low-rank pair: `delta(x) = Bᵀ_scaled · (A · x)`.
#[derive(Debug, Clone)]
pub struct LoraPair {
    pub rank: usize,
    pub inputs: usize,
    pub outputs: usize,
    /// `rank × inputs`, row-major (PEFT's `lora_A`).
    pub a: Vec<f32>,
    /// `rank × outputs`: PEFT's `lora_B` transposed, times the adapter's scale, with the
    /// rows permuted as the GGUF converter permuted the base's Q/K rows.
    pub b_t: Vec<f32>,
}

/// The pairs of one transformer block, indexed by [`Target`].
pub type LayerLora = [Option<LoraPair>; 7];

/// The base model shape an adapter was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BaseShape {
    n_layers: usize,
    d_model: usize,
    q_dim: usize,
    kv_dim: usize,
    ffn_dim: usize,
    permuted_qk: bool,
}

impl BaseShape {
    fn of(cfg: &ModelConfig) -> Self {
        Self {
            n_layers: cfg.n_layers,
            d_model: cfg.d_model,
            q_dim: cfg.q_dim(),
            kv_dim: cfg.kv_dim(),
            ffn_dim: cfg.ffn_dim,
            permuted_qk: load::permutes_qk(cfg),
        }
    }
}

/// A loaded adapter, bound to the shape of the base model it was loaded for.
#[derive(Debug)]
pub struct LoraAdapter {
    /// Unique per load in this process: the engine keys the prefix cache with it, so a
    /// reloaded (possibly changed) adapter never reuses an old one's KV.
    id: u64,
    pub name: String,
    pub config: AdapterConfig,
    pub layers: Vec<LayerLora>,
    base: BaseShape,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl LoraAdapter {
    pub(crate) fn new(
        name: String,
        config: AdapterConfig,
        layers: Vec<LayerLora>,
        cfg: &ModelConfig,
    ) -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name,
            config,
            layers,
            base: BaseShape::of(cfg),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the adapter was loaded for a model of `cfg`'s shape.
    pub fn fits(&self, cfg: &ModelConfig) -> bool {
        self.base == BaseShape::of(cfg)
    }

    /// Bytes of its matrices.
    pub fn bytes(&self) -> usize {
        self.pairs()
            .map(|p| (p.a.len() + p.b_t.len()) * size_of::<f32>())
            .sum()
    }

    /// Largest rank among its pairs.
    pub fn max_rank(&self) -> usize {
        self.pairs().map(|p| p.rank).max().unwrap_or(0)
    }

    /// How many projections it adapts.
    pub fn num_pairs(&self) -> usize {
        self.pairs().count()
    }

    fn pairs(&self) -> impl Iterator<Item = &LoraPair> {
        self.layers.iter().flat_map(|l| l.iter().flatten())
    }

    pub(crate) fn pair(&self, layer: usize, target: Target) -> Option<&LoraPair> {
        self.layers.get(layer)?[target as usize].as_ref()
    }
}

/// Which adapter each row of a batch uses.
#[derive(Clone, Copy, Default)]
pub struct LoraBatch<'a> {
    /// The adapters used in this step.
    pub adapters: &'a [Arc<LoraAdapter>],
    /// Per row: 0 for none, `i` for `adapters[i - 1]`. Empty when `adapters` is.
    pub rows: &'a [u16],
}

impl LoraBatch<'_> {
    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }

    /// The adapter of row `r`, if any.
    pub(crate) fn adapter(&self, r: usize) -> Option<&LoraAdapter> {
        let i = *self.rows.get(r)? as usize;
        i.checked_sub(1)
            .and_then(|i| self.adapters.get(i))
            .map(|a| &**a)
    }
}
