//! What the batch service tests share: a real `FileStore` and `BatchStore` in a
//! tempdir, and a scripted runner.
//!
//! The runner answers a chat body by echoing `messages[0].content` (a Workers AI body
//! by echoing `prompt`) with 7 prompt tokens (1 cached) and one completion token per
//! byte of the text. A body with `"fail": true` is answered 400; with `"busy": true`,
//! 429 for the first `busy_times` calls; with `"stall": true` (when `stall` is set) it
//! never answers. Every call first waits for the gate to be open. Calls are counted per
//! text, and the most calls in flight at once is kept.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use kiln_api::batches::{Batch, CreateBatch};
use kiln_api::Caller;
use kiln_batch::{BatchRunner, BatchStore, Batches, Limits, LineOutcome};
use kiln_files::FileStore;
use serde_json::{json, Value};
use tokio::sync::watch;

pub const CHAT: &str = "/v1/chat/completions";
/// How long any wait in a test may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub fn caller(key: &str) -> Caller {
    Caller {
        key_id: key.into(),
        label: Some(format!("label-{key}")),
    }
}

/// What the scripted runner saw and how it behaves.
pub struct Script {
    /// Honour `"stall": true`.
    pub stall: AtomicBool,
    /// Calls answered 429 for a `"busy": true` body.
    pub busy_times: usize,
    /// How long each answer takes.
    pub delay: Duration,
    gate: watch::Sender<bool>,
    calls: Mutex<HashMap<String, usize>>,
    /// (key id, path, body) of every call.
    pub seen: Mutex<Vec<(String, String, Value)>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Calls stalled right now.
    stalled: AtomicUsize,
}

impl Script {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            stall: AtomicBool::new(true),
            busy_times: 0,
            delay: Duration::ZERO,
            gate: watch::channel(true).0,
            calls: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            stalled: AtomicUsize::new(0),
        })
    }

    pub fn with(f: impl FnOnce(&mut Script)) -> Arc<Self> {
        let mut s = Arc::into_inner(Self::new()).expect("new script");
        f(&mut s);
        Arc::new(s)
    }

    pub fn runner(self: &Arc<Self>) -> Arc<dyn BatchRunner> {
        Arc::new(Scripted(self.clone()))
    }

    /// Holds every call (`false`) or lets them through.
    pub fn set_gate(&self, open: bool) {
        self.gate.send_replace(open);
    }

    /// Calls made with this text so far.
    pub fn calls(&self, text: &str) -> usize {
        self.lock_calls().get(text).copied().unwrap_or(0)
    }

    pub fn total_calls(&self) -> usize {
        self.lock_calls().values().sum()
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn stalled(&self) -> usize {
        self.stalled.load(Ordering::SeqCst)
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The text a body carries.
pub fn text_of(body: &Value) -> String {
    body.pointer("/messages/0/content")
        .or_else(|| body.get("prompt"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// What the runner answers `text` with on `path` when it answers 200.
pub fn answer(path: &str, text: &str) -> Value {
    let usage = json!({
        "prompt_tokens": 7,
        "completion_tokens": text.len(),
        "total_tokens": 7 + text.len(),
        "prompt_tokens_details": {"cached_tokens": 1},
    });
    if path.starts_with("/ai/run/") {
        return json!({
            "result": {"response": text, "usage": usage},
            "success": true, "errors": [], "messages": [],
        });
    }
    json!({
        "id": format!("chatcmpl-{text}"),
        "object": "chat.completion",
        "created": 1,
        "model": "scripted",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }],
        "usage": usage,
    })
}

pub fn fail_answer(path: &str, text: &str) -> Value {
    let message = format!("'{text}' was refused");
    if path.starts_with("/ai/run/") {
        return json!({
            "result": null, "success": false, "messages": [],
            "errors": [{"code": 5006, "message": message}],
        });
    }
    json!({"error": {
        "message": message, "type": "invalid_request_error", "param": null, "code": null,
    }})
}

struct Scripted(Arc<Script>);

/// Counts a call in flight until dropped (answered or aborted).
struct InFlight(Arc<Script>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Stalled(Arc<Script>);

impl Drop for Stalled {
    fn drop(&mut self) {
        self.0.stalled.fetch_sub(1, Ordering::SeqCst);
    }
}

impl BatchRunner for Scripted {
    fn run(&self, caller: &Caller, path: &str, body: Value) -> BoxFuture<'static, LineOutcome> {
        let s = self.0.clone();
        let (key, path) = (caller.key_id.clone(), path.to_string());
        Box::pin(async move {
            let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            s.max_in_flight.fetch_max(n, Ordering::SeqCst);
            let _guard = InFlight(s.clone());
            let text = text_of(&body);
            let call = {
                let mut calls = s.lock_calls();
                let c = calls.entry(text.clone()).or_default();
                *c += 1;
                *c
            };
            s.seen.lock().unwrap_or_else(|e| e.into_inner()).push((
                key,
                path.clone(),
                body.clone(),
            ));
            let mut gate = s.gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            let flag = |k: &str| body.get(k).and_then(Value::as_bool) == Some(true);
            if flag("stall") && s.stall.load(Ordering::SeqCst) {
                s.stalled.fetch_add(1, Ordering::SeqCst);
                let _stalled = Stalled(s.clone());
                std::future::pending::<()>().await;
            }
            if !s.delay.is_zero() {
                tokio::time::sleep(s.delay).await;
            }
            if flag("busy") && call <= s.busy_times {
                let body = json!({"error": {"message": "busy", "type": "server_error"}});
                return LineOutcome { status: 429, body };
            }
            if flag("fail") {
                let body = fail_answer(&path, &text);
                return LineOutcome { status: 400, body };
            }
            LineOutcome {
                status: 200,
                body: answer(&path, &text),
            }
        })
    }
}

/// The stores of one service, in one directory.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub files: Arc<FileStore>,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = Arc::new(open_files(dir.path()));
        Self { dir, files }
    }

    pub fn service(&self, script: &Arc<Script>, limits: Limits) -> Arc<Batches> {
        let store = BatchStore::open(&self.dir.path().join("batches.sqlite3")).expect("store");
        Batches::new(store, self.files.clone(), script.runner(), limits)
    }

    /// Uploads `text` as `owner`'s file of `purpose`: its id.
    pub fn upload(&self, owner: &str, purpose: &str, text: &str) -> String {
        let mut up = self
            .files
            .upload(owner, "input.jsonl", purpose)
            .expect("upload");
        up.write(text.as_bytes()).expect("write");
        up.finish().expect("finish").id
    }

    /// `owner`'s file `id`, one JSON value per line.
    pub fn read_jsonl(&self, owner: &str, id: &str) -> Vec<Value> {
        let (file, mut content) = self
            .files
            .open_content(owner, id)
            .expect("open")
            .expect("the file exists for its owner");
        assert_eq!(file.purpose, "batch_output");
        let mut text = String::new();
        content.read_to_string(&mut text).expect("read");
        assert!(text.ends_with('\n'), "every line ends: {text:?}");
        text.lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

pub fn open_files(dir: &Path) -> FileStore {
    FileStore::open(dir, kiln_files::Limits::default()).expect("file store")
}

/// One line of a batch file running `text` on the chat endpoint, with `extra` in
/// its body.
pub fn chat_line(custom_id: &str, text: &str, extra: Value) -> String {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    json!({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}).to_string()
}

pub fn jsonl(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

pub fn create_req(file: &str) -> CreateBatch {
    CreateBatch {
        input_file_id: file.into(),
        endpoint: CHAT.into(),
        completion_window: "24h".into(),
        metadata: None,
    }
}

/// Polls until `done` holds, failing past `DEADLINE`.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the batch until `done` holds of it, failing past `DEADLINE`.
pub async fn wait_batch(
    b: &Batches,
    c: &Caller,
    id: &str,
    mut done: impl FnMut(&Batch) -> bool,
) -> Batch {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let batch = b.get(c, id).expect("get");
        if done(&batch) {
            return batch;
        }
        assert!(Instant::now() < deadline, "timed out: {batch:#?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn wait_status(b: &Batches, c: &Caller, id: &str, status: &str) -> Batch {
    wait_batch(b, c, id, |x| x.status == status).await
}

/// Checks an output line's shape: a 200 (or `status`) answer to `custom_id`.
pub fn assert_answered(line: &Value, custom_id: &str, status: u16) -> Value {
    let keys: Vec<_> = line.as_object().expect("object").keys().cloned().collect();
    assert_eq!(keys.len(), 4, "{line}");
    assert!(line["id"].as_str().expect("id").starts_with("batch_req_"));
    assert_eq!(line["custom_id"], custom_id, "{line}");
    assert_eq!(line["error"], Value::Null, "{line}");
    let r = &line["response"];
    assert_eq!(r["status_code"], status, "{line}");
    assert!(r["request_id"]
        .as_str()
        .expect("request_id")
        .starts_with("req_"));
    r["body"].clone()
}

/// Checks an error line's shape for a line never run: its code, and its message
/// naming `line_no` (if given).
pub fn assert_line_error(line: &Value, custom_id: Option<&str>, code: &str, line_no: Option<u64>) {
    assert_eq!(line["response"], Value::Null, "{line}");
    assert_eq!(line["custom_id"], json!(custom_id), "{line}");
    assert_eq!(line["error"]["code"], code, "{line}");
    let message = line["error"]["message"].as_str().expect("message");
    if let Some(n) = line_no {
        assert!(message.starts_with(&format!("line {n}:")), "{line}");
    }
    assert!(line["id"].as_str().expect("id").starts_with("batch_req_"));
}

/// The custom ids of `lines`, in order.
pub fn custom_ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap_or("-").to_string())
        .collect()
}
