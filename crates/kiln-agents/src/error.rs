//! What the agents API can refuse or fail with; the server maps each to a status.

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
