//! Forwarding one API request: try the planned nodes in order, retrying on the next
//! one whatever fails before the first response byte (bounded by `max_attempts`);
//! rest nodes that answer 429; send to the upstream what no node can serve; stream SSE
//! straight through ([`crate::sse`]).
//!
//! The commit point is the first byte: a stream is passed on once its first chunk has
//! arrived, so a node dying before that costs the client nothing but time. Responses
//! that are not streams are read whole first (they are small), so they are retried too
//! if the node dies while sending them.

use kiln_http::TransportError;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use kiln_api::observe::STREAM_NEURONS_HEADER;
use kiln_http::is_event_stream;
use serde_json::Value;

use crate::error::ApiError;
use crate::fallback::{Fallback, RouteNote};
use crate::metrics::NodeMetrics;
use crate::nodes::Node;
use crate::placement::Resolved;
use crate::select;
use crate::sse::{self, Finish};
use crate::state::RouterState;

/// The response header naming the node (or `upstream`) that answered.
pub const NODE_HEADER: &str = "x-kiln-node";
/// The nodes' header saying whether the model was already loaded.
pub const WARM_HEADER: &str = "x-kiln-warm";
/// Largest response read whole (non-stream bodies; errors are far smaller).
const MAX_BUFFERED: usize = 64 << 20;
/// A 429 without `Retry-After` rests the node this long.
const DEFAULT_REST: Duration = Duration::from_secs(1);

/// A client request, read once and replayable on several nodes.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub method: Method,
    /// Path and query, as received.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The `model` the request names (body field or path), if any.
    pub model: Option<String>,
    /// The session key (`x-session-affinity` or `user`).
    pub session: Option<String>,
    pub received: Instant,
}

/// A response read whole.
pub(crate) struct Buffered {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Buffered {
    fn error_code(&self) -> Option<String> {
        let v: Value = serde_json::from_slice(&self.body).ok()?;
        v.get("error")?.get("code")?.as_str().map(str::to_string)
    }

    fn into_response(self, source: &str) -> Response {
        respond(self.status, &self.headers, Body::from(self.body), source)
    }
}

/// How one attempt on one node went.
pub(crate) enum Attempt {
    Served(Response),
    /// Before the first byte: try the next node.
    Failed {
        why: String,
        response: Option<Buffered>,
    },
    /// 429: the node is full; rest it.
    Busy(Buffered),
    /// 400 `context_length_exceeded`.
    ContextLength(Buffered),
    /// 404 `model_not_found`: the node's catalogue changed since the last check.
    NotServed(Buffered),
}

/// Routes `req` to a node (or the upstream) and returns the response.
pub async fn route(state: &RouterState, req: Inbound) -> Response {
    if state.is_shutting_down() {
        return TransportError::ShuttingDown.into_response();
    }
    let placement = state.placement();
    let model = match placement.resolve(req.model.as_deref()) {
        Resolved::Known(m) => m,
        Resolved::Unknown(name) if !placement.models.is_empty() => {
            let err = ApiError::ModelNotFound {
                model: name,
                served: placement.served(),
            };
            return fallback_or(state, &req, Fallback::UnknownModel, None, || {
                err.into_response()
            })
            .await;
        }
        // No node has answered yet: nothing is known, not even the default.
        Resolved::Unknown(_) | Resolved::NoDefault => {
            let err = ApiError::NoNode {
                model: req.model.clone().unwrap_or_else(|| "(default)".into()),
                detail: "no node has reported its models yet".into(),
            };
            return fallback_or(state, &req, Fallback::Unavailable, None, || {
                err.into_response()
            })
            .await;
        }
    };
    let plan = select::plan(&placement, &model, req.session.as_deref(), Instant::now());
    if plan.preferred.is_some() {
        state.metrics().affinity_requests.inc();
    }
    let config = state.config();
    // The colo a fallback left from: the first node tried, or, none being usable, the
    // shard's first (where the model lives at the edge).
    let from = plan.candidates.first().map(|n| n.colo.clone()).or_else(|| {
        let first = placement.models.get(&model)?.shard.first()?;
        Some(placement.nodes.get(*first)?.colo.clone())
    });
    let from = from.as_deref();
    let mut failures: Vec<String> = Vec::new();
    // The last answer of each kind, to pass on if nothing better comes.
    let mut last_failed: Option<(Buffered, &Node)> = None;
    let mut last_busy: Option<(Buffered, &Node)> = None;
    let mut last_not_served: Option<(Buffered, &Node)> = None;
    for (i, node) in plan.candidates.iter().enumerate().take(config.max_attempts) {
        // Overload stays in the shard: nodes beyond it would load the model cold.
        if i >= plan.shard_len && last_busy.is_some() {
            break;
        }
        match attempt(state, node, &req).await {
            Attempt::Served(resp) => {
                if plan.preferred.as_deref() == Some(node.id.as_str()) {
                    state.metrics().affinity_hits.inc();
                }
                return resp;
            }
            Attempt::Failed { why, response } => {
                node.metrics.retries.inc();
                node.record_failure(Instant::now(), config.eject_base, config.eject_max, &why);
                failures.push(format!("{}: {why}", node.id));
                if let Some(r) = response {
                    last_failed = Some((r, node));
                }
            }
            Attempt::Busy(r) => {
                node.record_overload(Instant::now(), retry_after(&r.headers));
                last_busy = Some((r, node));
            }
            Attempt::ContextLength(r) => {
                return fallback_or(state, &req, Fallback::ContextLength, from, || {
                    served(state, node, r)
                })
                .await;
            }
            Attempt::NotServed(r) => last_not_served = Some((r, node)),
        }
    }
    if plan.overloaded || last_busy.is_some() {
        let resp = || match last_busy {
            Some((r, node)) => served(state, node, r),
            None => ApiError::AllBusy { model }.into_response(),
        };
        return fallback_or(state, &req, Fallback::Overloaded, from, resp).await;
    }
    let resp = || match (last_failed, last_not_served) {
        (Some((r, node)), _) | (None, Some((r, node))) => served(state, node, r),
        (None, None) => ApiError::NoNode {
            detail: if failures.is_empty() {
                "no healthy node serves it".into()
            } else {
                failures.join("; ")
            },
            model,
        }
        .into_response(),
    };
    fallback_or(state, &req, Fallback::Unavailable, from, resp).await
}

/// Sends `req` to the upstream because routing rule `rule` says so, without trying a
/// node. Tables with a `central` rule are refused without an upstream, so one is there.
pub async fn by_rule(state: &RouterState, req: &Inbound, rule: &str) -> Response {
    if state.is_shutting_down() {
        return TransportError::ShuttingDown.into_response();
    }
    tracing::debug!(rule, path = %req.path, "routed central by rule");
    let err = || ApiError::NoNode {
        model: req.model.clone().unwrap_or_else(|| "(default)".into()),
        detail: format!("rule `{rule}` routes it central, but there is no upstream"),
    };
    fallback_or(state, req, Fallback::Rule, None, || err().into_response()).await
}

/// A node's response that goes back to the client: count it.
pub(crate) fn served(state: &RouterState, node: &Node, r: Buffered) -> Response {
    count_served(state, node);
    r.into_response(&node.id)
}

fn count_served(state: &RouterState, node: &Node) {
    node.metrics.requests.inc();
    state.metrics().colo_request(&node.colo);
}

/// Sends `req` to the upstream if there is one, else returns `otherwise()`.
async fn fallback_or(
    state: &RouterState,
    req: &Inbound,
    why: Fallback,
    from: Option<&str>,
    otherwise: impl FnOnce() -> Response,
) -> Response {
    let Some(upstream) = &state.config().upstream else {
        return otherwise();
    };
    let note = RouteNote {
        fallback: why,
        from: from.map(str::to_string),
        added: req.received.elapsed(),
        wasted_neurons: 0.0,
    };
    let mut resp = to_upstream(state, req, why, upstream).await;
    resp.extensions_mut().insert(note);
    resp
}

/// Re-runs `req`, answered at the edge by `edge` under the confidence threshold, on the
/// upstream; the edge's neurons are wasted. `None` without an upstream.
pub async fn escalate(
    state: &RouterState,
    req: &Inbound,
    edge_colo: Option<&str>,
    wasted: f64,
) -> Option<Response> {
    let upstream = state.config().upstream.as_ref()?;
    let note = RouteNote {
        fallback: Fallback::LowConfidence,
        from: edge_colo.map(str::to_string),
        added: req.received.elapsed(),
        wasted_neurons: wasted,
    };
    let mut resp = to_upstream(state, req, Fallback::LowConfidence, upstream).await;
    resp.extensions_mut().insert(note);
    Some(resp)
}

async fn to_upstream(
    state: &RouterState,
    req: &Inbound,
    why: Fallback,
    upstream: &crate::config::Upstream,
) -> Response {
    state.metrics().fallback(why.as_str());
    tracing::debug!(reason = why.as_str(), path = %req.path, "to the upstream");
    let metrics = state.metrics().node("upstream");
    let url = upstream.url_for(&req.path);
    let auth = upstream.api_key.as_deref();
    let sent = Instant::now();
    let resp = match request(state, &url, req, auth).send().await {
        Ok(r) => r,
        Err(e) => return ApiError::Upstream(describe(&e)).into_response(),
    };
    let finish = Finish {
        metrics: metrics.clone(),
        node: None,
        eject: (state.config().eject_base, state.config().eject_max),
        received: req.received,
        _in_flight: None,
        committed: false,
    };
    match commit(resp, sent, &metrics, "upstream", finish).await {
        Ok(resp) => {
            metrics.requests.inc();
            state.metrics().colo_request("upstream");
            resp
        }
        Err(why) => ApiError::Upstream(why).into_response(),
    }
}

/// One try on one node.
pub(crate) async fn attempt(
    state: &RouterState,
    node: &std::sync::Arc<Node>,
    req: &Inbound,
) -> Attempt {
    let in_flight = node.begin();
    let url = format!("{}{}", node.spec.url, req.path);
    let auth = state.config().node_api_key.as_deref();
    let sent = Instant::now();
    let resp = match request(state, &url, req, auth).send().await {
        Ok(r) => r,
        Err(e) => {
            return Attempt::Failed {
                why: describe(&e),
                response: None,
            }
        }
    };
    let status = resp.status();
    if status.is_success() {
        let finish = Finish {
            metrics: node.metrics.clone(),
            node: Some(node.clone()),
            eject: (state.config().eject_base, state.config().eject_max),
            received: req.received,
            _in_flight: Some(in_flight),
            committed: false,
        };
        let warm = resp
            .headers()
            .get(WARM_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.eq_ignore_ascii_case("true"));
        return match commit(resp, sent, &node.metrics, &node.id, finish).await {
            Ok(resp) => {
                node.record_success();
                count_served(state, node);
                match warm {
                    Some(true) => node.metrics.warm.inc(),
                    Some(false) => node.metrics.cold.inc(),
                    None => {}
                }
                Attempt::Served(resp)
            }
            Err(why) => Attempt::Failed {
                why,
                response: None,
            },
        };
    }
    let headers = resp.headers().clone();
    let body = match read_whole(resp, MAX_BUFFERED).await {
        Ok(b) => b,
        Err(why) => {
            return Attempt::Failed {
                why: format!("HTTP {status}, then {why}"),
                response: None,
            }
        }
    };
    let r = Buffered {
        status,
        headers,
        body,
    };
    match (status, r.error_code().as_deref()) {
        (StatusCode::TOO_MANY_REQUESTS, _) => Attempt::Busy(r),
        (StatusCode::BAD_REQUEST, Some("context_length_exceeded")) => {
            node.record_success();
            Attempt::ContextLength(r)
        }
        (StatusCode::NOT_FOUND, Some("model_not_found")) => Attempt::NotServed(r),
        (s, _) if s.is_server_error() => Attempt::Failed {
            why: format!("HTTP {s}: {}", error_message(&r.body)),
            response: Some(r),
        },
        _ => {
            // The client's own mistake, answered by a live node: pass it on.
            node.record_success();
            Attempt::Served(served(state, node, r))
        }
    }
}

/// A 2xx response from `source`: streams are passed on from their first chunk, other
/// bodies are read whole. `Err` means it failed before the client saw anything.
async fn commit(
    resp: reqwest::Response,
    sent: Instant,
    metrics: &NodeMetrics,
    source: &str,
    mut finish: Finish,
) -> Result<Response, String> {
    let status = resp.status();
    let headers = resp.headers().clone();
    if !is_event_stream(&headers) {
        metrics.first_byte.observe(sent.elapsed());
        let body = read_whole(resp, MAX_BUFFERED).await?;
        finish.committed = true;
        return Ok(respond(status, &headers, Body::from(body), source));
    }
    let mut body = resp.bytes_stream();
    let first = loop {
        match body.next().await {
            Some(Ok(b)) if b.is_empty() => continue,
            Some(Ok(b)) => break b,
            Some(Err(e)) => return Err(describe(&e)),
            None => return Err("it closed the stream before its first byte".into()),
        }
    };
    metrics.first_byte.observe(sent.elapsed());
    finish.committed = true;
    let stream = sse::relay(first, body, source.to_string(), finish);
    Ok(respond(status, &headers, Body::from_stream(stream), source))
}

/// The outgoing request: the client's method, headers (less hop-by-hop ones and
/// compression, so events can be cut at their boundaries) and body.
fn request(
    state: &RouterState,
    url: &str,
    req: &Inbound,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for (name, value) in &req.headers {
        if !is_hop_by_hop(name)
            && name != header::HOST
            && name != header::CONTENT_LENGTH
            && name != header::ACCEPT_ENCODING
            && name != header::EXPECT
            && !(key.is_some() && name == header::AUTHORIZATION)
        {
            headers.append(name.clone(), value.clone());
        }
    }
    // A stream's neurons, in a comment after its last event (`observe.rs` drops it).
    headers.insert(STREAM_NEURONS_HEADER, HeaderValue::from_static("1"));
    let mut builder = state
        .client()
        .request(req.method.clone(), url)
        .headers(headers)
        .body(req.body.clone());
    if let Some(key) = key {
        builder = builder.bearer_auth(key);
    }
    builder
}

/// The client's response: `source`'s status and headers (less hop-by-hop ones), with
/// the answering node named.
fn respond(status: StatusCode, headers: &HeaderMap, body: Body, source: &str) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let out = resp.headers_mut();
    for (name, value) in headers {
        if !is_hop_by_hop(name) && name != header::CONTENT_LENGTH {
            out.append(name.clone(), value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(source) {
        out.insert(NODE_HEADER, v);
    }
    resp
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

async fn read_whole(resp: reqwest::Response, limit: usize) -> Result<Bytes, String> {
    let mut body = resp.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("the body broke: {}", describe(&e)))?;
        if out.len() + chunk.len() > limit {
            return Err(format!("the body is over {limit} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

/// The `Retry-After` of a 429, in seconds, within reason.
fn retry_after(headers: &HeaderMap) -> Duration {
    headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_REST, |s| Duration::from_secs_f64(s.min(30.0)))
}

fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error")?.get("message")?.as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}

/// A reqwest error in a few words, with its cause chain (which says "connection
/// refused" where reqwest's own message only says "error sending request").
pub fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_and_bounded() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), DEFAULT_REST);
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Duration::from_secs(3));
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("9999"));
        assert_eq!(retry_after(&h), Duration::from_secs(30));
    }

    #[test]
    fn responses_keep_end_to_end_headers_and_name_the_node() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        h.insert(WARM_HEADER, HeaderValue::from_static("true"));
        let r = respond(StatusCode::OK, &h, Body::empty(), "n1");
        assert!(is_event_stream(r.headers()));
        assert!(!r.headers().contains_key(header::CONNECTION));
        assert_eq!(r.headers()[WARM_HEADER], "true");
        assert_eq!(r.headers()[NODE_HEADER], "n1");
    }

    #[test]
    fn error_codes_and_messages_come_from_openai_bodies() {
        let r = Buffered {
            status: StatusCode::BAD_REQUEST,
            headers: HeaderMap::new(),
            body: Bytes::from_static(
                br#"{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            ),
        };
        assert_eq!(r.error_code().as_deref(), Some("context_length_exceeded"));
        assert_eq!(error_message(&r.body), "too long");
        assert_eq!(error_message(b"plain"), "plain");
    }
}
