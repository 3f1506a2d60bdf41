//! What the batch service can refuse or fail with; the server maps each to a status.

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// A field is wrong; `param` names it as the client wrote it.
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// No such batch (or queued request) for this key.
    #[error("no {what} with id '{id}'")]
    NotFound { what: &'static str, id: String },
    /// Only a batch still validating or running can be cancelled.
    #[error("batch '{id}' is {status}; only a batch validating or in progress can be cancelled")]
    NotCancellable { id: String, status: String },
    /// The key has as many unfinished batches as it may.
    #[error("this API key has {limit} unfinished batches, the limit; wait for some to end")]
    TooManyActive { limit: usize },
    #[error(transparent)]
    Db(#[from] kiln_db::DbError),
    #[error(transparent)]
    Files(#[from] kiln_files::FileError),
    /// A stored row that does not parse (written by a newer or broken kiln).
    #[error("stored batch data is unreadable: {0}")]
    Corrupt(String),
}

impl BatchError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = BatchError> = std::result::Result<T, E>;
