//! Errors for the few fallible entry points (ISA selection). Kernels themselves are
//! infallible: their inputs are sized from validated tensor shapes.

use crate::dispatch::Isa;

/// Errors returned by `kiln-kernels`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name is not one of `scalar`, `avx2`, `avx512`.
    #[error("unknown instruction set `{name}` (expected scalar, avx2 or avx512)")]
    UnknownIsa { name: String },
    /// The instruction set exists but this CPU (or this build's target) lacks it.
    #[error("instruction set {isa} is not supported by this cpu")]
    IsaUnsupported { isa: Isa },
    /// `Isa::force` was already called with another instruction set.
    #[error("the kernel table was already forced to another instruction set than {isa}")]
    IsaAlreadyForced { isa: Isa },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
