//! What the agents API can refuse or fail with; the server maps each to a status.

use kiln_api::ClassifiedError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error("{message}")]
    Invalid { param: String, message: String },
    #[error("no agent named '{name}'")]
    NotFound { name: String },
    #[error("agent '{name}' has no schedule '{id}'")]
    ScheduleNotFound { name: String, id: String },
    /// The agent's own file is unreadable, corrupt or locked; other agents still work.
    #[error("agent '{name}' is unavailable: {source}")]
    Unavailable {
        name: String,
        #[source]
        source: Box<kiln_db::DbError>,
    },
    /// The key has as many agents as it may.
    #[error("{0}")]
    Limit(String),
    #[error(transparent)]
    Responses(#[from] kiln_responses::ResponsesError),
    #[error("stored agent data is unreadable: {0}")]
    Corrupt(String),
}

impl AgentError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = AgentError> = std::result::Result<T, E>;

/// How a client is told: a bad field or a cap is a 400, a missing agent or schedule a
/// 404, a locked or unreadable agent a 503; the Responses API's errors as it classifies
/// them; the rest 500s, without the server's paths.
impl ClassifiedError for AgentError {
    fn error_kind(&self) -> kiln_api::ErrorKind {
        use kiln_api::ErrorKind as K;
        match self {
            AgentError::Invalid { .. } | AgentError::Limit(_) => K::Invalid,
            AgentError::NotFound { .. } | AgentError::ScheduleNotFound { .. } => K::NotFound,
            AgentError::Unavailable { .. } => K::Unavailable,
            AgentError::Responses(r) => r.error_kind(),
            _ => K::Internal,
        }
    }

    fn code(&self) -> &str {
        match self {
            AgentError::Invalid { .. } => "invalid_value",
            AgentError::Limit(_) => "storage_limit_reached",
            AgentError::NotFound { .. } | AgentError::ScheduleNotFound { .. } => "not_found",
            AgentError::Unavailable { .. } => "store_unavailable",
            AgentError::Responses(r) => r.code(),
            _ => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            AgentError::Invalid { param, .. } => Some(param.clone()),
            AgentError::Responses(r) => r.param(),
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        use kiln_api::without_paths;
        match self {
            AgentError::Invalid { message, .. } | AgentError::Limit(message) => message.clone(),
            AgentError::NotFound { .. } | AgentError::ScheduleNotFound { .. } => self.to_string(),
            AgentError::Unavailable { .. } => without_paths(&self.to_string()),
            AgentError::Responses(r) => r.safe_message(),
            _ => format!("internal error: {}", without_paths(&self.to_string())),
        }
    }

    fn retry_later(&self) -> bool {
        matches!(self, AgentError::Responses(r) if r.retry_later())
    }
}
