//! What the Responses API can refuse or fail with; the server maps each to a status.

use kiln_api::ClassifiedError;

use crate::chat::GenError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResponsesError {
    /// A field is wrong; `param` names it as the client wrote it.
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// No such response for this key (another key's responses are not found either).
    #[error("no response with id '{id}'")]
    NotFound { id: String, param: Option<String> },
    /// `previous_response_id` chains past the limit or loops.
    #[error("{message}")]
    Chain { message: String },
    /// The key has stored as much as it may.
    #[error(
        "this API key has {what} stored responses, at the limit of {limit}; delete some \
         or send `store: false`"
    )]
    StorageLimit { what: String, limit: String },
    /// Only a background response still running can be cancelled.
    #[error(
        "response '{id}' is {status}; only a background response in progress can be cancelled"
    )]
    NotCancellable { id: String, status: String },
    /// The model could not start (an unknown model, a bad sampling field, a full queue).
    #[error(transparent)]
    Generate(GenError),
    #[error(transparent)]
    Db(#[from] kiln_db::DbError),
    /// A stored row that does not parse (written by a newer or broken kiln).
    #[error("stored response data is unreadable: {0}")]
    Corrupt(String),
}

impl ResponsesError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = ResponsesError> = std::result::Result<T, E>;

/// How a client is told: a bad field, chain or state is a 400, a missing response a 404;
/// a failed model round as the generator classified it; the store's own failures are
/// 503s and the rest 500s, without the server's paths.
impl ClassifiedError for ResponsesError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            ResponsesError::Invalid { .. }
            | ResponsesError::Chain { .. }
            | ResponsesError::StorageLimit { .. }
            | ResponsesError::NotCancellable { .. } => K::Invalid,
            ResponsesError::NotFound { .. } => K::NotFound,
            ResponsesError::Generate(g) => g.error_kind(),
            ResponsesError::Db(_) => K::Unavailable,
            _ => K::Internal,
        }
    }

    fn code(&self) -> &str {
        match self {
            ResponsesError::Invalid { .. }
            | ResponsesError::Chain { .. }
            | ResponsesError::NotCancellable { .. } => "invalid_value",
            ResponsesError::StorageLimit { .. } => "storage_limit_reached",
            ResponsesError::NotFound { .. } => "not_found",
            ResponsesError::Generate(g) => g.code(),
            ResponsesError::Db(_) => "store_unavailable",
            _ => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            ResponsesError::Invalid { param, .. } => Some(param.clone()),
            ResponsesError::NotFound { param, .. } => param.clone(),
            ResponsesError::Chain { .. } => Some("previous_response_id".into()),
            ResponsesError::Generate(g) => g.param(),
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        use kiln_api::without_paths;
        match self {
            ResponsesError::Invalid { message, .. } | ResponsesError::Chain { message } => {
                message.clone()
            }
            ResponsesError::NotFound { .. }
            | ResponsesError::StorageLimit { .. }
            | ResponsesError::NotCancellable { .. } => self.to_string(),
            ResponsesError::Generate(g) => g.safe_message(),
            ResponsesError::Db(_) => without_paths(&self.to_string()),
            _ => format!("internal error: {}", without_paths(&self.to_string())),
        }
    }

    fn retry_later(&self) -> bool {
        matches!(self, ResponsesError::Generate(g) if g.retry_later)
    }
}
