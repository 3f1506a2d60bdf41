//! What the vector-store service can refuse or fail with; the server maps each to a
//! status.

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
