//! Activation buffers for a forward step, reused across steps.

use std::time::Duration;

use kiln_backend::{Backend, CpuBackend};

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

/// Scratch memory in backend `B`'s memory, sized for a number of rows; grows when a
/// larger batch arrives and is otherwise reused, so steady-state steps don't allocate.
pub struct Workspace<B: Backend = CpuBackend> {
    pub(crate) rows: usize,
    pub(crate) logits_rows: usize,
    pub(crate) x: B::Activations,
    pub(crate) h: B::Activations,
    pub(crate) q: B::Activations,
    pub(crate) k: B::Activations,
    pub(crate) v: B::Activations,
    pub(crate) attn: B::Activations,
    pub(crate) o: B::Activations,
    pub(crate) gate: B::Activations,
    pub(crate) up: B::Activations,
    pub(crate) act: B::MatmulScratch,
    pub(crate) final_h: B::Activations,
    pub(crate) logits: B::Activations,
    /// Longest sequence the caller will run (sizes attention scratch once); `None` means
    /// the model's context length.
    pub(crate) max_context: Option<usize>,
    pub(crate) profile: ForwardProfile,
}

impl<B: Backend> Default for Workspace<B> {
    fn default() -> Self {
        Self {
            rows: 0,
            logits_rows: 0,
            x: Default::default(),
            h: Default::default(),
            q: Default::default(),
            k: Default::default(),
            v: Default::default(),
            attn: Default::default(),
            o: Default::default(),
            gate: Default::default(),
            up: Default::default(),
            act: Default::default(),
            final_h: Default::default(),
            logits: Default::default(),
            max_context: None,
            profile: ForwardProfile::default(),
        }
    }
}

impl<B: Backend> Workspace<B> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time breakdown of the last forward pass run in this workspace.
    pub fn profile(&self) -> ForwardProfile {
        self.profile
    }

    /// Makes room for `rows` tokens and `logits_rows` rows of logits.
    pub(crate) fn ensure(&mut self, b: &B, cfg: &ModelConfig, rows: usize, logits_rows: usize) {
        if rows > self.rows {
            let grow = |v: &mut B::Activations, w: usize| b.reserve(v, rows * w);
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
            b.reserve(&mut self.final_h, logits_rows * cfg.d_model);
            b.reserve(&mut self.logits, logits_rows * cfg.vocab_size);
            self.logits_rows = logits_rows;
        }
    }
}
