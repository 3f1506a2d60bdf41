//! A persistent worker pool for data-parallel kernels.
//!
//! Spawning threads per operation costs tens of microseconds, and a decode step runs
//! hundreds of operations, so workers live as long as the pool. `run` hands out task
//! indices through one atomic counter; the calling thread works too. Workers spin briefly
//! after a job (the next op usually follows within microseconds), then park.
//!
//! The caller never waits for a worker that has not joined the job: once it has run out
//! of tasks it closes the job and waits only for workers inside it. On a busy machine a
//! descheduled worker then costs nothing (the caller does its share) instead of
//! stalling every operation until the OS runs it again.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking on the condvar.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(200);

type JobFn<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// Points at the caller's `&JobFn` (on its stack); valid until the job's generation
    /// is closed and no worker is inside it.
    job: AtomicPtr<&'static JobFn<'static>>,
    generation: AtomicU64,
    /// The last generation whose caller stopped accepting workers.
    closed: AtomicU64,
    next_task: AtomicUsize,
    n_tasks: AtomicUsize,
    /// Workers inside the current job (joined before it closed).
    inside: AtomicUsize,
    shutdown: AtomicBool,
    /// Workers parked (or about to park) on `wake`; `run` only takes the lock and
    /// notifies when some are, so back-to-back jobs cost no system call.
    parked: AtomicUsize,
    park_lock: Mutex<()>,
    wake: Condvar,
}

/// A fixed set of worker threads plus the caller.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises `run` calls from different threads: one job at a time.
    run_lock: Mutex<()>,
}

impl ThreadPool {
    /// A pool in which `n_threads` threads (the caller included) share the work.
    pub fn new(n_threads: usize) -> Self {
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            generation: AtomicU64::new(0),
            next_task: AtomicUsize::new(0),
            n_tasks: AtomicUsize::new(0),
            closed: AtomicU64::new(0),
            inside: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            park_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads.max(1))
            .filter_map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("kiln-worker-{i}"))
                    .spawn(move || worker_loop(&shared))
                    .ok()
            })
            .collect();
        Self {
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    /// Threads that take part in a job (workers plus the caller).
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(i)` for every `i in 0..n_tasks`, spread over the pool; returns when all are done.
    pub fn run<F: Fn(usize) + Sync>(&self, n_tasks: usize, f: F) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let dyn_f: &JobFn<'_> = &f;
        // The lifetime is erased: `run` closes the job and waits until no worker is
        // inside it before returning; a worker reads the job only from inside.
        let slot: *const &JobFn<'_> = &dyn_f;
        s.job.store(
            slot.cast::<&'static JobFn<'static>>().cast_mut(),
            Ordering::Relaxed,
        );
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next_task.store(0, Ordering::Relaxed);
        // SeqCst pairs with the worker's `parked` increment then `generation` load: either
        // we see it parked and notify, or it sees the new generation and doesn't wait.
        let gen = s.generation.fetch_add(1, Ordering::SeqCst) + 1;
        if s.parked.load(Ordering::SeqCst) > 0 {
            let _l = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        run_tasks(s, dyn_f);
        // No task left: close the job (late workers will skip it), then wait for the
        // workers inside it. SeqCst pairs with the worker's `inside` increment then
        // `closed` load: either we see it inside and wait, or it sees the job closed.
        s.closed.store(gen, Ordering::SeqCst);
        let mut spins = 0u32;
        while s.inside.load(Ordering::SeqCst) != 0 {
            spins = spins.saturating_add(1);
            if spins < 4096 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl ThreadPool {
    /// Runs `f(i, chunk_i)` for every `width`-long chunk of `data` (rows of a matrix),
    /// `per_task` chunks to a pool task.
    pub fn for_each_chunk_mut<T: Send, F: Fn(usize, &mut [T]) + Sync>(
        &self,
        data: &mut [T],
        width: usize,
        per_task: usize,
        f: F,
    ) {
        let width = width.max(1);
        let n = data.len() / width;
        let per_task = per_task.max(1);
        let ptr = crate::sync_ptr::SyncPtr::new(data);
        self.run(n.div_ceil(per_task), |task| {
            for i in task * per_task..((task + 1) * per_task).min(n) {
                // SAFETY: chunk `i` lies inside `data` and only this task touches it.
                f(i, unsafe { ptr.slice_mut(i * width, width) });
            }
        });
    }
}

fn run_tasks(s: &Shared, f: &JobFn<'_>) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let i = s.next_task.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        f(i);
    }
}

fn worker_loop(s: &Shared) {
    let mut seen = 0u64;
    loop {
        // Wait for a new generation: spin first, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        let gen = loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            // Reading the clock costs more than a spin; look at it every 256 spins.
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) || start.elapsed() < SPIN_BEFORE_PARK {
                std::hint::spin_loop();
                continue;
            }
            s.parked.fetch_add(1, Ordering::SeqCst);
            let guard = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            if s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::Acquire) {
                let _unused = s
                    .wake
                    .wait_timeout(guard, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner());
            }
            s.parked.fetch_sub(1, Ordering::SeqCst);
        };
        seen = gen;
        s.inside.fetch_add(1, Ordering::SeqCst);
        if s.closed.load(Ordering::SeqCst) < gen {
            // SAFETY: the job of `gen` is not closed and we are inside it, so its caller
            // is still in `run` (it waits for `inside` to drop to zero after closing) and
            // the job pointer stored before the generation bump is live.
            let f: &JobFn<'_> = unsafe { *s.job.load(Ordering::Acquire) };
            run_tasks(s, f);
        }
        s.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _l = self
                .shared
                .park_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        let pool = ThreadPool::new(3);
        for n in [0usize, 1, 2, 7, 100, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn many_back_to_back_jobs() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        for _ in 0..5000 {
            pool.run(4, |i| {
                total.fetch_add(i, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 5000 * 6);
    }
}
