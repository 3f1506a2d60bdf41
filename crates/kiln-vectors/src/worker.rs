//! The graph worker: one thread per open database. At open it loads every embedded
//! index's graph, so a first query finds it in memory; then it moves the tails of
//! graphs (vectors committed but not yet inserted) into them a chunk at a time, each
//! graph saved once its tail is empty. Queries meanwhile score the tail exactly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::live::{Shape, Store};

/// How often an idle worker looks at its stop flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

pub(crate) struct Worker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the worker; it loads `warm`'s graphs first.
    pub(crate) fn start(store: Arc<Store>, warm: Vec<Shape>) -> Self {
        let (tx, rx) = mpsc::channel::<i64>();
        *store.drain.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let run = move || {
            for shape in warm {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let live = store.live.get(shape.index_id);
                let loaded = live.read(&store, &shape).map(drop);
                if let Err(e) = loaded {
                    tracing::warn!(index = shape.index_id, error = %e, "vector graph not loaded at start");
                }
            }
            while !flag.load(Ordering::Relaxed) {
                let id = match rx.recv_timeout(IDLE_POLL) {
                    Ok(id) => id,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                };
                let Some(live) = store.live.existing(id) else {
                    continue;
                };
                while !flag.load(Ordering::Relaxed) {
                    match live.drain(&store) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(index = id, error = %e, "vector graph not completed; its tail stays exact");
                            break;
                        }
                    }
                }
            }
        };
        let handle = std::thread::Builder::new()
            .name("kiln-vector-graphs".into())
            .spawn(run)
            .map_err(
                |e| tracing::warn!(error = %e, "no vector graph worker; graphs load at first use"),
            )
            .ok();
        Self { stop, handle }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
