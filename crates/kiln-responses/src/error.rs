//! What the Responses API can refuse or fail with; the server maps each to a status.

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
