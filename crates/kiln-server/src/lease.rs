//! One request's use of a model: who is calling (for metering), whether the model was
//! warm (for the `x-kiln-warm` header), and the [`Lease`] that keeps the model loaded
//! while the request runs and records what it consumed.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kiln_api::Usage;
use kiln_encoder::{Classifier, Embedder};
use kiln_engine::ServingModel;
use kiln_usage::{Meter, UsageRecord};

use crate::encoder::Encoder;
use crate::error::ApiError;
use crate::kind::ModelKind;
use crate::slot::{Hold, LoadedModel, ModelSlot};

/// The header saying whether the model was loaded when the request arrived.
pub const WARM_HEADER: &str = "x-kiln-warm";

/// Who is calling: the API key's id (a SHA-256 prefix, never the key) and its label, or
/// `anonymous` when the server has no keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub key_id: String,
    pub label: Option<String>,
}

impl Caller {
    pub fn anonymous() -> Self {
        Self {
            key_id: kiln_usage::ANONYMOUS.to_string(),
            label: None,
        }
    }
}

/// Set once a request knows whether its model was warm; the request middleware turns it
/// into the `x-kiln-warm` header of whatever response goes out (JSON, SSE or error).
#[derive(Debug, Clone, Default)]
pub struct Warmth(Arc<AtomicU8>);

impl Warmth {
    const COLD: u8 = 1;
    const WARM: u8 = 2;

    pub fn set(&self, warm: bool) {
        let v = if warm { Self::WARM } else { Self::COLD };
        self.0.store(v, Ordering::Release);
    }

    /// `None` when the request never reached a model.
    pub fn get(&self) -> Option<bool> {
        match self.0.load(Ordering::Acquire) {
            Self::WARM => Some(true),
            Self::COLD => Some(false),
            _ => None,
        }
    }
}

/// What a handler needs to take a lease, read from the request's extensions (put there
/// by the auth and request-context middleware).
#[derive(Debug, Clone)]
pub struct CallContext {
    pub caller: Caller,
    pub warmth: Warmth,
}

impl<S: Send + Sync> FromRequestParts<S> for CallContext {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(Self {
            caller: parts
                .extensions
                .get::<Caller>()
                .cloned()
                .unwrap_or_else(Caller::anonymous),
            warmth: parts
                .extensions
                .get::<Warmth>()
                .cloned()
                .unwrap_or_default(),
        })
    }
}

/// A loaded model held for one request: it is not unloaded while the lease lives.
/// Dropped when the response ends (for a stream, when its body does).
pub struct Lease {
    pub(crate) model: LoadedModel,
    pub(crate) warm: bool,
    pub(crate) caller: Caller,
    pub(crate) meter: Option<Arc<Meter>>,
    pub(crate) hold: Hold,
}

impl Lease {
    pub fn slot(&self) -> &Arc<ModelSlot> {
        self.hold.slot()
    }

    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    /// Whether the model was already loaded when the request arrived.
    pub fn warm(&self) -> bool {
        self.warm
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The text-generation model, or 400 when the model does something else.
    pub fn generator(&self) -> Result<Arc<ServingModel>, ApiError> {
        match &self.model {
            LoadedModel::Generate(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Generate)),
        }
    }

    /// The embedding model, or 400 when the model does something else.
    pub fn embedder(&self) -> Result<Arc<Encoder<Embedder>>, ApiError> {
        match &self.model {
            LoadedModel::Embed(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Embed)),
        }
    }

    /// The text classifier, or 400 when the model does something else.
    pub fn classifier(&self) -> Result<Arc<Encoder<Classifier>>, ApiError> {
        match &self.model {
            LoadedModel::Classify(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Classify)),
        }
    }

    fn mismatch(&self, wanted: ModelKind) -> ApiError {
        ModelKind::mismatch(wanted, &self.slot().name, self.model.kind().task())
    }

    /// Adds one request's consumption to the caller's usage of this model.
    pub fn record_usage(&self, usage: &Usage) {
        let Some(meter) = &self.meter else { return };
        let cached = usage.prompt_tokens_details.cached_tokens;
        meter.record(UsageRecord {
            key_id: self.caller.key_id.clone(),
            label: self.caller.label.clone(),
            model: self.slot().name.clone(),
            requests: 1,
            prompt_tokens: usage.prompt_tokens,
            cached_tokens: cached,
            completion_tokens: usage.completion_tokens,
            neurons: kiln_usage::neurons(
                self.model.parameters(),
                usage.prompt_tokens,
                cached,
                usage.completion_tokens,
            ),
        });
    }
}
