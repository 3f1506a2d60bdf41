//! What this crate needs from the server: run a chat turn and stream it back, and
//! search vector stores for the `file_search` tool.
//!
//! The server implements [`ChatRunner`] over its chat-completions pipeline (template,
//! constraints, admission, engine) and its vector stores, so a response's model rounds
//! are exactly chat completions, and this crate never links the engine or knows HTTP.
//! The runner's error is opaque here; the server downcasts it back to its own error to
//! answer with the same status a chat request would get.

use futures_util::future::BoxFuture;
use kiln_api::chat::ChatCompletionRequest;
use kiln_api::Caller;
use kiln_api::{ClassifiedError, ErrorKind};
use kiln_rag::{Hit, Search};
use tokio::sync::{mpsc, oneshot};

/// Starts chat turns. `start` returns once the request is admitted (so a bad request
/// fails before anything is streamed); the events follow on the turn's channel.
pub trait ChatRunner: Send + Sync + 'static {
    fn start(
        &self,
        caller: &Caller,
        request: ChatCompletionRequest,
    ) -> BoxFuture<'static, Result<ChatTurn, GenError>>;

    /// Whether `model` can run turns here. An agent's model is checked when it is set,
    /// so a scheduled turn never fails (and retries) on a model that isn't served. The
    /// default accepts every model.
    fn check_model(&self, _model: &str) -> Result<(), GenError> {
        Ok(())
    }

    /// The best chunks of `caller`'s vector stores `store_ids` for `search`. A runner
    /// without vector stores refuses the tool.
    fn file_search(
        &self,
        _caller: &Caller,
        _store_ids: Vec<String>,
        _search: Search,
    ) -> BoxFuture<'static, Result<Vec<Hit>, GenError>> {
        Box::pin(async {
            Err(GenError::new(
                "invalid_request_error",
                "this server has no vector stores for the file_search tool",
            ))
        })
    }
}

/// A running chat turn. Dropping it (or its `events`) aborts the generation.
pub struct ChatTurn {
    /// The model's catalogue name (what the response reports).
    pub model: String,
    pub events: mpsc::Receiver<TurnEvent>,
    /// The tokens the turn consumed as they were metered, sent once the generation has
    /// ended for any reason: finished, failed, or cut because `events` was dropped. A
    /// stored response reports these, so it always agrees with the bill.
    pub usage: oneshot::Receiver<TurnUsage>,
}

/// What a turn produces, in order; the last is `Finished` or `Failed`.
#[derive(Debug)]
pub enum TurnEvent {
    /// Assistant text outside tool calls.
    Text(String),
    /// The model began tool call `index` (0-based within the turn).
    CallStart {
        index: usize,
        name: String,
    },
    /// More of call `index`'s JSON arguments.
    CallArguments {
        index: usize,
        fragment: String,
    },
    Finished(Finish),
    Failed(GenError),
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Finish {
    /// Cut by the token limit (the response is `incomplete`).
    pub length: bool,
    pub usage: TurnUsage,
}

/// Tokens one turn consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnUsage {
    pub prompt: u64,
    pub cached: u64,
    pub completion: u64,
}

impl TurnUsage {
    pub fn add(&mut self, other: TurnUsage) {
        self.prompt += other.prompt;
        self.cached += other.cached;
        self.completion += other.completion;
    }
}

/// A failure of the chat runner: OpenAI's `code` and message for a stored response,
/// and the runner's classification of it, so a caller answers as the runner would.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct GenError {
    pub code: String,
    pub message: String,
    pub kind: ErrorKind,
    pub param: Option<String>,
    pub retry_later: bool,
}

impl GenError {
    /// A server-side failure with `code`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            kind: ErrorKind::Internal,
            param: None,
            retry_later: false,
        }
    }

    /// `e` as the runner's error, classified as `e` is.
    pub fn classified(e: &impl ClassifiedError) -> Self {
        Self {
            code: e.code().to_string(),
            message: e.safe_message(),
            kind: e.error_kind(),
            param: e.param(),
            retry_later: e.retry_later(),
        }
    }
}

impl ClassifiedError for GenError {
    fn error_kind(&self) -> ErrorKind {
        self.kind
    }

    fn code(&self) -> &str {
        &self.code
    }

    fn param(&self) -> Option<String> {
        self.param.clone()
    }

    fn retry_later(&self) -> bool {
        self.retry_later
    }
}
