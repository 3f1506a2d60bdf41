//! Backpressure: a bounded admission queue per model.
//!
//! Every admitted request holds a [`Permit`] for its sequences until its response ends
//! (finished, failed or the client went away), so the count is exact. Up to
//! `max_num_seqs` sequences run in the engine; up to `max_queued` more wait there. Past
//! that a request is refused at once instead of a growing queue and rising latency for
//! everyone; `reject_if_busy` asks to be refused as soon as nothing would run right away.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::HostError;

pub struct Admission {
    in_flight: Arc<AtomicUsize>,
    max_running: AtomicUsize,
    max_queued: usize,
}

/// Sequences of one admitted request; released on drop.
#[derive(Debug)]
pub struct Permit {
    counter: Arc<AtomicUsize>,
    seqs: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.seqs, Ordering::AcqRel);
    }
}

impl Admission {
    /// `max_running` is set once the model is loaded (its engine's `max_num_seqs`).
    pub fn new(max_queued: usize) -> Self {
        Self {
            in_flight: Arc::new(AtomicUsize::new(0)),
            max_running: AtomicUsize::new(0),
            max_queued,
        }
    }

    pub fn set_max_running(&self, n: usize) {
        self.max_running.store(n, Ordering::Release);
    }

    /// Sequences admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn capacity(&self) -> usize {
        self.max_running.load(Ordering::Acquire) + self.max_queued
    }

    /// Admits `seqs` sequences of model `model`, or says why not. A request is admitted
    /// whenever there is room for one more sequence, so a large `n` can't starve.
    pub fn try_admit(
        &self,
        model: &str,
        seqs: usize,
        reject_if_busy: bool,
    ) -> Result<Permit, HostError> {
        let max_running = self.max_running.load(Ordering::Acquire);
        let cap = max_running + self.max_queued;
        let mut cur = self.in_flight.load(Ordering::Acquire);
        loop {
            if reject_if_busy && cur >= max_running {
                return Err(HostError::Busy {
                    model: model.to_string(),
                    running: cur.min(max_running),
                });
            }
            if cur >= cap {
                return Err(HostError::QueueFull {
                    model: model.to_string(),
                    limit: cap,
                });
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + seqs,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Permit {
                        counter: self.in_flight.clone(),
                        seqs,
                    })
                }
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_running_plus_queued_and_releases_on_drop() {
        let a = Admission::new(1);
        a.set_max_running(2);
        let p1 = a.try_admit("m", 1, false).expect("first");
        let p2 = a.try_admit("m", 1, false).expect("second");
        assert!(matches!(
            a.try_admit("m", 1, true),
            Err(HostError::Busy { running: 2, .. })
        ));
        let p3 = a.try_admit("m", 1, false).expect("queued");
        assert!(matches!(
            a.try_admit("m", 1, false),
            Err(HostError::QueueFull { limit: 3, .. })
        ));
        drop((p1, p2, p3));
        assert_eq!(a.in_flight(), 0);
        let big = a
            .try_admit("m", 8, true)
            .expect("room for one more admits a big request");
        assert_eq!(a.in_flight(), 8);
        drop(big);
        assert_eq!(a.in_flight(), 0);
    }
}
