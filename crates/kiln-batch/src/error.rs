//! What the batch service can refuse or fail with; the server maps each to a status.

use kiln_api::ClassifiedError;

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

/// How a client is told: a bad field or state is a 400, a missing batch a 404; files'
/// errors as `kiln-files` classifies them; the store's own failures are 503s and the
/// rest 500s, without the server's paths.
impl ClassifiedError for BatchError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            BatchError::Invalid { .. }
            | BatchError::NotCancellable { .. }
            | BatchError::TooManyActive { .. } => K::Invalid,
            BatchError::NotFound { .. } => K::NotFound,
            BatchError::Files(f) => f.error_kind(),
            BatchError::Db(_) => K::Unavailable,
            _ => K::Internal,
        }
    }

    fn code(&self) -> &str {
        match self {
            BatchError::Invalid { .. } | BatchError::NotCancellable { .. } => "invalid_value",
            BatchError::TooManyActive { .. } => "storage_limit_reached",
            BatchError::NotFound { .. } => "not_found",
            BatchError::Files(f) => f.code(),
            BatchError::Db(_) => "store_unavailable",
            _ => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            BatchError::Invalid { param, .. } => Some(param.clone()),
            BatchError::Files(f) => f.param(),
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        use kiln_api::without_paths;
        match self {
            BatchError::Invalid { message, .. } => message.clone(),
            BatchError::NotFound { .. }
            | BatchError::NotCancellable { .. }
            | BatchError::TooManyActive { .. } => self.to_string(),
            BatchError::Files(f) => f.safe_message(),
            BatchError::Db(_) => without_paths(&self.to_string()),
            _ => format!("internal error: {}", without_paths(&self.to_string())),
        }
    }
}
