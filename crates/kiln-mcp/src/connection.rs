//! The seam between the session logic and the MCP SDK.
//!
//! `session.rs` only talks to [`Connection`] and [`Failure`]; `rmcp_client.rs` is the
//! single implementation. Keeping SDK types out of this file means an rmcp upgrade
//! (or a swap to another SDK) touches one module.

use std::{future::Future, pin::Pin};

use crate::types::{CallResult, McpTool};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One page of `tools/list`.
pub(crate) struct ToolPage {
    pub tools: Vec<McpTool>,
    pub next_cursor: Option<String>,
}

/// An initialized MCP session. Timeouts and retries are the caller's job.
pub(crate) trait Connection: Send + Sync {
    fn list_tools_page(&self, cursor: Option<String>) -> BoxFuture<'_, Result<ToolPage, Failure>>;

    fn call_tool(
        &self,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> BoxFuture<'_, Result<CallResult, Failure>>;

    /// Ends the session (the SDK sends the HTTP DELETE) within `grace`.
    fn close(self: Box<Self>, grace: std::time::Duration) -> BoxFuture<'static, ()>;
}

/// Why an SDK operation failed, classified for retry decisions. Carries no
/// server label or URL; `session.rs` adds those when building `McpError`.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No HTTP exchange completed: refused, reset, DNS failure.
    Unreachable(String),
    /// The TLS handshake failed (untrusted certificate, not a TLS server...).
    /// Retrying will not fix it.
    Tls(String),
    /// The server answered with a non-success HTTP status.
    Http { status: u16, detail: String },
    /// The server answered with a JSON-RPC error object.
    Rpc { code: i32, message: String },
    /// The session's background transport has stopped; a new session is needed.
    Closed,
    /// The server answered something this client cannot use.
    Protocol(String),
    /// The outbound policy refused an address the connection would have used.
    NotAllowed(String),
}

impl Failure {
    /// Transient failures may succeed on a later try; 4xx and protocol errors won't.
    pub fn is_transient(&self) -> bool {
        match self {
            Failure::Unreachable(_) => true,
            Failure::Http { status, .. } => *status == 429 || *status >= 500,
            Failure::Tls(_)
            | Failure::Rpc { .. }
            | Failure::Closed
            | Failure::Protocol(_)
            | Failure::NotAllowed(_) => false,
        }
    }
}
