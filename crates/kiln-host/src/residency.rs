//! The served models under one memory budget: loading on demand, and unloading the
//! least recently used idle models to make room.
//!
//! A model's cost is its weights file plus its KV cache. Loads and evictions are decided
//! under one lock, so two loads can't both count the same free memory. A request for an
//! unloaded model starts its load on a blocking thread and waits; requests arriving
//! meanwhile wait for the same load. A model is unloaded only when it is loaded, not
//! pinned and held by no request (running or waiting); if the budget can't be met that
//! way the request is refused at once (503 over HTTP) rather than waiting for others to finish.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use crate::error::HostError;
use crate::hosted::{Hold, HostedModel, LoadOutcome, Phase};
use crate::loaded::LoadedModel;
use crate::source::ModelSource;

pub struct Residency {
    models: Vec<Arc<HostedModel>>,
    /// Bytes all loaded (and loading) models may take together; `None`: no limit.
    budget: Option<u64>,
    /// Held while deciding a load and its evictions.
    decide: Mutex<()>,
}

/// A model taken for one request.
pub(crate) struct Acquired {
    pub(crate) model: LoadedModel,
    /// Whether it was already loaded when the request arrived.
    pub(crate) warm: bool,
    pub(crate) hold: Hold,
}

impl Residency {
    pub fn new(models: Vec<Arc<HostedModel>>, budget: Option<u64>) -> Self {
        Self {
            models,
            budget,
            decide: Mutex::new(()),
        }
    }

    pub fn models(&self) -> &[Arc<HostedModel>] {
        &self.models
    }

    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// Bytes held by loaded and loading models.
    pub fn used(&self) -> u64 {
        self.models.iter().map(|s| s.charge()).sum()
    }

    /// The model of `hosted`, loading it first if needed; the hold keeps it loaded.
    pub(crate) async fn acquire(&self, hosted: &Arc<HostedModel>) -> Result<Acquired, HostError> {
        let hold = Hold::new(hosted);
        let mut warm = true;
        loop {
            let rx = {
                let st = hosted.lock();
                match &st.phase {
                    Phase::Loaded(m) => {
                        return Ok(Acquired {
                            model: m.clone(),
                            warm,
                            hold,
                        })
                    }
                    Phase::Loading(rx) => rx.clone(),
                    Phase::Unloaded if st.closed => return Err(HostError::ShuttingDown),
                    Phase::Unloaded => {
                        drop(st);
                        self.start_load(hosted)?
                    }
                }
            };
            warm = false;
            wait(rx, &hosted.name).await?;
        }
    }

    /// Loads `hosted` now unless it is loaded (pinned models at start).
    pub(crate) async fn ensure_loaded(&self, hosted: &Arc<HostedModel>) -> Result<(), HostError> {
        self.acquire(hosted).await.map(drop)
    }

    /// Starts loading `hosted` (or joins a load under way), evicting what must go first.
    fn start_load(
        &self,
        hosted: &Arc<HostedModel>,
    ) -> Result<watch::Receiver<LoadOutcome>, HostError> {
        let _decide = self
            .decide
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let need = {
            let st = hosted.lock();
            match &st.phase {
                Phase::Loading(rx) => return Ok(rx.clone()),
                Phase::Loaded(_) => return Ok(watch::channel(Some(Ok(()))).1),
                Phase::Unloaded => st.bytes,
            }
        };
        let Some(source) = hosted.source.clone() else {
            return Err(HostError::ModelUnavailable {
                model: hosted.name.clone(),
                reason: "it was unloaded and has no file to load it from".into(),
            });
        };
        let victims = self.make_room(hosted, need)?;
        let (tx, rx) = watch::channel(None);
        hosted.lock().phase = Phase::Loading(rx.clone());
        let hosted = hosted.clone();
        tokio::task::spawn_blocking(move || {
            let outcome = load(&hosted, &source, victims);
            let _ = tx.send(Some(outcome));
        });
        Ok(rx)
    }

    /// Unloads least recently used idle models until `need` more bytes fit, and returns
    /// them for the loader to stop. Nothing is unloaded when that can't make enough room.
    fn make_room(
        &self,
        hosted: &Arc<HostedModel>,
        need: u64,
    ) -> Result<Vec<(String, LoadedModel)>, HostError> {
        let Some(budget) = self.budget else {
            return Ok(Vec::new());
        };
        let others = || self.models.iter().filter(|s| !Arc::ptr_eq(s, hosted));
        let mut used: u64 = others().map(|s| s.charge()).sum();
        if used.saturating_add(need) <= budget {
            return Ok(Vec::new());
        }
        let mut idle: Vec<(Instant, u64, &Arc<HostedModel>)> = others()
            .filter(|s| !s.pinned)
            .filter_map(|s| {
                let st = s.lock();
                (matches!(st.phase, Phase::Loaded(_)) && st.holders == 0).then_some((
                    st.last_used,
                    st.bytes,
                    s,
                ))
            })
            .collect();
        let freeable: u64 = idle.iter().map(|(_, b, _)| b).sum();
        let no_room = |used: u64, freeable: u64| HostError::NoRoom {
            model: hosted.name.clone(),
            need,
            budget,
            held: used.saturating_sub(freeable),
        };
        if (used - freeable.min(used)).saturating_add(need) > budget {
            return Err(no_room(used, freeable));
        }
        idle.sort_by_key(|(t, _, _)| *t);
        let mut victims = Vec::new();
        for (_, _, s) in idle {
            if used.saturating_add(need) <= budget {
                break;
            }
            let mut st = s.lock();
            // Re-checked under the model's lock: a request may have taken it meanwhile.
            if st.holders > 0 {
                continue;
            }
            if let Phase::Loaded(m) = std::mem::replace(&mut st.phase, Phase::Unloaded) {
                used = used.saturating_sub(st.bytes);
                s.metrics.unloads.add(1);
                tracing::info!(model = %s.name, for_model = %hosted.name, "unloading idle model to make room");
                victims.push((s.name.clone(), m));
            }
        }
        if used.saturating_add(need) > budget {
            // Only if requests took the candidates meanwhile; what was unloaded stays so.
            tokio::task::spawn_blocking(move || stop_all(victims));
            return Err(no_room(used, 0));
        }
        Ok(victims)
    }
}

/// Runs on a blocking thread: stops the evicted models (so their memory is free before
/// more is taken), loads `source` and installs it in `hosted`.
fn load(
    hosted: &HostedModel,
    source: &ModelSource,
    victims: Vec<(String, LoadedModel)>,
) -> Result<(), HostError> {
    stop_all(victims);
    let started = Instant::now();
    tracing::info!(model = %hosted.name, path = %source.path.display(), "loading model");
    // A panic in a loader must not leave the model loading forever.
    let loaded = std::panic::catch_unwind(AssertUnwindSafe(|| source.load()))
        .unwrap_or_else(|_| Err("the loader panicked".into()));
    match loaded {
        Ok(model) => {
            hosted.metrics.model_load.observe(started.elapsed());
            if let Err(model) = hosted.install(model, source.weights_bytes()) {
                model.stop();
                return Err(HostError::ShuttingDown);
            }
            tracing::info!(
                model = %hosted.name,
                seconds = started.elapsed().as_secs_f64(),
                bytes = hosted.memory_bytes(),
                "model ready"
            );
            Ok(())
        }
        Err(reason) => {
            tracing::error!(model = %hosted.name, %reason, "cannot load model");
            hosted.metrics.load_failures.add(1);
            let mut st = hosted.lock();
            st.phase = Phase::Unloaded;
            st.failure = Some(reason.clone());
            Err(HostError::ModelUnavailable {
                model: hosted.name.clone(),
                reason,
            })
        }
    }
}

fn stop_all(models: Vec<(String, LoadedModel)>) {
    for (name, model) in models {
        model.stop();
        tracing::info!(model = %name, "model unloaded");
    }
}

/// Waits for the load behind `rx` to finish.
async fn wait(mut rx: watch::Receiver<LoadOutcome>, model: &str) -> Result<(), HostError> {
    loop {
        if let Some(outcome) = rx.borrow_and_update().clone() {
            return outcome;
        }
        if rx.changed().await.is_err() {
            // The loader ended without a word (it panicked).
            return rx.borrow().clone().unwrap_or_else(|| {
                Err(HostError::ModelUnavailable {
                    model: model.to_string(),
                    reason: "the load was abandoned".into(),
                })
            });
        }
    }
}
