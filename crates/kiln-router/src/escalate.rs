//! Confidence-based escalation: a classification answered at the edge with a top-class
//! confidence under `escalate_below` is re-run on the upstream (central) tier. The
//! answer says which tier gave it (`x-kiln-tier: edge | central`); the event records the
//! fallback (`low_confidence`, from the edge's colo, the edge's latency as added) and
//! the edge's neurons as wasted.

use axum::http::HeaderValue;
use axum::response::Response;
use kiln_api::observe::{COLO_HEADER, CONFIDENCE_HEADER, NEURONS_HEADER};

use crate::proxy::{self, Inbound, NODE_HEADER};
use crate::state::RouterState;

/// The response header naming the tier that answered an escalable classification.
pub const TIER_HEADER: &str = "x-kiln-tier";

fn header_f64(resp: &Response, name: &str) -> Option<f64> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// `resp`, or the upstream's answer if `resp` is an edge classification under the
/// threshold.
pub async fn maybe(state: &RouterState, req: &Inbound, mut resp: Response) -> Response {
    let Some(threshold) = state.config().escalate_below else {
        return resp;
    };
    let Some(confidence) = header_f64(&resp, CONFIDENCE_HEADER) else {
        return resp;
    };
    let from_upstream = resp
        .headers()
        .get(NODE_HEADER)
        .is_some_and(|v| v == "upstream");
    if from_upstream || !resp.status().is_success() || confidence >= threshold {
        let tier = if from_upstream { "central" } else { "edge" };
        resp.headers_mut()
            .insert(TIER_HEADER, HeaderValue::from_static(tier));
        return resp;
    }
    let colo = resp
        .headers()
        .get(COLO_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let wasted = header_f64(&resp, NEURONS_HEADER).unwrap_or(0.0);
    match proxy::escalate(state, req, colo.as_deref(), wasted).await {
        Some(mut central) => {
            central
                .headers_mut()
                .insert(TIER_HEADER, HeaderValue::from_static("central"));
            central
        }
        None => resp,
    }
}
