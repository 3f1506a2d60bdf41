//! The [`Generator`]: the served models ([`Host`]) with what every request on them
//! needs besides the model: metering of what it used, the tokens-per-minute buckets it
//! draws from, and the shutdown deadline it runs under.

use std::sync::Arc;

use kiln_engine::ServingModel;
use kiln_guard::Limiter;
use kiln_host::{Collected, Generation, Host, HostError, HostedModel, Lease, ModelKind, Permit};
use kiln_model::LoraAdapter;
use kiln_usage::Meter;

use crate::call::{usage_sink, Call};
use crate::cutoff::{Cutoff, CutoffSignal};
use crate::error::{GenerateError, Result};

/// Runs typed requests on the served models; one per server, shared by every service
/// that generates (routes, Responses rounds, batch lines, vector stores, the firewall).
pub struct Generator {
    host: Host,
    meter: Option<Arc<Meter>>,
    limiter: Arc<Limiter>,
    cutoff: Cutoff,
}

/// A text model leased with the adapter a request named.
pub(crate) struct TextLease {
    pub lease: Lease,
    pub model: Arc<ServingModel>,
    pub adapter: Option<Arc<LoraAdapter>>,
}

impl Generator {
    /// Generates on `host`'s models, metering into `meter` (when there is one) and
    /// drawing tokens from `limiter`'s per-key buckets.
    pub fn new(host: Host, meter: Option<Arc<Meter>>, limiter: Arc<Limiter>) -> Self {
        Self {
            host,
            meter,
            limiter,
            cutoff: Cutoff::default(),
        }
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Where requests' usage goes, when metering is on.
    pub fn meter(&self) -> Option<&Arc<Meter>> {
        self.meter.as_ref()
    }

    /// The per-key limits whose token buckets requests draw from.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The shutdown deadline, as running requests wait on it.
    pub fn cutoff(&self) -> CutoffSignal {
        self.cutoff.signal()
    }

    /// The shutdown deadline has passed: ends the requests still running.
    pub fn cut_requests(&self) {
        self.cutoff.fire();
    }

    /// Requests ended by the shutdown deadline.
    pub fn requests_cut(&self) -> usize {
        self.cutoff.cut()
    }

    /// The model a request names ([`Host::resolve`]).
    pub fn resolve(&self, name: Option<&str>) -> Result<Arc<HostedModel>> {
        Ok(self.host.resolve(name)?)
    }

    /// The model of kind `kind` a request names or defaults to ([`Host::resolve_for`]).
    pub fn resolve_for(&self, name: Option<&str>, kind: ModelKind) -> Result<Arc<HostedModel>> {
        Ok(self.host.resolve_for(name, kind)?)
    }

    /// The model and adapter names a request gives ([`Host::split_adapter`]).
    pub fn split_adapter<'a>(
        &self,
        model: Option<&'a str>,
        lora: Option<&'a str>,
    ) -> Result<(Option<&'a str>, Option<&'a str>)> {
        Ok(self.host.split_adapter(model, lora)?)
    }

    /// A lease on the model of kind `kind` a request names, loaded if needed and metered.
    pub async fn lease_for(
        &self,
        name: Option<&str>,
        call: &Call,
        kind: ModelKind,
    ) -> Result<Lease> {
        let hosted = self.resolve_for(name, kind)?;
        self.lease_hosted(hosted, call).await
    }

    /// A lease on `hosted`, loading it first if needed. Records warm or cold in `call`,
    /// and sends the request's usage to the meter under the caller's key.
    pub async fn lease_hosted(&self, hosted: Arc<HostedModel>, call: &Call) -> Result<Lease> {
        let asked = std::time::Instant::now();
        let mut lease = self.host.lease(hosted).await.inspect_err(|_| {
            call.warmth.set(false);
        })?;
        call.warmth.set_lease(lease.warm(), asked.elapsed());
        // Always set: the sink also reports the neurons for `x-kiln-neurons`.
        lease.set_usage_sink(usage_sink(
            self.meter.clone(),
            self.limiter.clone(),
            call.caller.clone(),
            call.class,
            call.warmth.clone(),
        ));
        Ok(lease)
    }

    /// A lease on `hosted` that meters nothing (its caller meters what it used).
    pub(crate) async fn lease_unmetered(&self, hosted: Arc<HostedModel>) -> Result<Lease> {
        Ok(self.host.lease(hosted).await?)
    }

    /// A lease on the text model `hosted` (or the one `model` names), with adapter
    /// `lora` of it when one is named (`model: "base:adapter"` or `lora`).
    pub(crate) async fn lease_text(
        &self,
        hosted: Option<Arc<HostedModel>>,
        model: Option<&str>,
        lora: Option<&str>,
        call: &Call,
    ) -> Result<TextLease> {
        let (model, lora) = self.split_adapter(model, lora)?;
        let hosted = match hosted {
            Some(h) => h,
            None => self.resolve_for(model, ModelKind::Generate)?,
        };
        let lease = self.lease_hosted(hosted, call).await?;
        let (lease, model, adapter) = self.host.with_adapter(lease, lora).await?;
        Ok(TextLease {
            lease,
            model,
            adapter,
        })
    }

    /// Runs `gen` to the end ([`kiln_host::collect`]): each choice's output and the
    /// usage; [`GenerateError::ShutdownCut`] if the shutdown deadline passes first.
    pub async fn collect(
        &self,
        gen: Generation,
    ) -> Result<(Vec<Collected>, kiln_host::TokenUsage)> {
        let mut cutoff = self.cutoff();
        tokio::select! {
            r = kiln_host::collect(gen) => Ok(r?),
            () = cutoff.passed() => Err(GenerateError::ShutdownCut),
        }
    }
}

/// Admits `seqs` sequences to `hosted`'s queue, counting refusals in the metrics.
pub(crate) fn admit(hosted: &HostedModel, seqs: usize, reject_if_busy: bool) -> Result<Permit> {
    let admitted = hosted
        .admission
        .try_admit(&hosted.name, seqs, reject_if_busy)
        .inspect_err(|e| match e {
            HostError::QueueFull { .. } => hosted.metrics.rejected_queue_full.add(1),
            HostError::Busy { .. } => hosted.metrics.rejected_busy.add(1),
            _ => {}
        });
    Ok(admitted?)
}

/// Runs `f` (tokenizing, rendering, compiling: synchronous CPU work) on the blocking
/// pool, so a long prompt doesn't stall other connections.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| GenerateError::Internal(format!("tokenizer task failed: {e}")))?
}
