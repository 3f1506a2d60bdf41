//! The hosted models together: finding one by name, leasing it (loading it first if
//! needed), its LoRA adapters, and the shutdown flag. What every caller of hosting shares;
//! the HTTP server keeps one beside its own configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kiln_engine::ServingModel;
use kiln_model::LoraAdapter;

use crate::error::HostError;
use crate::hosted::HostedModel;
use crate::kind::ModelKind;
use crate::lease::Lease;
use crate::lora::{AdapterCache, LoraConfig};
use crate::residency::Residency;

/// Why a set of models can't be hosted together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    #[error("no models to serve")]
    NoModels,
    #[error("two served models are both called `{0}`")]
    DuplicateName(String),
}

/// A text model with the adapter a request asked for, both held by its lease.
pub type AdaptedModel = (Lease, Arc<ServingModel>, Option<Arc<LoraAdapter>>);

pub struct Host {
    residency: Residency,
    adapters: AdapterCache,
    shutting_down: AtomicBool,
}

impl Host {
    /// Hosts `models` (the first is the default for requests that name none) under
    /// `models_memory` bytes (`None`: no limit), with adapters found per `lora`.
    pub fn new(
        models: Vec<HostedModel>,
        models_memory: Option<u64>,
        lora: LoraConfig,
    ) -> Result<Self, SetupError> {
        if models.is_empty() {
            return Err(SetupError::NoModels);
        }
        for (i, m) in models.iter().enumerate() {
            for n in std::iter::once(&m.name).chain(&m.aliases) {
                if models[..i].iter().any(|o| o.is_named(n)) {
                    return Err(SetupError::DuplicateName(n.clone()));
                }
            }
        }
        let models = models.into_iter().map(Arc::new).collect();
        Ok(Self {
            residency: Residency::new(models, models_memory),
            adapters: AdapterCache::new(lora),
            shutting_down: AtomicBool::new(false),
        })
    }

    pub fn models(&self) -> &[Arc<HostedModel>] {
        self.residency.models()
    }

    pub fn residency(&self) -> &Residency {
        &self.residency
    }

    pub fn adapters(&self) -> &AdapterCache {
        &self.adapters
    }

    /// The model a caller names (name or alias, case-insensitive, with or without
    /// Workers AI's `@kiln/` prefix); the first model when it names none.
    pub fn resolve(&self, name: Option<&str>) -> Result<Arc<HostedModel>, HostError> {
        let models = self.models();
        let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
            return models
                .first()
                .cloned()
                .ok_or(HostError::Internal("no models".into()));
        };
        let bare = name.strip_prefix("@kiln/").unwrap_or(name);
        models
            .iter()
            .find(|m| m.is_named(name) || m.is_named(bare))
            .cloned()
            .ok_or_else(|| HostError::ModelNotFound {
                model: name.to_string(),
                served: models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Like [`Host::resolve`] for a caller that needs a model of kind `kind`: one that
    /// names none gets the first such model, and one that names a model of another kind
    /// gets [`HostError::WrongModelTask`] (before anything loads).
    pub fn resolve_for(
        &self,
        name: Option<&str>,
        kind: ModelKind,
    ) -> Result<Arc<HostedModel>, HostError> {
        if name.is_some_and(|n| !n.trim().is_empty()) {
            let hosted = self.resolve(name)?;
            hosted.require(kind)?;
            return Ok(hosted);
        }
        if let Some(hosted) = self.models().iter().find(|m| m.kind == Some(kind)) {
            return Ok(hosted.clone());
        }
        Err(HostError::NoModelOfKind {
            kind,
            served: self
                .models()
                .iter()
                .map(|m| format!("{} ({})", m.name, m.task))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// A lease on `hosted`, loading it first if needed; counted warm or cold in its
    /// metrics.
    pub async fn lease(&self, hosted: Arc<HostedModel>) -> Result<Lease, HostError> {
        let acquired = self.residency.acquire(&hosted).await?;
        if acquired.warm {
            hosted.metrics.requests_warm.add(1);
        } else {
            hosted.metrics.requests_cold.add(1);
        }
        Ok(Lease {
            model: acquired.model,
            warm: acquired.warm,
            hold: acquired.hold,
            usage_sink: None,
        })
    }

    /// The model and adapter names a caller gives: `model: "base:adapter"` (when no
    /// model is named that whole) or `model` plus `lora`; naming two adapters is an
    /// error.
    pub fn split_adapter<'a>(
        &self,
        model: Option<&'a str>,
        lora: Option<&'a str>,
    ) -> Result<(Option<&'a str>, Option<&'a str>), HostError> {
        let lora = lora.map(str::trim).filter(|l| !l.is_empty());
        let Some((base, adapter)) = model
            .filter(|m| self.resolve(Some(m)).is_err())
            .and_then(|m| m.rsplit_once(':'))
            .filter(|(base, _)| self.resolve(Some(base)).is_ok())
        else {
            return Ok((model, lora));
        };
        if let Some(l) = lora.filter(|l| *l != adapter) {
            return Err(HostError::TwoAdapters {
                in_model: adapter.to_string(),
                in_lora: l.to_string(),
            });
        }
        Ok((Some(base), Some(adapter)))
    }

    /// The text model of `lease` and adapter `lora` of it, if named.
    pub async fn with_adapter(
        &self,
        lease: Lease,
        lora: Option<&str>,
    ) -> Result<AdaptedModel, HostError> {
        let model = lease.generator()?;
        let adapter = match lora {
            Some(name) => Some(self.adapters.get(lease.hosted(), &model, name).await?),
            None => None,
        };
        Ok((lease, model, adapter))
    }

    /// Loads every pinned model in turn; the first failure stops it (`stop` is checked
    /// between models).
    pub async fn load_pinned(&self, stop: impl Fn() -> bool) -> Result<(), (String, HostError)> {
        for hosted in self.models().iter().filter(|m| m.pinned) {
            if stop() {
                return Ok(());
            }
            self.residency
                .ensure_loaded(hosted)
                .await
                .map_err(|e| (hosted.name.clone(), e))?;
        }
        Ok(())
    }

    /// Takes every model out and stops it (draining its engine and joining its thread).
    /// A model still referenced by requests that outlived the deadline is only told to
    /// drain; its thread ends with the process.
    pub async fn stop_models(&self) {
        for hosted in self.models() {
            let Some(model) = hosted.take() else { continue };
            let name = hosted.name.clone();
            let _ = tokio::task::spawn_blocking(move || model.stop()).await;
            tracing::info!(model = %name, "engine stopped");
        }
    }

    /// Marks the start of shutdown: callers refuse new requests from now on, and held
    /// leases carry on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
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
