//! The firewall in front of the prompt routes: the request's user text (read by
//! `kiln_guard::prompt_texts` in the route's shape, `prompt_route.rs`) is scored before
//! the handler runs; block mode refuses with 403 `prompt_blocked` (the prompt never
//! reaches the engine, so no generation is metered), log mode lets it through. Every
//! scored response says what was found in `x-kiln-firewall-injection-score` and
//! `x-kiln-firewall-pii`; the PII text itself is never logged.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kiln_guard::{prompt_texts, BlockReason, Mode, Verdict};
use kiln_host::HostError;

use super::{prompt_route, Gates};
use crate::error::ApiError;
use crate::lease::{caller_of, Caller};
use crate::state::AppState;

pub const SCORE_HEADER: &str = "x-kiln-firewall-injection-score";
pub const PII_HEADER: &str = "x-kiln-firewall-pii";

/// Scores the prompt of a request on a prompt route for its caller's policy.
pub async fn screen(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Ok(fw) = state.firewall() else {
        return next.run(req).await;
    };
    let caller = caller_of(req.extensions());
    let policy = fw.policy(&caller.key_id).clone();
    let shape = match prompt_route::prompt_shape(req.uri().path()) {
        Some(shape) if policy.mode != Mode::Off && req.method() == Method::POST => shape,
        _ => return next.run(req).await,
    };
    let (req, bytes) = match super::buffered(&state, req).await {
        Ok(b) => b,
        Err(too_large) => return too_large,
    };
    let body = serde_json::from_slice(&bytes).ok();
    match judge(state.gates(), &caller, shape, body.as_ref()).await {
        Judged::Unscored => next.run(req).await,
        Judged::Refused(e) => e.into_response(),
        Judged::Scored { verdict, blocked } => {
            let mut resp = match blocked {
                Some(e) => e.into_response(),
                None => next.run(req).await,
            };
            set_headers(resp.headers_mut(), &verdict);
            resp
        }
    }
}

/// A batch line's screening, as its request would get over HTTP: the error a blocked
/// (or unscorable, in block mode) line is stored with.
pub(crate) async fn screen_line(
    gates: &Gates,
    caller: &Caller,
    path: &str,
    body: &serde_json::Value,
) -> Option<ApiError> {
    let fw = gates.firewall.as_ref()?;
    let shape = prompt_route::prompt_shape(path)?;
    if fw.policy(&caller.key_id).mode == Mode::Off {
        return None;
    }
    match judge(gates, caller, shape, Some(body)).await {
        Judged::Unscored => None,
        Judged::Refused(e) => Some(e),
        Judged::Scored { blocked, .. } => blocked,
    }
}

/// What the firewall made of one prompt.
enum Judged {
    /// Not a prompt (or not JSON: the handler says why), or not scored in log mode.
    Unscored,
    /// Not scored in block mode: fail closed.
    Refused(ApiError),
    /// Scored; refused when `blocked`.
    Scored {
        verdict: Verdict,
        blocked: Option<ApiError>,
    },
}

/// Scores `body` (of shape `shape`) for `caller`'s policy, counting it in the metrics.
async fn judge(
    gates: &Gates,
    caller: &Caller,
    shape: kiln_guard::PromptShape,
    body: Option<&serde_json::Value>,
) -> Judged {
    let Some(fw) = gates.firewall.as_ref() else {
        return Judged::Unscored;
    };
    let policy = fw.policy(&caller.key_id).clone();
    let Some(texts) = body.and_then(|v| prompt_texts(shape, v, policy.turns)) else {
        return Judged::Unscored;
    };
    let started = Instant::now();
    let verdict = match fw.score(caller, &texts).await {
        Ok(v) => Verdict::merge(v),
        Err(e) if policy.mode == Mode::Block => {
            // Fail closed: a prompt that can't be scored isn't let through.
            return Judged::Refused(ApiError::from(HostError::ModelUnavailable {
                model: "prompt firewall".into(),
                reason: e.to_string(),
            }));
        }
        Err(e) => {
            tracing::warn!(error = %e, "firewall: not scored");
            return Judged::Unscored;
        }
    };
    let metrics = &gates.firewall_metrics;
    metrics.latency.observe(started.elapsed());
    if let Some(s) = verdict.injection_score {
        metrics.scores.observe_value(f64::from(s));
    }
    let blocked = policy.decide(&verdict);
    tracing::info!(
        injection_score = verdict.injection_score,
        pii = %verdict.pii_header(),
        blocked = blocked.as_ref().map(BlockReason::label),
        ms = started.elapsed().as_millis() as u64,
        "firewall"
    );
    let blocked = blocked.map(|reason| {
        match reason {
            BlockReason::Injection { .. } => metrics.blocked_injection.add(1),
            BlockReason::Pii { .. } => metrics.blocked_pii.add(1),
        }
        ApiError::PromptBlocked(policy.message.clone())
    });
    Judged::Scored { verdict, blocked }
}

fn set_headers(h: &mut HeaderMap, v: &Verdict) {
    if let Some(s) = v.injection_score {
        h.insert(SCORE_HEADER, HeaderValue::from(u16::from(s)));
    }
    if let Ok(pii) = HeaderValue::from_str(&v.pii_header()) {
        h.insert(PII_HEADER, pii);
    }
}
