//! A response's events, recorded as its run emits them ([`EventLog`]), and a stream of
//! events for a caller ([`EventStream`]): a created response's, a stored one's again,
//! or a running one's followed live. See [`crate::replay`] for why and the bound.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use kiln_api::responses::StreamEvent;
use serde_json::{json, Map};
use tokio::sync::{mpsc, Notify};

/// Events a follower may have queued before it waits for its client.
const FOLLOW_BUFFER: usize = 64;

/// A response's events, recorded while it runs, and a wake-up for its followers.
pub struct EventLog {
    state: Mutex<LogState>,
    changed: Notify,
    max_bytes: usize,
}

#[derive(Default)]
struct LogState {
    events: Vec<StreamEvent>,
    /// Their size as JSON, checked against the bound.
    bytes: usize,
    /// Past the bound: the events were dropped and no more are kept.
    overflowed: bool,
    /// The run has ended: no event will follow.
    ended: bool,
}

impl EventLog {
    /// An empty log keeping at most `max_bytes` of events (as JSON).
    pub fn new(max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(LogState::default()),
            changed: Notify::new(),
            max_bytes,
        })
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, ev: &StreamEvent) {
        let mut s = self.lock();
        if !s.overflowed {
            s.bytes += serde_json::to_string(ev).map_or(0, |j| j.len());
            if s.bytes > self.max_bytes {
                s.overflowed = true;
                s.events = Vec::new();
            } else {
                s.events.push(ev.clone());
            }
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// Marks the run ended: followers end once they have sent every event.
    pub fn end(&self) {
        self.lock().ended = true;
        self.changed.notify_waiters();
    }

    /// The events so far; `None` once they passed the bound.
    pub fn events(&self) -> Option<Vec<StreamEvent>> {
        let s = self.lock();
        (!s.overflowed).then(|| s.events.clone())
    }

    /// The events after `after`, then live ones until the run ends. Dropping the
    /// stream stops only the follower, never the run.
    pub fn follow(self: Arc<Self>, after: Option<u64>) -> EventStream {
        let (tx, rx) = mpsc::channel(FOLLOW_BUFFER);
        tokio::spawn(async move {
            let mut next = after.map_or(0, |n| n.saturating_add(1));
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                // Registered before the state is read, so no push between is missed.
                changed.as_mut().enable();
                let (batch, ended, overflowed) = {
                    let s = self.lock();
                    let from = s.events.partition_point(|e| e.sequence_number < next);
                    (s.events[from..].to_vec(), s.ended, s.overflowed)
                };
                if overflowed {
                    let _ = tx.send(overflow(next, self.max_bytes)).await;
                    return;
                }
                for ev in batch {
                    next = ev.sequence_number.saturating_add(1);
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                }
                if ended {
                    return;
                }
                tokio::select! {
                    () = &mut changed => {}
                    () = tx.closed() => return,
                }
            }
        });
        EventStream::from_channel(rx)
    }
}

/// The `error` event that ends a follower whose log passed its bound.
fn overflow(seq: u64, max_bytes: usize) -> StreamEvent {
    let fields = json!({
        "code": "event_log_overflow",
        "message": format!("this response's events passed {max_bytes} bytes and were not kept; retrieve it without `stream` once it ends"),
        "param": null,
    });
    StreamEvent {
        kind: "error".into(),
        sequence_number: seq,
        fields: match fields {
            serde_json::Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

/// A response's events. Dropping a created response's stream stops the response at
/// its next event; dropping a re-stream stops only the re-stream.
pub struct EventStream {
    queued: VecDeque<StreamEvent>,
    rx: Option<mpsc::Receiver<StreamEvent>>,
}

impl EventStream {
    /// A stream of the events sent on `rx` (a caller relaying a response's events).
    pub fn from_channel(rx: mpsc::Receiver<StreamEvent>) -> Self {
        Self {
            queued: VecDeque::new(),
            rx: Some(rx),
        }
    }

    /// `first`, then the events sent on `rx`.
    pub(crate) fn starting_with(first: StreamEvent, rx: mpsc::Receiver<StreamEvent>) -> Self {
        Self {
            queued: VecDeque::from([first]),
            rx: Some(rx),
        }
    }

    /// The stored `events` after `after`.
    pub(crate) fn replayed(events: Vec<StreamEvent>, after: Option<u64>) -> Self {
        Self {
            queued: events
                .into_iter()
                .filter(|e| after.is_none_or(|n| e.sequence_number > n))
                .collect(),
            rx: None,
        }
    }

    pub async fn next(&mut self) -> Option<StreamEvent> {
        match self.queued.pop_front() {
            Some(ev) => Some(ev),
            None => self.rx.as_mut()?.recv().await,
        }
    }
}
