//! What the vector index refuses, and why.

use kiln_db::DbError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VectorError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// A request field is wrong; `param` names it (`vector`, `topK`, `filter.year`...).
    #[error("{message}")]
    Invalid { param: String, message: String },
    #[error("no index named '{0}'")]
    NoIndex(String),
    #[error("an index named '{0}' already exists")]
    IndexExists(String),
    #[error("index '{index}' has no metadata index on '{property}'")]
    NoMetadataIndex { index: String, property: String },
    #[error("index '{index}' already has a metadata index on '{property}'")]
    MetadataIndexExists { index: String, property: String },
    /// The HNSW graph failed (out of memory, a corrupt state).
    #[error("vector graph: {0}")]
    Graph(String),
    /// The remote engine of a remote index failed or could not be reached.
    #[error("{backend}: {message}")]
    Remote { backend: String, message: String },
}

impl VectorError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, VectorError>;
