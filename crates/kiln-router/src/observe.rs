//! One inference event per request routed by model: what the response's headers say
//! (the node, its colo, a cold start, neurons, a classifier's confidence), what the
//! proxy noted (a fallback, why, from where, what it added), the routing rule that
//! decided it and the tier that answered, and what the body says (tokens, an error;
//! a stream's neurons, in the comment the node ends it with). A response read whole is
//! recorded at once; a stream when its body ends or the client leaves.

use std::time::Instant;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use kiln_api::observe::{
    COLD_START_HEADER, COLO_HEADER, CONFIDENCE_HEADER, NEURONS_COMMENT, NEURONS_HEADER,
};
use kiln_observe::labels::clean;
use kiln_observe::observer::now_ms;
use kiln_observe::{Event, FallbackInfo, Observer};
use serde::Deserialize;
use serde_json::Value;

use crate::fallback::{Fallback, RouteNote};
use crate::placement::Resolved;
use crate::proxy::{Inbound, NODE_HEADER};
use crate::state::RouterState;

/// Bodies read for their usage at most this large (larger ones are recorded without).
const MAX_PARSED: usize = 1 << 20;

/// The request's side of an event, taken before it is routed.
pub struct Meta {
    received: Instant,
    time_ms: u64,
    model: String,
    task: &'static str,
    /// The routing rule that decided the route, if one matched.
    rule: Option<String>,
}

impl Meta {
    /// `None` for requests that run no inference (`/tokenize`, `/detokenize`).
    pub fn of(state: &RouterState, req: &Inbound) -> Option<Meta> {
        let path = req.path.split('?').next().unwrap_or_default();
        let task = match path {
            "/v1/chat/completions" => "chat",
            "/v1/completions" => "completions",
            "/v1/embeddings" => "embeddings",
            p if p.starts_with("/ai/run/") => "ai-run",
            _ => return None,
        };
        let model = match state.placement().resolve(req.model.as_deref()) {
            Resolved::Known(m) => m,
            Resolved::Unknown(name) => name,
            Resolved::NoDefault => "(default)".into(),
        };
        // Spent before the request reached here (reading its body) counts too.
        let time_ms = now_ms().saturating_sub(req.received.elapsed().as_millis() as u64);
        Some(Meta {
            received: req.received,
            time_ms,
            model,
            task,
            rule: None,
        })
    }

    /// The same, decided by routing rule `rule`.
    pub fn with_rule(self, rule: Option<String>) -> Meta {
        Meta { rule, ..self }
    }
}

/// The event's reason for a fallback, in the words.
pub fn reason(f: Fallback) -> &'static str {
    match f {
        Fallback::UnknownModel => "model_absent",
        Fallback::ContextLength => "context_length",
        Fallback::Overloaded => "overloaded",
        Fallback::Unavailable => "node_down",
        Fallback::LowConfidence => "low_confidence",
        Fallback::Rule => "rule",
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Records `resp`'s event (now, or when its stream ends) and returns it.
pub async fn track(state: &RouterState, meta: Meta, resp: Response) -> Response {
    let h = resp.headers();
    let node = header(h, NODE_HEADER).unwrap_or("router").to_string();
    let colo = match header(h, COLO_HEADER) {
        Some(c) => clean(c),
        None if node == "router" || node == "upstream" => node.clone(),
        None => state
            .placement()
            .nodes
            .iter()
            .find(|n| n.id == node)
            .map_or_else(|| "unknown".into(), |n| n.colo.clone()),
    };
    let confidence = header(h, CONFIDENCE_HEADER)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|c| c.is_finite());
    let task = match (meta.task, confidence) {
        ("ai-run", Some(_)) => "text-classification",
        (t, _) => t,
    };
    let note = resp.extensions().get::<RouteNote>().cloned();
    // The router's own answers (no node, shutting down) ran on neither tier.
    let tier = match node.as_str() {
        "router" => None,
        "upstream" => Some("central".to_string()),
        _ => Some("edge".to_string()),
    };
    let event = Event {
        time_ms: meta.time_ms,
        colo,
        node,
        model: meta.model,
        task: task.into(),
        status: resp.status().as_u16(),
        cold_start_ms: header(h, COLD_START_HEADER).and_then(|v| v.parse().ok()),
        neurons: header(h, NEURONS_HEADER)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0),
        confidence,
        wasted_neurons: note.as_ref().map_or(0.0, |n| n.wasted_neurons),
        fallback: note.map(|n| FallbackInfo {
            reason: reason(n.fallback).into(),
            from: n.from,
            added_ms: n.added.as_secs_f64() * 1000.0,
        }),
        rule: meta.rule,
        tier,
        ..Event::default()
    };
    let observer = state.observer().clone();
    let stream = kiln_http::is_event_stream(h);
    let mut pending = Pending {
        event: Some(event),
        received: meta.received,
        observer,
    };
    let (parts, body) = resp.into_parts();
    if stream {
        if let Some(e) = pending.event.as_mut() {
            e.ttft_ms = Some(ms(meta.received));
        }
        let body = body.into_data_stream().map(move |chunk| {
            chunk.map(|b| match pending.see_chunk(&b) {
                // The node's neurons comment is the router's: the client gets
                // OpenAI's stream as it is.
                Some(cut) => b.slice(..cut),
                None => b,
            })
        });
        return Response::from_parts(parts, Body::from_stream(body));
    }
    // A body read whole by the proxy: collecting it again costs no wait.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            pending.set_error(format!("body: {e}"));
            Bytes::new()
        }
    };
    pending.see_body(&bytes, parts.status.as_u16());
    drop(pending);
    Response::from_parts(parts, Body::from(bytes))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// An event waiting for its end; recorded when dropped.
struct Pending {
    event: Option<Event>,
    received: Instant,
    observer: std::sync::Arc<Observer>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// The fields of an OpenAI or Workers AI body that the event needs.
#[derive(Deserialize)]
struct Peek {
    usage: Option<Usage>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Pending {
    fn set_error(&mut self, why: String) {
        if let Some(e) = self.event.as_mut() {
            e.error.get_or_insert(why);
        }
    }

    fn see_body(&mut self, body: &[u8], status: u16) {
        let peek = (body.len() <= MAX_PARSED)
            .then(|| serde_json::from_slice::<Peek>(body).ok())
            .flatten();
        let Some(e) = self.event.as_mut() else { return };
        if let Some(p) = &peek {
            let usage = p.usage.as_ref().or(None);
            let from_result = p
                .result
                .as_ref()
                .and_then(|r| r.get("usage"))
                .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
            if let Some(u) = usage.or(from_result.as_ref()) {
                e.tokens_in = u.prompt_tokens;
                e.tokens_out = u.completion_tokens;
            }
        }
        if status >= 400 {
            let code = peek
                .as_ref()
                .and_then(|p| p.error.as_ref())
                .and_then(|v| v.get("code").or(v.get("type")))
                .and_then(Value::as_str)
                .map(str::to_string);
            e.error = Some(code.unwrap_or_else(|| format!("http_{status}")));
        }
    }

    /// A stream's chunk: its usage (the last chunk with `include_usage`) and errors;
    /// and the node's neurons comment after its last event, whose offset is returned
    /// so the comment is cut from what the client gets.
    fn see_chunk(&mut self, chunk: &Bytes) -> Option<usize> {
        let find = |needle: &[u8]| chunk.windows(needle.len()).position(|w| w == needle);
        let comment = find(NEURONS_COMMENT.as_bytes());
        if let (Some(at), Some(e)) = (comment, self.event.as_mut()) {
            let text = &chunk[at + NEURONS_COMMENT.len()..];
            let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
            let n = std::str::from_utf8(&text[..end])
                .ok()
                .and_then(|t| t.trim().parse().ok());
            e.neurons = n.filter(|n: &f64| n.is_finite() && *n >= 0.0).or(e.neurons);
        }
        if find(b"\"usage\"").is_none() && find(b"\"error\"").is_none() {
            return comment;
        }
        let Some(e) = self.event.as_mut() else {
            return comment;
        };
        for line in chunk.split(|&b| b == b'\n') {
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                continue;
            };
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                if let Ok(u) = serde_json::from_value::<Usage>(u.clone()) {
                    e.tokens_in = u.prompt_tokens;
                    e.tokens_out = u.completion_tokens;
                }
            }
            if let Some(err) = v.get("error") {
                let code = err.get("code").or(err.get("type")).and_then(Value::as_str);
                e.error = Some(code.unwrap_or("stream_error").to_string());
            }
        }
        comment
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut e) = self.event.take() {
            e.latency_ms = ms(self.received);
            self.observer.record(e);
        }
    }
}
