//! Whether the ingest worker has caught up with every file attached so far: what a caller
//! (a test, a drain) waits on instead of sleeping.
//!
//! Attaching counts a generation before waking the worker; the worker notes the
//! generation before it looks for pending files, and claims to be idle only if no
//! attach came in after that look. So [`IngestIdle::wait`] never returns while a file
//! attached before it was called is still to be ingested or stopped.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

pub(crate) struct IngestIdle {
    attached: AtomicU64,
    idle: watch::Sender<bool>,
}

impl Default for IngestIdle {
    fn default() -> Self {
        Self {
            attached: AtomicU64::new(0),
            idle: watch::Sender::new(true),
        }
    }
}

impl IngestIdle {
    /// A file was attached (call before waking the worker).
    pub(crate) fn attached(&self) {
        self.attached.fetch_add(1, Ordering::AcqRel);
        self.idle.send_replace(false);
    }

    /// The generation the worker's next look for pending files covers.
    pub(crate) fn generation(&self) -> u64 {
        self.attached.load(Ordering::Acquire)
    }

    /// The worker took a file.
    pub(crate) fn busy(&self) {
        self.idle.send_replace(false);
    }

    /// The worker found nothing pending in a look made at generation `seen`.
    pub(crate) fn caught_up(&self, seen: u64) {
        self.idle.send_if_modified(|idle| {
            let now = !*idle && self.attached.load(Ordering::Acquire) == seen;
            if now {
                *idle = true;
            }
            now
        });
    }

    /// Resolves once the worker has caught up.
    pub(crate) async fn wait(&self) {
        let mut rx = self.idle.subscribe();
        let _ = rx.wait_for(|idle| *idle).await;
    }
}
