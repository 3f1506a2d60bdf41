//! A small OpenAI-compatible streaming server for tests and smoke runs: raw HTTP/1.1 over
//! tokio TCP on 127.0.0.1, so that every byte and every delay is under the test's control.
//!
//! Each request streams `max_tokens` tokens (`"tok0 "`, `"tok1 "`, ...): a role-only
//! chunk at once, the first token after `first_token_delay`, one token every
//! `token_delay` after it, an empty finishing chunk, a usage chunk, then `[DONE]`.
//! Markers in the prompt change that: `[fail]` answers 500, `[nodone]` ends the stream
//! without `[DONE]`, `[pairs]` sends two tokens per chunk, `[error-event]` sends an
//! `error` object after the first token, `[error-line]` an `error:` SSE line.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Request heads or bodies larger than this are refused (the fake stays bounded).
const MAX_REQUEST_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy)]
pub struct FakeConfig {
    pub first_token_delay: Duration,
    pub token_delay: Duration,
}

/// What the fake saw.
#[derive(Debug, Default)]
pub struct FakeState {
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub generations: AtomicUsize,
    pub connections: AtomicUsize,
    pub bodies: Mutex<Vec<Vec<u8>>>,
}

/// A running fake; the accept loop stops when it is dropped.
pub struct FakeServer {
    pub base_url: String,
    pub state: Arc<FakeState>,
    accept: JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeServer {
    /// Listens on `127.0.0.1:port` (0 picks a free port).
    pub async fn start(config: FakeConfig, port: u16) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(FakeState::default());
        let st = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                st.connections.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, config, st.clone()));
            }
        });
        Ok(FakeServer {
            base_url: format!("http://{addr}"),
            state,
            accept,
        })
    }
}

struct Head {
    method: String,
    path: String,
    content_length: usize,
    close: bool,
}

async fn serve_connection(mut stream: TcpStream, config: FakeConfig, state: Arc<FakeState>) {
    let mut buf = Vec::new();
    loop {
        let Some((head, body)) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let keep = match (head.method.as_str(), head.path.as_str()) {
            ("GET", "/health") => respond(&mut stream, 200, "text/plain", b"ok").await,
            ("GET", "/v1/models") => {
                let v = json!({"object": "list", "data": [{"id": "fake", "object": "model"}]});
                respond(
                    &mut stream,
                    200,
                    "application/json",
                    v.to_string().as_bytes(),
                )
                .await
            }
            ("POST", "/v1/chat/completions") | ("POST", "/v1/completions") => {
                let chat = head.path.ends_with("chat/completions");
                if let Ok(mut b) = state.bodies.lock() {
                    b.push(body.clone());
                }
                generate(&mut stream, chat, &body, config, &state).await
            }
            _ => respond(&mut stream, 404, "text/plain", b"not found").await,
        };
        if !keep || head.close {
            return;
        }
    }
}

async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Head, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST_BYTES || !read_more(stream, buf).await {
            return None;
        }
    };
    let text = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let mut head = Head {
        method,
        path,
        content_length: 0,
        close: false,
    };
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "content-length" => head.content_length = v.trim().parse().ok()?,
            "connection" => head.close = v.trim().eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    if head.content_length > MAX_REQUEST_BYTES {
        return None;
    }
    while buf.len() < head_end + head.content_length {
        if !read_more(stream, buf).await {
            return None;
        }
    }
    let body = buf[head_end..head_end + head.content_length].to_vec();
    buf.drain(..head_end + head.content_length);
    Some((head, body))
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

async fn respond(stream: &mut TcpStream, status: u16, ctype: &str, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.is_ok() && stream.write_all(body).await.is_ok()
}

async fn send_chunk(stream: &mut TcpStream, data: &str) -> bool {
    let event = format!("data: {data}\n\n");
    let framed = format!("{:x}\r\n{event}\r\n", event.len());
    stream.write_all(framed.as_bytes()).await.is_ok()
}

fn chunk(chat: bool, text: &str, finish: Option<&str>) -> String {
    let v = if chat {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "fake",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
               "usage": null})
    } else {
        json!({"id": "c", "object": "text_completion", "model": "fake",
               "choices": [{"index": 0, "text": text, "finish_reason": finish}]})
    };
    v.to_string()
}

/// Streams one completion; returns whether the connection may be reused.
async fn generate(
    stream: &mut TcpStream,
    chat: bool,
    body: &[u8],
    config: FakeConfig,
    state: &FakeState,
) -> bool {
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let prompt = if chat {
        req["messages"][0]["content"].as_str().unwrap_or("")
    } else {
        req["prompt"].as_str().unwrap_or("")
    };
    if prompt.contains("[fail]") {
        return respond(
            stream,
            500,
            "application/json",
            br#"{"error":{"message":"fake failure"}}"#,
        )
        .await;
    }
    let max_tokens = req["max_tokens"].as_u64().unwrap_or(16) as usize;
    let mut in_flight = InFlight::enter(state);
    stream_tokens(stream, chat, prompt, max_tokens, config, &mut in_flight).await
}

/// Counts a generation as in flight until it is about to send `[DONE]` (or ends): a
/// client can't start its next request before that, so the count never overshoots.
struct InFlight<'a> {
    state: &'a FakeState,
    counted: bool,
}

impl<'a> InFlight<'a> {
    fn enter(state: &'a FakeState) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        state.generations.fetch_add(1, Ordering::SeqCst);
        InFlight {
            state,
            counted: true,
        }
    }

    fn leave(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

async fn stream_tokens(
    stream: &mut TcpStream,
    chat: bool,
    prompt: &str,
    max_tokens: usize,
    config: FakeConfig,
    in_flight: &mut InFlight<'_>,
) -> bool {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    if chat {
        let role =
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]});
        if !send_chunk(stream, &role.to_string()).await {
            return false;
        }
    }
    let per_chunk = if prompt.contains("[pairs]") { 2 } else { 1 };
    let mut sent = 0;
    tokio::time::sleep(config.first_token_delay).await;
    while sent < max_tokens {
        let n = per_chunk.min(max_tokens - sent);
        let text: String = (sent..sent + n).map(|i| format!("tok{i} ")).collect();
        if !send_chunk(stream, &chunk(chat, &text, None)).await {
            return false;
        }
        sent += n;
        if sent == 1 && prompt.contains("[error-line]") {
            // llama.cpp's server reports a failed stream as an `error:` field.
            let e = json!({"code": 500, "message": "fake error line", "type": "server_error"});
            let line = format!("error: {e}\n\n");
            let framed = format!("{:x}\r\n{line}\r\n", line.len());
            let _ = stream.write_all(framed.as_bytes()).await;
            return stream.write_all(b"0\r\n\r\n").await.is_ok();
        }
        if sent == 1 && prompt.contains("[error-event]") {
            let e = json!({"error": {"message": "fake stream error", "code": 500}});
            let _ = send_chunk(stream, &e.to_string()).await;
            return stream.write_all(b"0\r\n\r\n").await.is_ok();
        }
        if sent < max_tokens {
            tokio::time::sleep(config.token_delay).await;
        }
    }
    let words = prompt.split_whitespace().count();
    let usage = json!({"choices": [], "usage": {"prompt_tokens": words + 5,
        "completion_tokens": sent, "total_tokens": words + 5 + sent}});
    let tail_ok = send_chunk(stream, &chunk(chat, "", Some("length"))).await
        && send_chunk(stream, &usage.to_string()).await;
    if !tail_ok {
        return false;
    }
    in_flight.leave();
    if !prompt.contains("[nodone]") && !send_chunk(stream, "[DONE]").await {
        return false;
    }
    stream.write_all(b"0\r\n\r\n").await.is_ok()
}
