//! One hosted model: its names, how to load it, and where it is in its life (unloaded →
//! loading → loaded → unloaded again when evicted), with the count of requests that hold
//! or wait for it, its admission queue and its metrics.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kiln_engine::ServingModel;
use tokio::sync::watch;

use crate::admission::Admission;
use crate::error::HostError;
use crate::kind::ModelKind;
use crate::loaded::LoadedModel;
use crate::metrics::ModelMetrics;
use crate::source::ModelSource;

/// Where a hosted model is in its life (as `/v1/models` shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelStatus {
    Unloaded,
    Loading,
    Loaded,
    /// Unloaded, and its last load failed (the next request tries again).
    Failed,
}

impl ModelStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelStatus::Unloaded => "unloaded",
            ModelStatus::Loading => "loading",
            ModelStatus::Loaded => "loaded",
            ModelStatus::Failed => "failed",
        }
    }
}

/// The outcome of a load, published to every request waiting for it.
pub(crate) type LoadOutcome = Option<Result<(), HostError>>;

pub(crate) enum Phase {
    Unloaded,
    Loading(watch::Receiver<LoadOutcome>),
    Loaded(LoadedModel),
}

pub(crate) struct HostedState {
    pub(crate) phase: Phase,
    /// Requests holding the model or waiting for it; a model with any is never unloaded.
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
pub struct HostedModel {
    pub name: String,
    pub aliases: Vec<String>,
    /// Catalogue task, e.g. `text-generation`.
    pub task: String,
    /// What the task makes of it; `None` for a task the server can't run (its load
    /// fails).
    pub kind: Option<ModelKind>,
    /// Unix seconds the model was registered (`created` in `/v1/models`).
    pub created: u64,
    /// Loaded at start and never unloaded.
    pub pinned: bool,
    /// `None` for a model handed over already loaded, which can't be loaded again.
    pub(crate) source: Option<ModelSource>,
    state: Mutex<HostedState>,
    fingerprint: RwLock<String>,
    pub admission: Admission,
    pub metrics: ModelMetrics,
    /// See [`HostedModel::constraint_env`].
    constraint_env: Mutex<Option<Arc<kiln_constrain::ConstraintEnv>>>,
}

impl HostedModel {
    /// A model that loads `source` when first needed (or at start when pinned).
    pub fn from_source(source: ModelSource, max_queued: usize) -> Self {
        let bytes = source.estimated_bytes();
        let mut hosted = Self::empty(
            source.name.clone(),
            source.aliases.clone(),
            source.task.clone(),
            source.pin,
            max_queued,
            bytes,
        );
        hosted.source = Some(source);
        hosted
    }

    /// A pinned model loaded by the caller (tests, embedding the server).
    pub fn preloaded(
        name: impl Into<String>,
        task: impl Into<String>,
        model: LoadedModel,
        max_queued: usize,
    ) -> Self {
        let hosted = Self::empty(name.into(), Vec::new(), task.into(), true, max_queued, 0);
        // A new model is not closed, so the model is always taken.
        let _ = hosted.install(model, 0);
        hosted
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
            state: Mutex::new(HostedState {
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

    pub(crate) fn lock(&self) -> MutexGuard<'_, HostedState> {
        // A poisoned lock only means a panic elsewhere mid-update of plain values.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `model` the loaded one; `weights` is the size of its file(s). After shutdown
    /// has closed it, the model is handed back instead.
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

    pub fn status(&self) -> ModelStatus {
        let st = self.lock();
        match &st.phase {
            Phase::Loaded(_) => ModelStatus::Loaded,
            Phase::Loading(_) => ModelStatus::Loading,
            Phase::Unloaded if st.failure.is_some() => ModelStatus::Failed,
            Phase::Unloaded => ModelStatus::Unloaded,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.status() == ModelStatus::Loaded
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
    pub fn charge(&self) -> u64 {
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

    /// `Ok` when the model is of kind `wanted`, else [`HostError::WrongModelTask`].
    pub fn require(&self, wanted: ModelKind) -> Result<(), HostError> {
        if self.kind == Some(wanted) {
            Ok(())
        } else {
            Err(ModelKind::mismatch(wanted, &self.name, &self.task))
        }
    }

    /// The text model's constraint environment (token trie and grammar compiler), built
    /// at its first constrained request and kept: the tokenizer is the same whenever the
    /// model's file is loaded.
    pub fn constraint_env(
        &self,
        model: &ServingModel,
    ) -> Result<Arc<kiln_constrain::ConstraintEnv>, HostError> {
        let mut env = self
            .constraint_env
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = env.as_ref() {
            return Ok(e.clone());
        }
        let built = Arc::new(
            kiln_constrain::ConstraintEnv::new(&model.tokenizer, model.model_config.vocab_size)
                .map_err(|e| {
                    HostError::Internal(format!("cannot prepare constrained decoding: {e}"))
                })?,
        );
        *env = Some(built.clone());
        Ok(built)
    }

    pub(crate) fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// A request's claim on a hosted model: while it lives the model is not unloaded. Taken before
/// waiting for a load, so a freshly loaded model can't be evicted before its waiters
/// get to use it.
pub(crate) struct Hold(Arc<HostedModel>);

impl Hold {
    pub(crate) fn new(hosted: &Arc<HostedModel>) -> Self {
        let mut st = hosted.lock();
        st.holders += 1;
        st.last_used = Instant::now();
        drop(st);
        Hold(hosted.clone())
    }

    pub(crate) fn hosted(&self) -> &Arc<HostedModel> {
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
