//! One streamed request over HTTP/1.1, timed chunk by chunk.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sse::{SseEvent, SseReader};
use crate::wire::StreamChunk;

/// Bytes of an error response's body kept in the record.
const ERROR_BODY_LIMIT: usize = 2048;

/// A pooled HTTP client for one server.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    api_key: Option<String>,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Connecting or sending failed, or the connection broke mid-stream.
    Transport,
    /// The server answered with a non-2xx status.
    Status,
    /// The stream carried an `error` object or an unparsable chunk.
    StreamError,
    /// The stream ended without `data: [DONE]`.
    NoDone,
    /// The request took longer than the configured timeout.
    Timeout,
}

/// What one request measured. Times are in milliseconds; `sent_at_ms` counts from the
/// run's release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position in the workload.
    pub index: usize,
    pub prompt_tokens: usize,
    pub target_output_tokens: usize,
    pub sent_at_ms: f64,
    /// Time to the first chunk carrying generated text.
    pub ttft_ms: Option<f64>,
    /// Gaps between successive content chunks (one per chunk after the first).
    pub itl_ms: Vec<f64>,
    /// Time to the end of the stream.
    pub e2e_ms: f64,
    /// Chunks that carried generated text.
    pub content_chunks: usize,
    /// `usage.prompt_tokens` reported by the server (its chat template included).
    pub usage_prompt_tokens: Option<u64>,
    /// `usage.completion_tokens` reported by the server.
    pub usage_completion_tokens: Option<u64>,
    pub failure: Option<FailureKind>,
    /// HTTP status, error body or message, for failures.
    pub error: Option<String>,
}

impl RequestRecord {
    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }

    /// Generated tokens: the server's count, else the number of content chunks.
    pub fn output_tokens(&self) -> u64 {
        self.usage_completion_tokens
            .unwrap_or(self.content_chunks as u64)
    }

    /// Time per output token after the first: `(e2e - ttft) / (tokens - 1)`.
    pub fn tpot_ms(&self) -> Option<f64> {
        let tokens = self.output_tokens();
        let ttft = self.ttft_ms?;
        (tokens > 1).then(|| (self.e2e_ms - ttft) / (tokens - 1) as f64)
    }
}

/// A request ready to send: where it is in the workload and its body.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub index: usize,
    pub prompt_tokens: usize,
    pub target_output_tokens: usize,
    pub body: Bytes,
}

impl HttpClient {
    /// A client for the server at `base_url` (`http://host:port`, optionally ending in
    /// `/v1`). Only plain HTTP is supported: the benchmark targets local servers.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self> {
        let bad = |reason: &str| Error::BaseUrl {
            url: base_url.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = base_url.trim_end_matches('/');
        let uri: Uri = trimmed
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(bad(&format!("scheme {other} is not supported, use http"))),
            None => return Err(bad("missing scheme, e.g. http://127.0.0.1:8080")),
        }
        if uri.host().is_none() {
            return Err(bad("missing host"));
        }
        let base = trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned();
        let mut connector = HttpConnector::new();
        // Latency is the measurement: don't let Nagle hold small writes back.
        connector.set_nodelay(true);
        // A fresh connection per request: servers close kept-alive connections on their
        // own schedule (llama-server's HTTP library after a few requests), and a request
        // sent on a connection the server is closing fails before it starts. Loopback
        // connects cost microseconds, the same for every server measured.
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Ok(HttpClient {
            client,
            base,
            api_key,
        })
    }

    /// The server's address without a trailing `/v1`.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn uri(&self, path: &str) -> Result<Uri> {
        let url = format!("{}{path}", self.base);
        url.parse()
            .map_err(|e: hyper::http::uri::InvalidUri| Error::BaseUrl {
                url,
                reason: e.to_string(),
            })
    }

    /// Whether `GET path` answers with a 2xx status.
    pub async fn answers(&self, path: &str) -> bool {
        let Ok(uri) = self.uri(path) else {
            return false;
        };
        let Ok(req) = Request::get(uri).body(Full::new(Bytes::new())) else {
            return false;
        };
        match self.client.request(req).await {
            Ok(resp) => {
                let ok = resp.status().is_success();
                // Drain so the connection can go back to the pool.
                let _ = resp.into_body().collect().await;
                ok
            }
            Err(_) => false,
        }
    }

    /// Sends `req` to `/v1{path}` and times its stream; `run_start` is the run's release.
    pub async fn send(
        &self,
        path: &str,
        req: &PreparedRequest,
        run_start: Instant,
        timeout: Option<Duration>,
    ) -> RequestRecord {
        let start = Instant::now();
        let mut record = RequestRecord {
            index: req.index,
            prompt_tokens: req.prompt_tokens,
            target_output_tokens: req.target_output_tokens,
            sent_at_ms: ms(start - run_start),
            ttft_ms: None,
            itl_ms: Vec::new(),
            e2e_ms: 0.0,
            content_chunks: 0,
            usage_prompt_tokens: None,
            usage_completion_tokens: None,
            failure: None,
            error: None,
        };
        let outcome = match timeout {
            Some(t) => tokio::time::timeout(t, self.stream(path, req, start, &mut record))
                .await
                .unwrap_or_else(|_| Err((FailureKind::Timeout, format!("no end after {t:?}")))),
            None => self.stream(path, req, start, &mut record).await,
        };
        record.e2e_ms = ms(start.elapsed());
        if let Err((kind, message)) = outcome {
            record.failure = Some(kind);
            record.error = Some(message);
        }
        record
    }

    async fn stream(
        &self,
        path: &str,
        req: &PreparedRequest,
        start: Instant,
        record: &mut RequestRecord,
    ) -> std::result::Result<(), (FailureKind, String)> {
        let transport = |e: &dyn std::fmt::Display| (FailureKind::Transport, e.to_string());
        let uri = self.uri(&format!("/v1{path}")).map_err(|e| transport(&e))?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream");
        if let Some(key) = &self.api_key {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let http_req = builder
            .body(Full::new(req.body.clone()))
            .map_err(|e| transport(&e))?;
        let resp = self.client.request(http_req).await.map_err(|e| {
            // The legacy client's Display is terse; its source says what happened.
            let source = std::error::Error::source(&e).map(|s| format!(": {s}"));
            (
                FailureKind::Transport,
                format!("{e}{}", source.unwrap_or_default()),
            )
        })?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let text = read_prefix(&mut body, ERROR_BODY_LIMIT).await;
            return Err((FailureKind::Status, format!("HTTP {status}: {text}")));
        }
        let mut sse = SseReader::new();
        let mut events = Vec::new();
        let mut last_content: Option<Instant> = None;
        let mut done = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| transport(&e))?;
            let now = Instant::now();
            let Some(data) = frame.data_ref() else {
                continue;
            };
            sse.push(data, &mut events);
            for event in events.drain(..) {
                done |= handle_event(&event, now, start, &mut last_content, record)?;
            }
        }
        if let Some(event) = sse.finish() {
            done |= handle_event(&event, Instant::now(), start, &mut last_content, record)?;
        }
        if done {
            Ok(())
        } else {
            Err((
                FailureKind::NoDone,
                "stream ended without [DONE]".to_owned(),
            ))
        }
    }
}

/// Applies one SSE payload to the record; `Ok(true)` for `[DONE]`.
fn handle_event(
    event: &SseEvent,
    now: Instant,
    start: Instant,
    last_content: &mut Option<Instant>,
    record: &mut RequestRecord,
) -> std::result::Result<bool, (FailureKind, String)> {
    let event = match event {
        SseEvent::Data(data) => data.trim(),
        SseEvent::Error(error) => {
            return Err((
                FailureKind::StreamError,
                format!("error in stream: {error}"),
            ));
        }
    };
    if event == "[DONE]" {
        return Ok(true);
    }
    let chunk: StreamChunk = serde_json::from_str(event).map_err(|e| {
        let shown: String = event.chars().take(200).collect();
        (
            FailureKind::StreamError,
            format!("unparsable chunk ({e}): {shown}"),
        )
    })?;
    if let Some(err) = chunk.error {
        return Err((FailureKind::StreamError, format!("error in stream: {err}")));
    }
    if let Some(usage) = chunk.usage {
        record.usage_prompt_tokens = usage.prompt_tokens.or(record.usage_prompt_tokens);
        record.usage_completion_tokens = usage.completion_tokens.or(record.usage_completion_tokens);
    }
    if chunk.has_content() {
        match *last_content {
            None => record.ttft_ms = Some(ms(now - start)),
            Some(prev) => record.itl_ms.push(ms(now - prev)),
        }
        *last_content = Some(now);
        record.content_chunks += 1;
    }
    Ok(false)
}

async fn read_prefix(body: &mut Incoming, limit: usize) -> String {
    let mut buf = Vec::new();
    while buf.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    buf.extend_from_slice(d);
                }
            }
            _ => break,
        }
    }
    buf.truncate(limit);
    String::from_utf8_lossy(&buf).trim().to_owned()
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
