//! Re-streaming a response (`GET /v1/responses/{id}?stream=true`): a stored response's
//! recorded events, or a running background response's events so far and then live
//! ones until it ends, from after `starting_after`.
//!
//! Events are recorded as a run emits them, not rebuilt from the stored output: the
//! text deltas a client saw cannot be rebuilt from the final text. Every run of a
//! stored response numbers its events as a live stream does, whether or not anyone
//! listens, so a re-stream is the event list a streaming client got, and a client
//! resuming with `starting_after = n` gets exactly its tail after event `n`.
//!
//! A log is bounded by [`Limits::max_event_bytes`](crate::Limits::max_event_bytes): a
//! run whose events pass it keeps none (followers get an `error` event and end) and
//! its response is read without `stream`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use kiln_api::responses::StreamEvent;
use kiln_api::Caller;
use serde_json::{json, Map};
use tokio::sync::{mpsc, Notify};

use crate::error::{ResponsesError, Result};
use crate::service::Responses;

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
    fn replayed(events: Vec<StreamEvent>, after: Option<u64>) -> Self {
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

/// `starting_after` as the client sent it: a non-negative integer.
pub fn starting_after(v: Option<&str>) -> Result<Option<u64>> {
    v.map(|s| {
        s.parse::<u64>().map_err(|_| {
            ResponsesError::invalid(
                "starting_after",
                format!("`starting_after` must be a non-negative integer, not '{s}'"),
            )
        })
    })
    .transpose()
}

impl Responses {
    /// `caller`'s response `id` as events after `starting_after` (the query value, a
    /// non-negative integer): recorded ones when it has ended, or its events so far
    /// and then live ones while it runs in the background. Another key's response, or
    /// one not stored, is not found.
    pub fn replay(
        &self,
        caller: &Caller,
        id: &str,
        starting_after: Option<&str>,
    ) -> Result<EventStream> {
        let after = self::starting_after(starting_after)?;
        let stored = self.stored(caller, id)?;
        if let Some(log) = self.running_log(id) {
            return Ok(log.follow(after));
        }
        if let Some(events) = self.store().events(&caller.key_id, id)? {
            return Ok(EventStream::replayed(events, after));
        }
        let status = stored.response.status;
        let why = if matches!(status.as_str(), "queued" | "in_progress") {
            format!("response '{id}' is {status} but not running yet; poll it without `stream`")
        } else {
            format!(
                "response '{id}' was stored without its events (they passed {} bytes, or an \
                 older server stored it); retrieve it without `stream`",
                self.limits().max_event_bytes
            )
        };
        Err(ResponsesError::invalid("stream", why))
    }
}
