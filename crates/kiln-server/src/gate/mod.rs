//! What stands in front of the model routes, in the order a request meets it: per-key
//! rate limits and the daily neuron quota (`limits.rs`, 429 with `Retry-After` and
//! OpenAI's `x-ratelimit-*` headers), the response cache (`cache.rs`, `x-kiln-cache`),
//! and the prompt firewall (`firewall.rs`, 403 `prompt_blocked` and the
//! `x-kiln-firewall-*` headers). The rules are `kiln-guard`'s; this module maps them to
//! HTTP. The firewall's classifier is the generator's (`kiln_generate::InjectionClassifier`).

pub mod cache;
pub mod firewall;
pub mod limits;
mod prompt_route;

use kiln_http::TransportError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kiln_guard::{Firewall, Limiter, Policies, Quota, RateLimits, ResponseCache};

use kiln_generate::{Generator, InjectionClassifier};

use crate::error::ApiError;
use crate::state::AppState;

/// The request's body read whole (under the server's body limit), and the request
/// rebuilt around it for the handler; a body over the limit is its 413.
pub(crate) async fn buffered(
    state: &AppState,
    req: axum::extract::Request,
) -> Result<(axum::extract::Request, axum::body::Bytes), axum::response::Response> {
    use axum::response::IntoResponse;
    let limit = crate::body_limit::of_request(req.extensions(), state.config().body_limit);
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok((
            axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes.clone())),
            bytes,
        )),
        Err(_) => Err(TransportError::PayloadTooLarge { limit }.into_response()),
    }
}

/// How the gates are set up.
#[derive(Debug, Clone, Default)]
pub struct GuardSettings {
    /// The firewall's policy and per-key overrides (off unless configured).
    pub firewall: Policies,
    pub rate_limits: RateLimits,
    /// Per-key overrides, by key id.
    pub key_rate_limits: HashMap<String, RateLimits>,
    pub quota: Quota,
    /// The response cache, when on.
    pub cache: Option<CacheSettings>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    pub ttl: Duration,
    pub max_bytes: usize,
}

/// The gates' state, one per server.
pub struct Gates {
    pub limiter: Arc<Limiter>,
    pub quota: Quota,
    pub cache: Option<ResponseCache>,
    /// When the server serves a classifier or scores prompts.
    pub firewall: Option<Arc<Firewall>>,
    pub policies: Policies,
    pub firewall_metrics: kiln_host::metrics::firewall::FirewallMetrics,
}

impl Gates {
    pub fn new(s: &GuardSettings) -> Self {
        Self {
            limiter: Arc::new(Limiter::new(s.rate_limits, s.key_rate_limits.clone())),
            quota: s.quota.clone(),
            cache: s.cache.map(|c| ResponseCache::new(c.ttl, c.max_bytes)),
            firewall: None,
            policies: s.firewall.clone(),
            firewall_metrics: Default::default(),
        }
    }

    /// Starts the firewall on the generator's classifier when it serves a
    /// text-classification model (call on the runtime, before serving). Scoring prompts
    /// without one is a setup error.
    pub fn enable_firewall(&mut self, generator: &Arc<Generator>) -> crate::error::Result<()> {
        let served = generator
            .resolve_for(None, kiln_host::ModelKind::Classify)
            .is_ok();
        let policies = self.policies.clone();
        if !served {
            if policies.any_on() {
                return Err(crate::error::Error::Firewall(
                    "the prompt firewall is on but no text-classification model is served; serve \
                     nanoguard-prompt-injection"
                        .into(),
                ));
            }
            return Ok(());
        }
        let model = Arc::new(InjectionClassifier(generator.clone()));
        self.firewall = Some(Arc::new(Firewall::new(policies, model)));
        Ok(())
    }

    /// The prompt firewall, when the server has a classifier for it.
    pub fn firewall(&self) -> Result<&Arc<Firewall>, ApiError> {
        self.firewall
            .as_ref()
            .ok_or_else(|| ApiError::InvalidRequest {
                param: None,
                message: "this server has no prompt classifier: start it with --firewall log (or \
                      serve nanoguard-prompt-injection)"
                    .into(),
            })
    }
}
