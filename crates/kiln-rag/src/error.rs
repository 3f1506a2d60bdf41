//! What the vector-store service can refuse or fail with; the server maps each to a
//! status.

use kiln_api::ClassifiedError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RagError {
    /// A field is wrong; `param` names it as the client wrote it.
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// No such store, file or batch for this key.
    #[error("no {what} with id '{id}'")]
    NotFound { what: &'static str, id: String },
    /// The embedding model failed or could not be reached.
    #[error("embedding: {0}")]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Db(#[from] kiln_db::DbError),
    #[error(transparent)]
    Files(#[from] kiln_files::FileError),
    #[error(transparent)]
    Vectors(#[from] kiln_vectors::VectorError),
    /// A stored row that does not parse (written by a newer or broken kiln).
    #[error("stored vector-store data is unreadable: {0}")]
    Corrupt(String),
    /// A storage task died (a panic on a blocking thread).
    #[error("internal error: {0}")]
    Internal(String),
}

impl RagError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// A failure of the [`crate::Embedder`]: whether the input was at fault (a 400 for a
/// search query) or the model (a 5xx, or a file's `server_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Model(String),
}

pub type Result<T, E = RagError> = std::result::Result<T, E>;

/// How a client is told: a bad field or input is a 400, a missing store or file a 404;
/// files' and indexes' errors as those crates classify them; the store's own failures
/// are 503s and the model's 500s, without the server's paths.
impl ClassifiedError for RagError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            RagError::Invalid { .. } | RagError::Embed(EmbedError::Input(_)) => K::Invalid,
            RagError::NotFound { .. } => K::NotFound,
            RagError::Files(f) => f.error_kind(),
            RagError::Vectors(v) => v.error_kind(),
            RagError::Db(_) => K::Unavailable,
            _ => K::Internal,
        }
    }

    fn code(&self) -> &str {
        match self {
            RagError::Invalid { .. } | RagError::Embed(EmbedError::Input(_)) => "invalid_value",
            RagError::NotFound { .. } => "not_found",
            RagError::Files(f) => f.code(),
            RagError::Vectors(v) => v.code(),
            RagError::Db(_) => "store_unavailable",
            _ => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            RagError::Invalid { param, .. } => Some(param.clone()),
            RagError::Files(f) => f.param(),
            RagError::Vectors(v) => v.param(),
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        use kiln_api::without_paths;
        match self {
            RagError::Invalid { message, .. } => message.clone(),
            RagError::Embed(EmbedError::Input(message)) => message.clone(),
            RagError::NotFound { .. } => self.to_string(),
            RagError::Embed(EmbedError::Model(message)) => {
                format!("internal error: {}", without_paths(message))
            }
            RagError::Files(f) => f.safe_message(),
            RagError::Vectors(v) => v.safe_message(),
            RagError::Db(_) => without_paths(&self.to_string()),
            _ => format!("internal error: {}", without_paths(&self.to_string())),
        }
    }
}
