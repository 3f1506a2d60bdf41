//! One encoder request's pass: waits for a turn, runs on a blocking thread, and counts
//! the request in the model's metrics and usage.

use std::sync::Arc;
use std::time::Instant;

use crate::admission::Permit;
use crate::encoder::Encoder;
use crate::error::HostError;
use crate::lease::{Lease, TokenUsage};

impl<M: Send + Sync + 'static> Encoder<M> {
    /// Runs `f` on a blocking thread once a pass is free, and returns what it made.
    ///
    /// `f` returns its result and the tokens it read. On success the request is counted
    /// in the model's metrics and its usage (those tokens as prompt tokens, none
    /// generated) goes to the lease's usage sink. The lease and the admission permit are
    /// released only when `f` is done, so a client that goes away mid-pass neither frees
    /// its model for unloading nor its queue place before the work stops.
    pub async fn run<T, E, F>(
        self: &Arc<Self>,
        mut lease: Lease,
        permit: Permit,
        f: F,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<HostError> + Send + 'static,
        F: FnOnce(&M) -> Result<(T, usize), E> + Send + 'static,
    {
        let arrived = Instant::now();
        let pass = self
            .passes()
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| HostError::Internal("the encoder's turn queue was closed".into()))?;
        let queued = arrived.elapsed();
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let (_pass, _permit) = (pass, permit);
            let (out, tokens) = f(me.model())?;
            let m = &lease.hosted().metrics;
            m.request_queue_time.observe(queued);
            m.prompt_tokens.add(tokens as u64);
            m.success_stop.add(1);
            m.e2e_request_latency.observe(arrived.elapsed());
            lease.record_usage(TokenUsage {
                prompt: tokens as u64,
                ..TokenUsage::default()
            });
            Ok(out)
        })
        .await
        .map_err(|e| E::from(HostError::Internal(format!("encoder task failed: {e}"))))?
    }
}
