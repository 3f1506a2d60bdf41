//! A live agent: its open file, its Responses service over the conversation in that
//! file, the lock that serializes its turns, and the broadcast its event streams read.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_responses::Responses;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::db::AgentDb;

/// Events buffered per subscriber before a slow one starts missing them.
const EVENT_BUFFER: usize = 1024;

pub struct Live {
    pub db: Arc<AgentDb>,
    pub responses: Arc<Responses>,
    /// Held for a whole turn: an agent's turns never overlap.
    pub turn: Arc<tokio::sync::Mutex<()>>,
    events: broadcast::Sender<Value>,
    last_used: Mutex<Instant>,
}

impl Live {
    pub fn new(db: Arc<AgentDb>, responses: Arc<Responses>) -> Self {
        Self {
            db,
            responses,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            events: broadcast::channel(EVENT_BUFFER).0,
            last_used: Mutex::new(Instant::now()),
        }
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Whether nothing uses this agent: no turn running, no event stream open, and no
    /// request for `idle_for`.
    pub fn idle(&self, idle_for: std::time::Duration) -> bool {
        let last = *self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        last.elapsed() >= idle_for
            && self.events.receiver_count() == 0
            && self.turn.try_lock().is_ok()
    }

    /// Sends `event` to every open event stream (none: dropped).
    pub fn publish(&self, event: Value) {
        let _ = self.events.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }
}
