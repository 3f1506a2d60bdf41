//! What storing, listing, reading or deleting a file can fail with.
//!
//! The caller-facing variants ([`FileError::TooLarge`], [`FileError::OwnerFull`],
//! [`FileError::InvalidName`]) become HTTP 4xx messages, so they say what to do and
//! never name a server path; [`FileError::Io`] and [`FileError::Db`] are server faults
//! and name the file involved, for the log.

use kiln_api::ClassifiedError;

use std::path::PathBuf;

use kiln_db::{DbError, LockError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// The file store's directory is held by another process.
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot {what} {}: {source}", .path.display())]
    Io {
        /// What was being done ("write the upload", "remove the content file").
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The upload passed the per-file size limit.
    #[error("the file is too large: the limit is {limit} bytes")]
    TooLarge { limit: u64 },
    /// Storing the file would pass the owner's cap on `what` ("bytes" or "files").
    #[error("{}", owner_full(.what, *.limit))]
    OwnerFull { what: &'static str, limit: u64 },
    /// The file name the client sent cannot be stored; the text says why.
    #[error("invalid file name: {0}")]
    InvalidName(String),
    /// A caller-chosen id ([`crate::FileStore::upload_as`]) that is not a file id.
    #[error("invalid file id {0:?}")]
    InvalidId(String),
    /// A caller-chosen id already names another owner's file.
    #[error("the file id {0} is already in use")]
    IdTaken(String),
}

impl FileError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

fn owner_full(what: &str, limit: u64) -> String {
    match what {
        "files" => format!(
            "storage limit reached: at most {limit} files may be stored; delete some files first"
        ),
        _ => format!(
            "storage limit reached: stored files may total at most {limit} bytes; \
             delete some files first"
        ),
    }
}

/// How a client is told: a body over the cap is a 413, a full owner a 400, a bad id a
/// 404; the store's own failures are 503s without the server's paths.
impl ClassifiedError for FileError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            FileError::TooLarge { .. } => K::TooLarge,
            FileError::OwnerFull { .. } | FileError::InvalidName(_) => K::Invalid,
            FileError::InvalidId(_) | FileError::IdTaken(_) => K::NotFound,
            _ => K::Unavailable,
        }
    }

    fn code(&self) -> &str {
        match self {
            FileError::TooLarge { .. } => "request_too_large",
            FileError::OwnerFull { .. } => "storage_limit_reached",
            FileError::InvalidName(_) => "invalid_value",
            FileError::InvalidId(_) | FileError::IdTaken(_) => "not_found",
            _ => "store_unavailable",
        }
    }

    fn param(&self) -> Option<String> {
        matches!(self, FileError::InvalidName(_)).then(|| "file".into())
    }

    fn safe_message(&self) -> String {
        match self {
            FileError::TooLarge { limit } => {
                format!("the request body is over the limit of {limit} bytes")
            }
            FileError::OwnerFull { .. }
            | FileError::InvalidName(_)
            | FileError::InvalidId(_)
            | FileError::IdTaken(_) => self.to_string(),
            _ => kiln_api::without_paths(&self.to_string()),
        }
    }
}
