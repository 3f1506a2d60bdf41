//! What every handler shares: the served models (by name and alias), API keys, limits
//! and the shutdown flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_engine::ServingModel;

use crate::admission::Admission;
use crate::error::{ApiError, Error, Result};
use crate::metrics::ModelMetrics;

/// Server-wide limits and credentials.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted bearer tokens; empty means no authentication.
    pub api_keys: Vec<String>,
    /// Sequences that may wait per model beyond the `max_num_seqs` running ones.
    pub max_queued: usize,
    /// Largest request body, in bytes.
    pub body_limit: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            max_queued: 1024,
            body_limit: 4 << 20,
        }
    }
}

/// One served model: names, its loaded engine (once ready), admission and metrics.
pub struct ModelSlot {
    pub name: String,
    pub aliases: Vec<String>,
    /// Catalogue task, e.g. `text-generation`.
    pub task: String,
    /// Unix seconds the slot was created (`created` in `/v1/models`).
    pub created: u64,
    model: RwLock<Option<Arc<ServingModel>>>,
    failure: RwLock<Option<String>>,
    fingerprint: RwLock<String>,
    pub admission: Admission,
    pub metrics: ModelMetrics,
}

impl ModelSlot {
    pub fn new(
        name: impl Into<String>,
        aliases: Vec<String>,
        task: impl Into<String>,
        max_queued: usize,
    ) -> Self {
        Self {
            name: name.into(),
            aliases,
            task: task.into(),
            created: unix_now(),
            model: RwLock::new(None),
            failure: RwLock::new(None),
            fingerprint: RwLock::new(String::new()),
            admission: Admission::new(max_queued),
            metrics: ModelMetrics::default(),
        }
    }

    /// Marks the model loaded and ready for requests.
    pub fn set_loaded(&self, model: Arc<ServingModel>) {
        self.admission
            .set_max_running(model.engine_config.max_num_seqs);
        *write(&self.fingerprint) = fingerprint(&self.name, &model);
        *write(&self.model) = Some(model);
    }

    /// Records why loading failed; requests get 503 with the reason.
    pub fn set_failed(&self, reason: String) {
        *write(&self.failure) = Some(reason);
    }

    /// The loaded model, or why there is none.
    pub fn serving(&self) -> std::result::Result<Arc<ServingModel>, ApiError> {
        if let Some(m) = read(&self.model).as_ref() {
            return Ok(m.clone());
        }
        match read(&self.failure).as_ref() {
            Some(reason) => Err(ApiError::ModelUnavailable {
                model: self.name.clone(),
                reason: reason.clone(),
            }),
            None => Err(ApiError::ModelLoading {
                model: self.name.clone(),
            }),
        }
    }

    pub fn is_ready(&self) -> bool {
        read(&self.model).is_some()
    }

    /// Removes the model for shutdown; later requests see it as unavailable.
    pub fn take(&self) -> Option<Arc<ServingModel>> {
        write(&self.model).take()
    }

    /// `system_fingerprint`: changes whenever the model or its serving setup does.
    pub fn fingerprint(&self) -> String {
        read(&self.fingerprint).clone()
    }

    fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    models: Vec<Arc<ModelSlot>>,
    config: ServerConfig,
    shutting_down: AtomicBool,
}

impl AppState {
    /// State over `models` (the first is the default for requests that name none).
    pub fn new(config: ServerConfig, models: Vec<ModelSlot>) -> Result<Self> {
        if models.is_empty() {
            return Err(Error::NoModels);
        }
        for (i, m) in models.iter().enumerate() {
            let names = std::iter::once(&m.name).chain(&m.aliases);
            for n in names {
                if models[..i].iter().any(|o| o.is_named(n)) {
                    return Err(Error::DuplicateName(n.clone()));
                }
            }
        }
        Ok(Self(Arc::new(Inner {
            models: models.into_iter().map(Arc::new).collect(),
            config,
            shutting_down: AtomicBool::new(false),
        })))
    }

    /// State over one already loaded model (tests, embedding the server).
    pub fn with_model(
        config: ServerConfig,
        name: &str,
        task: &str,
        model: Arc<ServingModel>,
    ) -> Result<Self> {
        let slot = ModelSlot::new(name, Vec::new(), task, config.max_queued);
        slot.set_loaded(model);
        Self::new(config, vec![slot])
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn models(&self) -> &[Arc<ModelSlot>] {
        &self.0.models
    }

    /// The model a request names (name or alias, case-insensitive, with or without
    /// Workers AI's `@kiln/` prefix); the first model when it names none.
    pub fn resolve(&self, name: Option<&str>) -> std::result::Result<Arc<ModelSlot>, ApiError> {
        let models = &self.0.models;
        let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
            return models
                .first()
                .cloned()
                .ok_or(ApiError::Internal("no models".into()));
        };
        let bare = name.strip_prefix("@kiln/").unwrap_or(name);
        models
            .iter()
            .find(|m| m.is_named(name) || m.is_named(bare))
            .cloned()
            .ok_or_else(|| ApiError::ModelNotFound {
                model: name.to_string(),
                served: models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// New requests get 503 from now on; in-flight ones carry on.
    pub fn begin_shutdown(&self) {
        self.0.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.0.shutting_down.load(Ordering::Acquire)
    }

    /// Every model loaded and not shutting down.
    pub fn is_ready(&self) -> bool {
        !self.is_shutting_down() && self.0.models.iter().all(|m| m.is_ready())
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A poisoned lock only means a panic elsewhere mid-write of a plain value; the value
/// is still usable, so take it rather than spread the panic.
fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `fp_` and 10 hex digits of an FNV-1a hash over Kiln's version, the model name and
/// the engine settings that change outputs.
fn fingerprint(name: &str, model: &ServingModel) -> String {
    let c = &model.engine_config;
    let key = format!(
        "{}|{name}|{}|{}|{:?}|{}",
        env!("CARGO_PKG_VERSION"),
        c.max_model_len,
        c.block_size,
        c.kv_dtype,
        model.model_config.vocab_size
    );
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fp_{:010x}", h & 0xff_ffff_ffff)
}
