//! Per-key limits on the routes that run a model: requests and tokens per minute
//! (`kiln-guard`'s buckets) and the daily neuron quota (checked against the usage
//! store, so a restart does not reset it). Over a limit is 429 with `Retry-After`;
//! every answer carries OpenAI's `x-ratelimit-*` headers for the limits the key has.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kiln_guard::RateStatus;
use kiln_http::TransportError;

use crate::error::ApiError;
use crate::lease::caller_of;
use crate::state::AppState;
use kiln_db::unix_now;

pub async fn enforce(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // The endpoint table says which routes run a model; `kiln route` reads the same.
    if !kiln_api::endpoints::runs_model(req.method().as_str(), req.uri().path()) {
        return next.run(req).await;
    }
    let key = caller_of(req.extensions()).key_id;
    let gates = state.gates();
    let status = match gates.limiter.admit(&key) {
        Ok(s) => s,
        Err(l) => {
            let mut resp = TransportError::RateLimited {
                message: l.message(),
                retry_after_secs: l.retry_after_secs(),
            }
            .into_response();
            set_headers(resp.headers_mut(), &l.status);
            return resp;
        }
    };
    if let (Some(limit), Some(meter)) = (gates.quota.limit(&key), state.meter()) {
        let (meter, k) = (meter.clone(), key.clone());
        let used = tokio::task::spawn_blocking(move || meter.neurons_today(&k)).await;
        match used {
            Ok(Ok(used)) => {
                if let Err(over) = gates.quota.check(&key, used, unix_now()) {
                    return ApiError::QuotaExceeded {
                        message: format!(
                            "this API key has used {:.0} of its {:.0} neurons for today (UTC); the \
                             quota resets at midnight UTC",
                            over.used, limit
                        ),
                        retry_after_secs: over.retry_after.as_secs(),
                    }
                    .into_response();
                }
            }
            // The quota is a budget, not a lock: a store that can't be read doesn't
            // stop traffic, but it is logged.
            Ok(Err(e)) => tracing::warn!(error = %e, "quota: cannot read today's usage"),
            Err(e) => tracing::warn!(error = %e, "quota: the usage read failed"),
        }
    }
    let mut resp = next.run(req).await;
    set_headers(resp.headers_mut(), &status);
    resp
}

/// OpenAI's headers for the buckets the key has.
fn set_headers(h: &mut HeaderMap, s: &RateStatus) {
    for (name, value) in s.headers() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
}
