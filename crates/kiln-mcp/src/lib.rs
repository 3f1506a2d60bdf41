//! MCP (Model Context Protocol) client for Kiln, over the streamable HTTP transport.
//!
//! Kiln connects to remote MCP servers to list their tools and call them on a
//! model's behalf. The protocol work is done by the official `rmcp` SDK, which is
//! kept behind a private trait (see `connection.rs`) so that none of its types leak
//! into this API and an SDK upgrade touches only `rmcp_client.rs`.
//!
//! Everything here is async and must run inside a Tokio runtime with the I/O and
//! time drivers enabled (`#[tokio::main]`, or `Builder::enable_all()`); rmcp spawns
//! a background task per session, so drop or close sessions before the runtime.

mod connection;
mod error;
mod http_client;
mod retry;
mod rmcp_client;
mod session;
mod target;
mod types;

pub use error::McpError;
pub use session::McpSession;
pub use types::{CallResult, McpServer, McpSettings, McpTool};
