//! Server-sent events exactly as OpenAI sends them: `data: {json}\n\n` per chunk and a
//! final `data: [DONE]\n\n`.
//!
//! The body stream owns the [`Generation`], so when a client disconnects and hyper
//! drops the body, the engine request is aborted and its KV blocks freed at once. The
//! generation is also dropped as soon as it ends, before `[DONE]` is written, so its
//! admission permit is released as early as possible.

use kiln_http::TransportError;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::{stream, Stream, StreamExt};
use kiln_api::Usage;
use kiln_generate::{ChoiceEvent, CutoffSignal, GenerateError, Generation, TextEvent};
use kiln_http::OpenAiError;
use serde::Serialize;
use tracing::{Instrument, Span};

use crate::lease::api_usage;

/// Turns a generation's events into the endpoint's JSON chunks.
pub trait ChunkFormat: Send + 'static {
    /// Chunks sent before any token (e.g. chat's role chunk).
    fn start(&mut self, out: &mut Vec<String>);
    /// Chunks for one event (empty deltas may produce none).
    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>);
    /// Chunks after the last event (e.g. the usage chunk).
    fn end(&mut self, usage: Usage, out: &mut Vec<String>);
}

/// JSON text of a chunk; serializing plain data structures can't fail, but if it ever
/// did, an error object goes out instead of a panic.
pub fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        let err = TransportError::Internal(format!("cannot serialize a chunk: {e}"));
        serde_json::to_string(&err.body()).unwrap_or_default()
    })
}

struct SseState<F> {
    gen: Option<Generation>,
    cutoff: CutoffSignal,
    fmt: F,
    pending: VecDeque<String>,
    done: bool,
    span: Span,
}

/// The streamed response for `gen`, formatted by `fmt`; ended with a `server_shutdown`
/// error event if the shutdown deadline passes first.
pub fn sse<F: ChunkFormat>(
    gen: Generation,
    mut fmt: F,
    cutoff: CutoffSignal,
    span: Span,
) -> Response {
    let mut first = Vec::new();
    fmt.start(&mut first);
    let state = SseState {
        gen: Some(gen),
        cutoff,
        fmt,
        pending: first.into(),
        done: false,
        span,
    };
    let body = stream::unfold(state, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(frame(&data)), st));
            }
            if st.done {
                return None;
            }
            let next = match st.gen.as_mut() {
                Some(gen) => tokio::select! {
                    ev = gen.next().instrument(st.span.clone()) => Some(ev),
                    () = st.cutoff.passed() => None,
                },
                None => Some(None),
            };
            let mut out = Vec::new();
            // The shutdown deadline, or the engine failing the choice (a failed step,
            // non-finite logits): say so, then end (dropping the generation aborts it).
            let error = match &next {
                None => Some(GenerateError::ShutdownCut),
                Some(Some(ChoiceEvent {
                    event: TextEvent::Finished { reason, .. },
                    ..
                })) => st
                    .gen
                    .as_ref()
                    .and_then(|g| g.failure(*reason))
                    .map(GenerateError::from),
                Some(_) => None,
            };
            if let Some(err) = error {
                st.gen = None;
                out.push(to_json(&err.body()));
                out.push("[DONE]".into());
                st.done = true;
                st.pending.extend(out);
                continue;
            }
            match next.flatten() {
                Some(ev) => st.fmt.event(ev, &mut out),
                None => {
                    let usage = st
                        .gen
                        .take()
                        .map(|g| api_usage(g.usage()))
                        .unwrap_or_default();
                    st.fmt.end(usage, &mut out);
                    out.push("[DONE]".into());
                    st.done = true;
                    st.span.in_scope(|| tracing::debug!("stream finished"));
                }
            }
            st.pending.extend(out);
        }
    });
    event_stream(Body::from_stream(body))
}

/// How long a stateful event stream (a response's, an agent's) may stay silent before
/// a comment keeps it open: a long MCP call or a quiet agent must not look like a dead
/// connection to a proxy's idle timeout.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// `frames` as an SSE body that sends a `: keep-alive` comment after every
/// [`KEEPALIVE`] without a frame (clients ignore comments).
pub fn with_keepalive(
    frames: impl Stream<Item = Bytes> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    stream::unfold(Box::pin(frames), |mut frames| async move {
        match tokio::time::timeout(KEEPALIVE, frames.next()).await {
            Ok(Some(frame)) => Some((Ok(frame), frames)),
            Ok(None) => None,
            Err(_) => Some((Ok(Bytes::from_static(b": keep-alive\n\n")), frames)),
        }
    })
}

/// `body` as a server-sent event stream.
pub fn event_stream(body: Body) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell reverse proxies (nginx) not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// One named event: `event: <kind>` and `data: <data>` (the Responses API's and the
/// agents' streams; chat's events are unnamed).
pub fn named_event(kind: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

fn frame(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_is_kept_alive_and_ends_with_its_source() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let frames = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        let mut body = Box::pin(with_keepalive(frames));
        tx.send(Bytes::from_static(b"data: 1\n\n"))
            .await
            .expect("send");
        let first = body.next().await.expect("frame").expect("ok");
        assert_eq!(&first[..], b"data: 1\n\n");
        // Nothing for longer than KEEPALIVE: a comment (the clock is paused and jumps).
        let ping = body.next().await.expect("ping").expect("ok");
        assert_eq!(&ping[..], b": keep-alive\n\n");
        drop(tx);
        assert!(body.next().await.is_none());
    }
}
