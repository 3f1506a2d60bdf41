//! The worker pool an encoder runs on.

use kiln_backend::ThreadPool;

/// A pool with one thread per available core (the caller counted as one).
pub(crate) fn default_pool() -> ThreadPool {
    ThreadPool::new(std::thread::available_parallelism().map_or(1, usize::from))
}
