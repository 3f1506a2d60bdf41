//! The streamed events of one response, numbered in order.
//!
//! Without a listener (a plain or background request) events are dropped here, so the
//! turn runs one code path either way. A listener that goes away (the client
//! disconnected) is remembered, and the turn stops at its next event.

use kiln_api::responses::{Item, Response, StreamEvent};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub struct Emitter {
    tx: Option<mpsc::Sender<StreamEvent>>,
    seq: u64,
    gone: bool,
}

impl Emitter {
    pub fn new(tx: Option<mpsc::Sender<StreamEvent>>) -> Self {
        Self {
            tx,
            seq: 0,
            gone: false,
        }
    }

    /// Whether a streaming client went away.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// Sends `kind` with `fields` (an object).
    pub async fn emit(&mut self, kind: &str, fields: Value) {
        let Some(tx) = &self.tx else { return };
        let Value::Object(fields) = fields else {
            return;
        };
        let ev = StreamEvent {
            kind: kind.to_string(),
            sequence_number: self.seq,
            fields,
        };
        self.seq += 1;
        if tx.send(ev).await.is_err() {
            self.gone = true;
            self.tx = None;
        }
    }

    pub async fn response(&mut self, kind: &str, r: &Response) {
        self.emit(kind, json!({ "response": r })).await;
    }

    pub async fn item_added(&mut self, index: usize, item: &Item) {
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        )
        .await;
    }

    pub async fn item_done(&mut self, index: usize, item: &Item) {
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        )
        .await;
    }

    /// An `error` event (a stream cut short by the server).
    pub async fn error(&mut self, code: &str, message: &str) {
        self.emit(
            "error",
            json!({"code": code, "message": message, "param": null}),
        )
        .await;
    }
}
