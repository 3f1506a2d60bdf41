//! The backend an encoder runs on when its caller names none.

use kiln_backend::CpuBackend;

/// The CPU backend with one thread per available core (the caller counted as one).
pub(crate) fn default_backend() -> CpuBackend {
    CpuBackend::detect(std::thread::available_parallelism().map_or(1, usize::from))
}
