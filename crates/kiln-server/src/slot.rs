//! One served model: its names, how to load it, and where it is in its life (unloaded →
//! loading → loaded → unloaded again when evicted), with the count of requests that hold
//! or wait for it.
//!
//! The loaded model is a [`LoadedModel`], an enum over the kinds of model the server runs
//! (text generation on the engine, and encoders: embeddings and text classification), so
//! the slot, the memory budget and the metrics are shared by every kind.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use kiln_backend::KvShape;
use kiln_encoder::{Classifier, Embedder};
use kiln_engine::{ServingModel, StatsSnapshot};
use tokio::sync::watch;

use crate::admission::Admission;
use crate::encoder::{Encoder, CONCURRENT_PASSES};
use crate::error::ApiError;
use crate::kind::ModelKind;
use crate::metrics::ModelMetrics;
use crate::source::ModelSource;
use crate::state::unix_now;

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
    fn fingerprint(&self, name: &str) -> String {
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

/// Where a slot is, as `/v1/models` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotStatus {
    Unloaded,
    Loading,
    Loaded,
    /// Unloaded, and its last load failed (the next request tries again).
    Failed,
}

impl SlotStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotStatus::Unloaded => "unloaded",
            SlotStatus::Loading => "loading",
            SlotStatus::Loaded => "loaded",
            SlotStatus::Failed => "failed",
        }
    }
}

/// The outcome of a load, published to every request waiting for it.
pub(crate) type LoadOutcome = Option<Result<(), ApiError>>;

pub(crate) enum Phase {
    Unloaded,
    Loading(watch::Receiver<LoadOutcome>),
    Loaded(LoadedModel),
}

pub(crate) struct SlotState {
    pub(crate) phase: Phase,
    /// Requests holding the model or waiting for it; a slot with any is never unloaded.
    pub(crate) holders: usize,
    pub(crate) last_used: Instant,
    /// Why the last load failed; cleared by a successful one.
    pub(crate) failure: Option<String>,
    /// Memory the model takes: an upper-bound estimate until it has been loaded once,
    /// then what it actually allocated.
    pub(crate) bytes: u64,
    pub(crate) parameters: Option<u64>,
    /// Set at shutdown: nothing loads any more.
    pub(crate) closed: bool,
}

/// One served model: names, how to (re)load it, its state, admission and metrics.
pub struct ModelSlot {
    pub name: String,
    pub aliases: Vec<String>,
    /// Catalogue task, e.g. `text-generation`.
    pub task: String,
    /// What the task makes of it; `None` for a task the server can't run (its load
    /// fails).
    pub kind: Option<ModelKind>,
    /// Unix seconds the slot was created (`created` in `/v1/models`).
    pub created: u64,
    /// Loaded at start and never unloaded.
    pub pinned: bool,
    /// `None` for a model handed over already loaded, which can't be loaded again.
    pub(crate) source: Option<ModelSource>,
    state: Mutex<SlotState>,
    fingerprint: RwLock<String>,
    pub admission: Admission,
    pub metrics: ModelMetrics,
    /// The text model's token trie and grammar compiler, built at its first
    /// constrained request (`structured.rs`).
    pub(crate) constraint_env: Mutex<Option<Arc<kiln_constrain::ConstraintEnv>>>,
}

impl ModelSlot {
    /// A slot that loads `source` when first needed (or at start when pinned).
    pub fn from_source(source: ModelSource, max_queued: usize) -> Self {
        let bytes = source.estimated_bytes();
        let mut slot = Self::empty(
            source.name.clone(),
            source.aliases.clone(),
            source.task.clone(),
            source.pin,
            max_queued,
            bytes,
        );
        slot.source = Some(source);
        slot
    }

    /// A pinned slot over a model loaded by the caller (tests, embedding the server).
    pub fn preloaded(
        name: impl Into<String>,
        task: impl Into<String>,
        model: LoadedModel,
        max_queued: usize,
    ) -> Self {
        let slot = Self::empty(name.into(), Vec::new(), task.into(), true, max_queued, 0);
        // A new slot is not closed, so the model is always taken.
        let _ = slot.install(model, 0);
        slot
    }

    fn empty(
        name: String,
        aliases: Vec<String>,
        task: String,
        pinned: bool,
        max_queued: usize,
        bytes: u64,
    ) -> Self {
        Self {
            name,
            aliases,
            kind: ModelKind::from_task(&task),
            task,
            created: unix_now(),
            pinned,
            source: None,
            state: Mutex::new(SlotState {
                phase: Phase::Unloaded,
                holders: 0,
                last_used: Instant::now(),
                failure: None,
                bytes,
                parameters: None,
                closed: false,
            }),
            fingerprint: RwLock::new(String::new()),
            admission: Admission::new(max_queued),
            metrics: ModelMetrics::default(),
            constraint_env: Mutex::new(None),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock only means a panic elsewhere mid-update of plain values.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `model` the loaded one; `weights` is the size of its file(s). After shutdown
    /// has taken the slot, the model is handed back instead.
    pub(crate) fn install(&self, model: LoadedModel, weights: u64) -> Result<(), LoadedModel> {
        let fingerprint = model.fingerprint(&self.name);
        let mut st = self.lock();
        if st.closed {
            st.phase = Phase::Unloaded;
            return Err(model);
        }
        self.admission.set_max_running(model.max_running());
        *self
            .fingerprint
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fingerprint;
        st.bytes = model.memory_bytes(weights);
        st.parameters = Some(model.parameters());
        st.failure = None;
        st.phase = Phase::Loaded(model);
        Ok(())
    }

    pub fn status(&self) -> SlotStatus {
        let st = self.lock();
        match &st.phase {
            Phase::Loaded(_) => SlotStatus::Loaded,
            Phase::Loading(_) => SlotStatus::Loading,
            Phase::Unloaded if st.failure.is_some() => SlotStatus::Failed,
            Phase::Unloaded => SlotStatus::Unloaded,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.status() == SlotStatus::Loaded
    }

    /// The loaded model, if any, without holding it (it may be unloaded right after).
    pub fn loaded(&self) -> Option<LoadedModel> {
        match &self.lock().phase {
            Phase::Loaded(m) => Some(m.clone()),
            _ => None,
        }
    }

    /// Why the last load failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// Bytes the model takes (or is estimated to take) against the memory budget.
    pub fn memory_bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Bytes it holds against the budget now: its size while loading or loaded, else 0.
    pub(crate) fn charge(&self) -> u64 {
        let st = self.lock();
        match st.phase {
            Phase::Unloaded => 0,
            Phase::Loading(_) | Phase::Loaded(_) => st.bytes,
        }
    }

    /// Parameter count, known once the model has been loaded.
    pub fn parameters(&self) -> Option<u64> {
        self.lock().parameters
    }

    /// Requests holding or waiting for the model.
    pub fn holders(&self) -> usize {
        self.lock().holders
    }

    /// `system_fingerprint`: changes whenever the model or its serving setup does.
    pub fn fingerprint(&self) -> String {
        self.fingerprint
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Removes the model for shutdown; nothing loads after this.
    pub fn take(&self) -> Option<LoadedModel> {
        let mut st = self.lock();
        st.closed = true;
        match std::mem::replace(&mut st.phase, Phase::Unloaded) {
            Phase::Loaded(m) => Some(m),
            other => {
                st.phase = other;
                None
            }
        }
    }

    /// `Ok` when the model is of kind `wanted`, else the 400 that names its endpoints.
    pub fn require(&self, wanted: ModelKind) -> Result<(), ApiError> {
        if self.kind == Some(wanted) {
            Ok(())
        } else {
            Err(ModelKind::mismatch(wanted, &self.name, &self.task))
        }
    }

    pub(crate) fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// A request's claim on a slot: while it lives the model is not unloaded. Taken before
/// waiting for a load, so a freshly loaded model can't be evicted before its waiters
/// get to use it.
pub(crate) struct Hold(Arc<ModelSlot>);

impl Hold {
    pub(crate) fn new(slot: &Arc<ModelSlot>) -> Self {
        let mut st = slot.lock();
        st.holders += 1;
        st.last_used = Instant::now();
        drop(st);
        Hold(slot.clone())
    }

    pub(crate) fn slot(&self) -> &Arc<ModelSlot> {
        &self.0
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.holders = st.holders.saturating_sub(1);
        // Least recently used counts from the end of the last request.
        st.last_used = Instant::now();
    }
}
