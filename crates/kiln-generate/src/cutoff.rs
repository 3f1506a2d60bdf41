//! The shutdown deadline, as the requests still running see it. When it passes, every
//! stream ends with a `server_shutdown` error event and `[DONE]`, every non-streaming
//! request still waiting gets a 503, and each one is counted, so `kiln serve` can exit
//! non-zero when it had to cut requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Fires the deadline (held by the [`crate::Generator`], fired by the server's run loop).
pub struct Cutoff {
    fired: watch::Sender<bool>,
    cut: Arc<AtomicUsize>,
}

/// What a request waits on alongside its generation.
#[derive(Clone)]
pub struct CutoffSignal {
    fired: watch::Receiver<bool>,
    cut: Arc<AtomicUsize>,
}

impl Default for Cutoff {
    fn default() -> Self {
        Self {
            fired: watch::channel(false).0,
            cut: Arc::default(),
        }
    }
}

impl Cutoff {
    pub fn signal(&self) -> CutoffSignal {
        CutoffSignal {
            fired: self.fired.subscribe(),
            cut: self.cut.clone(),
        }
    }

    /// The deadline has passed: cut every request still running.
    pub fn fire(&self) {
        self.fired.send_replace(true);
    }

    /// Requests cut so far.
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::Relaxed)
    }
}

impl CutoffSignal {
    /// Completes when the deadline passes, counting the caller as cut.
    pub async fn passed(&mut self) {
        // The sender lives as long as the state; if it is gone, so is the server.
        let _ = self.fired.wait_for(|fired| *fired).await;
        self.cut.fetch_add(1, Ordering::Relaxed);
    }
}
