//! One request's use of a hosted model: the [`Lease`] keeps the model loaded while the
//! request runs, says whether it was warm, and hands what the request consumed to the
//! caller's [`UsageSink`] (metering is the caller's business, not hosting's).

use std::sync::Arc;

use kiln_encoder::{Classifier, Embedder};
use kiln_engine::ServingModel;

use crate::encoder::Encoder;
use crate::error::HostError;
use crate::hosted::{Hold, HostedModel};
use crate::kind::ModelKind;
use crate::loaded::LoadedModel;

/// Tokens one request consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub prompt: u64,
    pub completion: u64,
    /// Prompt tokens served from the prefix cache (counted in `prompt` too).
    pub cached: u64,
    /// Draft tokens speculative decoding verified, and how many it accepted.
    pub draft: u64,
    pub accepted: u64,
}

/// Where a lease reports its request's [`TokenUsage`], once, when the work is done.
pub type UsageSink = Box<dyn FnOnce(&Lease, TokenUsage) + Send + Sync>;

/// A loaded model held for one request: it is not unloaded while the lease lives.
/// Dropped when the response ends (for a stream, when its body does).
pub struct Lease {
    pub(crate) model: LoadedModel,
    pub(crate) warm: bool,
    pub(crate) hold: Hold,
    pub(crate) usage_sink: Option<UsageSink>,
}

impl Lease {
    pub fn hosted(&self) -> &Arc<HostedModel> {
        self.hold.hosted()
    }

    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    /// Whether the model was already loaded when the request arrived.
    pub fn warm(&self) -> bool {
        self.warm
    }

    /// Sets where the request's usage goes ([`Lease::record_usage`]).
    pub fn set_usage_sink(&mut self, sink: UsageSink) {
        self.usage_sink = Some(sink);
    }

    /// The text-generation model, or [`HostError::WrongModelTask`].
    pub fn generator(&self) -> Result<Arc<ServingModel>, HostError> {
        match &self.model {
            LoadedModel::Generate(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Generate)),
        }
    }

    /// The embedding model, or [`HostError::WrongModelTask`].
    pub fn embedder(&self) -> Result<Arc<Encoder<Embedder>>, HostError> {
        match &self.model {
            LoadedModel::Embed(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Embed)),
        }
    }

    /// The text classifier, or [`HostError::WrongModelTask`].
    pub fn classifier(&self) -> Result<Arc<Encoder<Classifier>>, HostError> {
        match &self.model {
            LoadedModel::Classify(m) => Ok(m.clone()),
            _ => Err(self.mismatch(ModelKind::Classify)),
        }
    }

    fn mismatch(&self, wanted: ModelKind) -> HostError {
        ModelKind::mismatch(wanted, &self.hosted().name, self.model.kind().task())
    }

    /// Hands the request's consumption to the usage sink, if one is set (the first
    /// call only).
    pub fn record_usage(&mut self, usage: TokenUsage) {
        if let Some(sink) = self.usage_sink.take() {
            sink(self, usage);
        }
    }
}
