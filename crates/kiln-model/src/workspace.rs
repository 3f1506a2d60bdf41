//! Activation buffers for a forward step, reused across steps.

use std::time::Duration;

use crate::config::ModelConfig;

/// Where the last forward pass spent its time (the engine's per-step profile reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ForwardProfile {
    /// Weight matrix multiplies, activation quantization included (LM head too).
    pub matmul: Duration,
    /// Paged attention (scores, softmax, weighted values).
    pub attention: Duration,
    /// Everything else: embedding lookup, norms, RoPE, KV writes, activations, residuals.
    pub other: Duration,
}

/// Scratch memory sized for a number of rows; grows when a larger batch arrives and is
/// otherwise reused, so steady-state steps don't allocate.
#[derive(Default)]
pub struct Workspace {
    pub(crate) rows: usize,
    pub(crate) logits_rows: usize,
    pub(crate) x: Vec<f32>,
    pub(crate) h: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) attn: Vec<f32>,
    pub(crate) o: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) act: kiln_backend::MatmulScratch,
    pub(crate) final_h: Vec<f32>,
    pub(crate) logits: Vec<f32>,
    /// Longest sequence the caller will run (sizes attention scratch once); `None` means
    /// the model's context length.
    pub(crate) max_context: Option<usize>,
    pub(crate) profile: ForwardProfile,
}

impl Workspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time breakdown of the last forward pass run in this workspace.
    pub fn profile(&self) -> ForwardProfile {
        self.profile
    }

    /// Makes room for `rows` tokens and `logits_rows` rows of logits.
    pub(crate) fn ensure(&mut self, cfg: &ModelConfig, rows: usize, logits_rows: usize) {
        if rows > self.rows {
            let grow = |v: &mut Vec<f32>, w: usize| v.resize(rows * w, 0.0);
            grow(&mut self.x, cfg.d_model);
            grow(&mut self.h, cfg.d_model);
            grow(&mut self.q, cfg.q_dim());
            grow(&mut self.k, cfg.kv_dim());
            grow(&mut self.v, cfg.kv_dim());
            grow(&mut self.attn, cfg.q_dim());
            grow(&mut self.o, cfg.d_model);
            grow(&mut self.gate, cfg.ffn_dim);
            grow(&mut self.up, cfg.ffn_dim);
            self.rows = rows;
        }
        if logits_rows > self.logits_rows {
            self.final_h.resize(logits_rows * cfg.d_model, 0.0);
            self.logits.resize(logits_rows * cfg.vocab_size, 0.0);
            self.logits_rows = logits_rows;
        }
    }
}
