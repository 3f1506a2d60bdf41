//! Server-sent events passed through as they arrive, whole events at a time, and never
//! silently cut: if the node's stream breaks (connection lost, idle timeout) or ends
//! without its `data: [DONE]`, the client gets an error event in OpenAI's shape,
//! `data: {"error": {...}}`, then `data: [DONE]`, as a node reports its own mid-stream
//! failures.
//!
//! Only a partial event is ever held back (until its blank line arrives), so a client
//! never sees half a JSON chunk followed by the error.

use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use kiln_api::ErrorResponse;

use crate::metrics::NodeMetrics;
use crate::nodes::{InFlight, Node};

/// Bookkeeping that ends with the stream (or with the client going away).
pub struct Finish {
    pub metrics: std::sync::Arc<NodeMetrics>,
    /// The node, so a broken stream ejects it (none for the upstream).
    pub node: Option<std::sync::Arc<Node>>,
    pub eject: (std::time::Duration, std::time::Duration),
    pub received: Instant,
    pub _in_flight: Option<InFlight>,
    /// The client got the response (only then does its duration count).
    pub committed: bool,
}

impl Drop for Finish {
    fn drop(&mut self) {
        if self.committed {
            self.metrics.duration.observe(self.received.elapsed());
        }
    }
}

struct Relay<S> {
    inner: S,
    source: String,
    carry: Vec<u8>,
    saw_done: bool,
    ended: bool,
    finish: Finish,
}

/// The client's body: `first` (already read, the commit point), then the rest of
/// `inner` from node `source`.
pub fn relay<S>(
    first: Bytes,
    inner: S,
    source: String,
    finish: Finish,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send
where
    S: Stream<Item = reqwest::Result<Bytes>> + Send + Unpin + 'static,
{
    let mut state = Relay {
        inner,
        source,
        carry: Vec::new(),
        saw_done: false,
        ended: false,
        finish,
    };
    let head = state.push(&first);
    let head = stream::iter(head.map(Ok));
    let tail = stream::unfold(state, |mut st| async move {
        loop {
            if st.ended {
                return None;
            }
            match st.inner.next().await {
                Some(Ok(chunk)) => {
                    if let Some(out) = st.push(&chunk) {
                        return Some((Ok(out), st));
                    }
                }
                Some(Err(e)) => {
                    let why = format!("the connection broke: {}", crate::proxy::describe(&e));
                    return Some((Ok(st.fail(&why)), st));
                }
                None if st.saw_done => {
                    st.ended = true;
                    // Trailing bytes after [DONE] that never finished an event.
                    return (!st.carry.is_empty())
                        .then(|| (Ok(Bytes::from(std::mem::take(&mut st.carry))), st));
                }
                None => {
                    let out = st.fail("it closed the stream before the response finished");
                    return Some((Ok(out), st));
                }
            }
        }
    });
    head.chain(tail)
}

impl<S> Relay<S> {
    /// Adds `chunk`; returns the complete events now ready, if any.
    fn push(&mut self, chunk: &[u8]) -> Option<Bytes> {
        self.carry.extend_from_slice(chunk);
        let n = complete_len(&self.carry);
        if n == 0 {
            return None;
        }
        let ready: Vec<u8> = self.carry.drain(..n).collect();
        if has_done(&ready) {
            self.saw_done = true;
        }
        Some(Bytes::from(ready))
    }

    /// Ends the stream with an error event (dropping any partial event).
    fn fail(&mut self, why: &str) -> Bytes {
        self.ended = true;
        self.carry.clear();
        self.finish.metrics.stream_errors.inc();
        let message = format!(
            "node {} failed mid-stream ({why}); the response above is incomplete",
            self.source
        );
        if let Some(node) = &self.finish.node {
            let (base, max) = self.finish.eject;
            node.record_failure(Instant::now(), base, max, &message);
        }
        let body = ErrorResponse::new(
            message,
            "server_error",
            None,
            Some("stream_interrupted".into()),
        );
        let json = serde_json::to_string(&body).unwrap_or_else(|_| "{}".into());
        Bytes::from(format!("data: {json}\n\ndata: [DONE]\n\n"))
    }
}

/// Length of the prefix of `buf` made of whole events (each ended by a blank line,
/// `\n\n` or `\r\n\r\n`).
fn complete_len(buf: &[u8]) -> usize {
    let mut end = 0;
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            match (buf.get(i + 1), buf.get(i + 2)) {
                (Some(b'\n'), _) => {
                    end = i + 2;
                    i += 2;
                    continue;
                }
                (Some(b'\r'), Some(b'\n')) => {
                    end = i + 3;
                    i += 3;
                    continue;
                }
                _ => {}
            }
        }
        i += 1;
    }
    end
}

/// Whether `events` hold a `data: [DONE]` line.
fn has_done(events: &[u8]) -> bool {
    events
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .any(|line| line == b"data: [DONE]" || line == b"data:[DONE]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn finish(metrics: &Arc<NodeMetrics>) -> Finish {
        Finish {
            metrics: metrics.clone(),
            node: None,
            eject: (Duration::from_secs(1), Duration::from_secs(1)),
            received: Instant::now(),
            _in_flight: None,
            committed: true,
        }
    }

    async fn run(first: &str, rest: Vec<reqwest::Result<Bytes>>) -> (Vec<String>, u64) {
        let metrics = Arc::new(NodeMetrics::default());
        let body = relay(
            Bytes::from(first.to_string()),
            stream::iter(rest),
            "n1".into(),
            finish(&metrics),
        );
        let parts: Vec<String> = body
            .map(|r| match r {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(never) => match never {},
            })
            .collect()
            .await;
        (parts, metrics.stream_errors.get())
    }

    fn ok(s: &str) -> reqwest::Result<Bytes> {
        Ok(Bytes::from(s.to_string()))
    }

    #[tokio::test]
    async fn whole_events_pass_through_as_they_complete() {
        let (parts, errors) = run(
            "data: {\"a\":1}\n\ndata: {\"b\"",
            vec![ok(":2}\n\n"), ok("data: [DONE]\n\n")],
        )
        .await;
        assert_eq!(
            parts,
            [
                "data: {\"a\":1}\n\n",
                "data: {\"b\":2}\n\n",
                "data: [DONE]\n\n"
            ]
        );
        assert_eq!(errors, 0);
    }

    #[tokio::test]
    async fn a_stream_cut_short_ends_with_an_error_event_not_half_a_chunk() {
        let (parts, errors) = run("data: {\"a\":1}\n\ndata: {\"tru", vec![]).await;
        assert_eq!(parts[0], "data: {\"a\":1}\n\n");
        let last = &parts[1];
        assert!(last.ends_with("data: [DONE]\n\n"), "{last}");
        let json = last
            .strip_prefix("data: ")
            .and_then(|s| s.split("\n\n").next())
            .expect("event");
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        assert_eq!(v["error"]["code"], "stream_interrupted");
        assert_eq!(v["error"]["type"], "server_error");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("n1")));
        assert_eq!(errors, 1);
    }

    #[test]
    fn event_boundaries_and_done() {
        assert_eq!(complete_len(b"data: x\n\ndata: y"), 9);
        assert_eq!(complete_len(b"data: x\r\n\r\nda"), 11);
        assert_eq!(complete_len(b"data: x\n"), 0);
        assert!(has_done(b"data: 1\n\ndata: [DONE]\r\n\r\n"));
        assert!(!has_done(b"data: \"[DONE]\"\n\n"));
    }
}
