//! What every handler shares: the served models (by name and alias) under their memory
//! budget, API and admin keys, limits, the usage meter and the shutdown flag.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_engine::ServingModel;
use kiln_model::LoraAdapter;
use kiln_usage::Meter;

use crate::error::{ApiError, Error, Result};
use crate::kind::ModelKind;
use crate::lease::{CallContext, Lease};
use crate::lora::{AdapterCache, LoraConfig};
use crate::pool::ModelPool;
use crate::slot::{LoadedModel, ModelSlot};

/// One accepted bearer token and the label its usage is reported under.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub key: String,
    pub label: Option<String>,
}

impl ApiKey {
    pub fn new(key: impl Into<String>, label: Option<String>) -> Self {
        Self {
            key: key.into(),
            label,
        }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        Self::new(key, None)
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key, None)
    }
}

/// Never prints the secret.
impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &kiln_usage::key_id(&self.key))
            .field("label", &self.label)
            .finish()
    }
}

/// Server-wide limits and credentials.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted bearer tokens; empty means no authentication.
    pub api_keys: Vec<ApiKey>,
    /// Keys for `/admin/*`. Without any, those routes are open when `api_keys` is empty
    /// too, and closed (403) otherwise.
    pub admin_keys: Vec<ApiKey>,
    /// Sequences that may wait per model beyond the `max_num_seqs` running ones.
    pub max_queued: usize,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Bytes all loaded models may take together (weights file plus KV cache);
    /// `None`: no limit.
    pub models_memory: Option<u64>,
    /// LoRA adapters requests may name.
    pub lora: LoraConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            admin_keys: Vec::new(),
            max_queued: 1024,
            body_limit: 4 << 20,
            models_memory: None,
            lora: LoraConfig::default(),
        }
    }
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    pool: ModelPool,
    config: ServerConfig,
    meter: Option<Arc<Meter>>,
    adapters: AdapterCache,
    shutting_down: AtomicBool,
}

impl AppState {
    /// State over `models` (the first is the default for requests that name none),
    /// without usage metering.
    pub fn new(config: ServerConfig, models: Vec<ModelSlot>) -> Result<Self> {
        Self::with_meter(config, models, None)
    }

    /// State over `models` whose requests are metered into `meter`.
    pub fn with_meter(
        config: ServerConfig,
        models: Vec<ModelSlot>,
        meter: Option<Arc<Meter>>,
    ) -> Result<Self> {
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
        let slots = models.into_iter().map(Arc::new).collect();
        Ok(Self(Arc::new(Inner {
            pool: ModelPool::new(slots, config.models_memory),
            adapters: AdapterCache::new(config.lora.clone()),
            config,
            meter,
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
        let slot =
            ModelSlot::preloaded(name, task, LoadedModel::Generate(model), config.max_queued);
        Self::new(config, vec![slot])
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn models(&self) -> &[Arc<ModelSlot>] {
        self.0.pool.slots()
    }

    pub fn pool(&self) -> &ModelPool {
        &self.0.pool
    }

    /// Where requests' usage goes, when metering is on.
    pub fn meter(&self) -> Option<&Arc<Meter>> {
        self.0.meter.as_ref()
    }

    /// The model a request names (name or alias, case-insensitive, with or without
    /// Workers AI's `@kiln/` prefix); the first model when it names none.
    pub fn resolve(&self, name: Option<&str>) -> std::result::Result<Arc<ModelSlot>, ApiError> {
        let models = self.models();
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

    /// Like [`AppState::resolve`] for an endpoint that needs a model of kind `kind`:
    /// a request that names none gets the first such model, and one that names a model
    /// of another kind gets a 400 naming that model's endpoints (before anything loads).
    pub fn resolve_for(
        &self,
        name: Option<&str>,
        kind: ModelKind,
    ) -> std::result::Result<Arc<ModelSlot>, ApiError> {
        if name.is_some_and(|n| !n.trim().is_empty()) {
            let slot = self.resolve(name)?;
            slot.require(kind)?;
            return Ok(slot);
        }
        if let Some(slot) = self.models().iter().find(|m| m.kind == Some(kind)) {
            return Ok(slot.clone());
        }
        Err(ApiError::invalid(
            "model",
            format!(
                "no {} model is served; served models: {}",
                kind.task(),
                self.models()
                    .iter()
                    .map(|m| format!("{} ({})", m.name, m.task))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    /// The named model for one request, loaded (waiting for its load if needed) and held
    /// until the lease is dropped. Records warm or cold in `ctx` and the metrics.
    pub async fn lease(
        &self,
        name: Option<&str>,
        ctx: &CallContext,
    ) -> std::result::Result<Lease, ApiError> {
        let slot = self.resolve(name)?;
        self.lease_slot(slot, ctx).await
    }

    /// [`AppState::lease`] on a model of kind `kind` ([`AppState::resolve_for`]).
    pub async fn lease_for(
        &self,
        name: Option<&str>,
        ctx: &CallContext,
        kind: ModelKind,
    ) -> std::result::Result<Lease, ApiError> {
        let slot = self.resolve_for(name, kind)?;
        self.lease_slot(slot, ctx).await
    }

    /// A lease on `slot`, loading it first if needed.
    pub async fn lease_slot(
        &self,
        slot: Arc<ModelSlot>,
        ctx: &CallContext,
    ) -> std::result::Result<Lease, ApiError> {
        let acquired = self.0.pool.acquire(&slot).await.inspect_err(|_| {
            ctx.warmth.set(false);
        })?;
        ctx.warmth.set(acquired.warm);
        if acquired.warm {
            slot.metrics.requests_warm.add(1);
        } else {
            slot.metrics.requests_cold.add(1);
        }
        Ok(Lease {
            model: acquired.model,
            warm: acquired.warm,
            caller: ctx.caller.clone(),
            meter: self.0.meter.clone(),
            hold: acquired.hold,
        })
    }

    pub fn adapters(&self) -> &AdapterCache {
        &self.0.adapters
    }

    /// The model and adapter names a request gives: `model: "base:adapter"` (when no
    /// model is named that whole) or `model` plus `lora`; naming two adapters is a 400.
    pub fn split_adapter<'a>(
        &self,
        model: Option<&'a str>,
        lora: Option<&'a str>,
    ) -> std::result::Result<(Option<&'a str>, Option<&'a str>), ApiError> {
        let lora = lora.map(str::trim).filter(|l| !l.is_empty());
        let Some((base, adapter)) = model
            .filter(|m| self.resolve(Some(m)).is_err())
            .and_then(|m| m.rsplit_once(':'))
            .filter(|(base, _)| self.resolve(Some(base)).is_ok())
        else {
            return Ok((model, lora));
        };
        if lora.is_some_and(|l| l != adapter) {
            return Err(ApiError::invalid(
                "lora",
                format!(
                    "`model` names adapter `{adapter}` but `lora` names `{}`",
                    lora.unwrap_or("")
                ),
            ));
        }
        Ok((Some(base), Some(adapter)))
    }

    /// A lease on the text model a request names, with its adapter when it names one
    /// (`model: "base:adapter"` or `lora`), loaded if needed.
    pub async fn lease_generator(
        &self,
        model: Option<&str>,
        lora: Option<&str>,
        ctx: &CallContext,
    ) -> std::result::Result<(Lease, Arc<ServingModel>, Option<Arc<LoraAdapter>>), ApiError> {
        let (model, lora) = self.split_adapter(model, lora)?;
        let lease = self.lease_for(model, ctx, ModelKind::Generate).await?;
        self.with_adapter(lease, lora).await
    }

    /// The text model of `lease` and adapter `lora` of it, if named.
    pub async fn with_adapter(
        &self,
        lease: Lease,
        lora: Option<&str>,
    ) -> std::result::Result<(Lease, Arc<ServingModel>, Option<Arc<LoraAdapter>>), ApiError> {
        let model = lease.generator()?;
        let adapter = match lora {
            Some(name) => Some(self.0.adapters.get(lease.slot(), &model, name).await?),
            None => None,
        };
        Ok((lease, model, adapter))
    }

    /// New requests get 503 from now on; in-flight ones carry on.
    pub fn begin_shutdown(&self) {
        self.0.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.0.shutting_down.load(Ordering::Acquire)
    }

    /// Every pinned model loaded and not shutting down (unpinned models load on demand).
    pub fn is_ready(&self) -> bool {
        !self.is_shutting_down()
            && self
                .models()
                .iter()
                .filter(|m| m.pinned)
                .all(|m| m.is_ready())
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
