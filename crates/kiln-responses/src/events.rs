//! The streamed events of one response, numbered in order.
//!
//! Without a listener (a plain or background request) events are not sent, so the turn
//! runs one code path either way; they are numbered the same, and recorded in the
//! response's [`EventLog`] when it has one (a stored background response), so a
//! re-stream is numbered as a live stream would have been. A listener that goes away (the client disconnected) is remembered,
//! and the turn stops at its next event.

use std::sync::Arc;

use kiln_api::responses::{Item, Response, StreamEvent};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::event_log::EventLog;

pub struct Emitter {
    tx: Option<mpsc::Sender<StreamEvent>>,
    log: Option<Arc<EventLog>>,
    seq: u64,
    gone: bool,
}

impl Emitter {
    pub fn new(tx: Option<mpsc::Sender<StreamEvent>>, log: Option<Arc<EventLog>>) -> Self {
        Self {
            tx,
            log,
            seq: 0,
            gone: false,
        }
    }

    /// Numbers this emitter's events from `first` (a run started again after a crash:
    /// see [`crate::replay`]).
    pub(crate) fn numbered_from(mut self, first: u64) -> Self {
        self.seq = first;
        self
    }

    /// Whether a streaming client went away.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// The events recorded so far (`None` without a log or past its bound).
    pub fn recorded(&self) -> Option<Vec<StreamEvent>> {
        self.log.as_ref().and_then(|l| l.events())
    }

    /// `kind` with `fields` (an object), numbered next but neither recorded nor sent:
    /// a terminal event is stored with the response before anyone sees it.
    pub fn number(&mut self, kind: &str, fields: Value) -> Option<StreamEvent> {
        let Value::Object(fields) = fields else {
            return None;
        };
        let ev = StreamEvent {
            kind: kind.to_string(),
            sequence_number: self.seq,
            fields,
        };
        self.seq += 1;
        Some(ev)
    }

    /// Records `ev` in the log and sends it to the listener.
    pub async fn deliver(&mut self, ev: StreamEvent) {
        if let Some(log) = &self.log {
            log.push(&ev);
        }
        let Some(tx) = &self.tx else { return };
        if tx.send(ev).await.is_err() {
            self.gone = true;
            self.tx = None;
        }
    }

    /// Sends `kind` with `fields` (an object).
    pub async fn emit(&mut self, kind: &str, fields: Value) {
        if let Some(ev) = self.number(kind, fields) {
            self.deliver(ev).await;
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
