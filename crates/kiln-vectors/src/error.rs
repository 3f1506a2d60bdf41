//! What the vector index refuses, and why.

use kiln_api::ClassifiedError;

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

/// How a client is told: a bad field or an existing name is a 400, a missing index a
/// 404; the store's own failures are 503s without the server's paths.
impl ClassifiedError for VectorError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            VectorError::Invalid { .. }
            | VectorError::IndexExists(_)
            | VectorError::MetadataIndexExists { .. } => K::Invalid,
            VectorError::NoIndex(_) | VectorError::NoMetadataIndex { .. } => K::NotFound,
            _ => K::Unavailable,
        }
    }

    fn code(&self) -> &str {
        match self {
            VectorError::Invalid { .. }
            | VectorError::IndexExists(_)
            | VectorError::MetadataIndexExists { .. } => "invalid_value",
            VectorError::NoIndex(_) | VectorError::NoMetadataIndex { .. } => "not_found",
            _ => "store_unavailable",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            VectorError::Invalid { param, .. } => Some(param.clone()),
            VectorError::NoIndex(_) | VectorError::IndexExists(_) => Some("name".into()),
            VectorError::NoMetadataIndex { .. } | VectorError::MetadataIndexExists { .. } => {
                Some("propertyName".into())
            }
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        match self.error_kind() {
            kiln_api::ErrorKind::Unavailable => kiln_api::without_paths(&self.to_string()),
            _ => self.to_string(),
        }
    }
}
