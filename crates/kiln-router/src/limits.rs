//! Requests and tokens per minute per client key, held by the router so the limits hold
//! across every node (`kiln-guard`'s buckets). A request's tokens are counted when it
//! arrives, as OpenAI's limiter counts them: its prompt estimated at four characters a
//! token, plus the most tokens it asks to generate. Over a limit is 429 with
//! `Retry-After`; admitted answers carry `x-ratelimit-*` headers.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kiln_guard::RateStatus;
use kiln_http::TransportError;
use serde_json::Value;

use crate::complexity;
use crate::state::RouterState;

/// The limiter's key of a client: its key's id, or `anonymous` on an open router.
fn client_key(req: &Request) -> String {
    kiln_http::bearer(req.headers())
        .map_or_else(|| kiln_api::ANONYMOUS.to_string(), kiln_api::key_id)
}

/// Tokens a request may use: its whole body at the estimator's bytes a token, plus its
/// output cap (read as the routing rules read it).
pub(crate) fn estimate_tokens(body: &[u8]) -> u64 {
    let cap = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| complexity::max_tokens(&v))
        .unwrap_or(0);
    (body.len() as u64).div_ceil(complexity::BYTES_PER_TOKEN) + cap
}

pub async fn enforce(State(state): State<RouterState>, req: Request, next: Next) -> Response {
    let limiter = state.limiter();
    // The endpoint table says which routes run a model, as it does for the nodes.
    let counted = kiln_api::endpoints::runs_model(req.method().as_str(), req.uri().path());
    if !limiter.any() || !counted {
        return next.run(req).await;
    }
    let key = client_key(&req);
    let status = match limiter.admit(&key) {
        Ok(s) => s,
        Err(l) => {
            let mut resp = TransportError::RateLimited {
                message: l.message(),
                retry_after_secs: l.retry_after_secs(),
            }
            .into_response();
            set_headers(&mut resp, &l.status);
            return resp;
        }
    };
    let (parts, body) = req.into_parts();
    let bytes = match crate::app::read_body(&state, &parts, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    limiter.consume_tokens(&key, estimate_tokens(&bytes));
    let req = Request::from_parts(parts, axum::body::Body::from(bytes));
    let mut resp = next.run(req).await;
    set_headers(&mut resp, &status);
    resp
}

fn set_headers(resp: &mut Response, s: &RateStatus) {
    for (name, value) in s.headers() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_estimated_from_the_text_and_the_cap() {
        let body = br#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":100}"#;
        assert_eq!(estimate_tokens(body), (body.len() as u64).div_ceil(4) + 100);
        assert_eq!(estimate_tokens(b"not json"), 2);
    }
}
