//! The engine thread and the handle callers use to reach it.
//!
//! The loop owns the [`EngineCore`]; callers send commands over a channel and receive
//! [`EngineEvent`]s on a per-request channel. When idle, the loop blocks on the command
//! channel; while there is work it drains pending commands between steps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use kiln_backend::Backend;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::core::{EngineCore, RequestId};
use crate::request::{EngineEvent, GenerateRequest};
use crate::stats::EngineStats;
use crate::stats_log::StatsLog;
use crate::{Error, Result};

enum Command {
    Add {
        req_id: RequestId,
        req: Box<GenerateRequest>,
        events: UnboundedSender<EngineEvent>,
        arrived: Instant,
    },
    Abort(RequestId),
    AbortSeq(RequestId, usize),
    /// Stop admitting; finish what is running, then exit.
    Drain,
}

/// A cloneable, thread-safe way to submit and cancel requests.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    max_model_len: usize,
    next_id: Arc<AtomicU64>,
    draining: Arc<AtomicBool>,
    stats: EngineStats,
}

/// The receiving end of one request: raw events, and abort-on-drop so a caller that
/// goes away (a disconnected client) frees the request's KV blocks at once.
pub struct RequestEvents {
    pub id: RequestId,
    rx: UnboundedReceiver<EngineEvent>,
    tx: Sender<Command>,
    /// Completions not yet finished.
    live: usize,
    /// Where consumers add their detokenization time (the per-step profile).
    pub(crate) stats: EngineStats,
}

impl RequestEvents {
    /// The next event, or `None` once every completion has finished.
    pub async fn recv(&mut self) -> Option<EngineEvent> {
        if self.live == 0 {
            return None;
        }
        let ev = self.rx.recv().await?;
        if matches!(ev, EngineEvent::Finished { .. }) {
            self.live -= 1;
        }
        Some(ev)
    }

    /// Blocking version of [`recv`](Self::recv), for threads outside an async runtime.
    pub fn blocking_recv(&mut self) -> Option<EngineEvent> {
        if self.live == 0 {
            return None;
        }
        let ev = self.rx.blocking_recv()?;
        if matches!(ev, EngineEvent::Finished { .. }) {
            self.live -= 1;
        }
        Some(ev)
    }

    /// Ends completion `index` early (e.g. a stop string matched).
    pub fn abort_one(&self, index: usize) {
        let _ = self.tx.send(Command::AbortSeq(self.id, index));
    }

    /// Ends the whole request.
    pub fn abort(&self) {
        let _ = self.tx.send(Command::Abort(self.id));
    }
}

impl Drop for RequestEvents {
    fn drop(&mut self) {
        if self.live > 0 {
            self.abort();
        }
    }
}

/// The running engine thread; joining it waits for the drain to finish.
pub struct EngineThread {
    join: Option<JoinHandle<()>>,
}

impl EngineThread {
    pub fn join(mut self) {
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Starts the engine loop on its own OS thread, building the core there with `build`:
/// the core's state (the block pool and everything holding blocks) never crosses threads.
pub fn spawn<F, B>(build: F) -> Result<(EngineHandle, EngineThread)>
where
    F: FnOnce() -> Result<EngineCore<B>> + Send + 'static,
    B: Backend,
{
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let join = std::thread::Builder::new()
        .name("kiln-engine".into())
        .spawn(move || match build() {
            Ok(core) => {
                let _ = ready_tx.send(Ok((core.stats.clone(), core.max_model_len())));
                run_loop(core, rx);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(|e| Error::Config(format!("can't start the engine thread: {e}")))?;
    let (stats, max_model_len) = ready_rx
        .recv()
        .map_err(|_| Error::Config("the engine thread died while starting".into()))??;
    let handle = EngineHandle {
        tx,
        max_model_len,
        next_id: Arc::new(AtomicU64::new(1)),
        draining: Arc::new(AtomicBool::new(false)),
        stats,
    };
    Ok((handle, EngineThread { join: Some(join) }))
}

impl EngineHandle {
    /// Submits a request without waiting for the engine thread (which may be mid-step);
    /// fails fast on what can be checked here (context length, shutdown).
    pub fn submit(&self, req: GenerateRequest) -> Result<RequestEvents> {
        if self.draining.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        crate::core::validate(&req, self.max_model_len)?;
        let req_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let n = req.n.max(1);
        let (events, rx) = unbounded_channel();
        self.tx
            .send(Command::Add {
                req_id,
                req: Box::new(req),
                events,
                arrived: Instant::now(),
            })
            .map_err(|_| Error::ShuttingDown)?;
        Ok(RequestEvents {
            id: req_id,
            rx,
            tx: self.tx.clone(),
            live: n,
            stats: self.stats.clone(),
        })
    }

    pub fn abort(&self, id: RequestId) {
        let _ = self.tx.send(Command::Abort(id));
    }

    /// The longest sequence (prompt plus output) the engine accepts.
    pub fn max_model_len(&self) -> usize {
        self.max_model_len
    }

    /// Stops accepting requests; the loop exits once running ones finish.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        let _ = self.tx.send(Command::Drain);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }
}

fn run_loop<B: Backend>(mut core: EngineCore<B>, rx: Receiver<Command>) {
    let mut draining = false;
    let mut log = StatsLog::new(&core.stats);
    loop {
        if !core.has_work() {
            if draining {
                return;
            }
            match rx.recv() {
                Ok(cmd) => draining |= apply(&mut core, cmd),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => draining |= apply(&mut core, cmd),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    draining = true;
                    break;
                }
            }
        }
        if !core.step() {
            // Commands alone (aborts of waiting requests) change the gauges too.
            core.publish_gauges();
        }
        log.tick(&core.stats);
    }
}

/// Applies one command; true if it asks the loop to drain.
fn apply<B: Backend>(core: &mut EngineCore<B>, cmd: Command) -> bool {
    match cmd {
        Command::Add {
            req_id,
            req,
            events,
            arrived,
        } => {
            // Checked by the handle already; a failure here means a bug, so say so loudly
            // rather than leaving the caller waiting.
            if let Err(e) = core.add_request(req_id, *req, events, arrived) {
                tracing::error!(error = %e, req_id, "request rejected by the engine");
            }
            false
        }
        Command::Abort(id) => {
            core.abort_request(id);
            false
        }
        Command::AbortSeq(id, index) => {
            core.abort_seq(id, index);
            false
        }
        Command::Drain => true,
    }
}
