//! OpenAI's Responses API without HTTP: conversations stored in SQLite and continued by
//! `previous_response_id`, function tools answered by the client, remote MCP tools run
//! here between model rounds, streamed events, and background runs that survive a
//! restart.
//!
//! The model is reached through [`ChatRunner`], which the server implements over its
//! chat-completions path, so a response's rounds are chat turns through the chat
//! template and the prefix cache makes a continued conversation's repeated prefix
//! cheap. Every stored row belongs to the API key that made it.

pub mod cancel;
pub mod chat;
mod conversation;
pub mod error;
mod event_log;
mod events;
mod file_search;
mod ids;
mod input;
mod items;
mod mcp_tools;
pub mod replay;
mod round;
pub mod service;
pub mod store;
mod tools;
mod turn;

pub use chat::{ChatRunner, ChatTurn, Finish, GenError, TurnEvent, TurnUsage};
pub use error::{ResponsesError, Result};
pub use ids::new_id;

/// Checks a Responses `tools` list as a request's would be (the same 400s, naming
/// `tools[i]`'s field), for callers that keep tools for later turns.
pub fn check_tools(tools: &[serde_json::Value]) -> Result<()> {
    tools::parse(Some(tools)).map(|_| ())
}
pub use event_log::EventStream;
pub use items::ItemsQuery;
pub use service::{Created, Limits, Responses};
pub use store::{ResponseStore, Stored, TABLES};
