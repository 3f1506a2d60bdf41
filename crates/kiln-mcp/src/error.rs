//! Errors returned to the caller. Messages are written to be shown to an API user
//! as-is: each names the server label and URL and the class of failure, and never
//! includes header values (which usually carry credentials) or what the remote
//! answered besides its status (an internal service's error page can hold secrets).

use std::time::Duration;

/// Why an MCP operation failed. A tool that runs and reports failure is not an
/// error; see [`crate::CallResult::ToolError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configured URL cannot be used (not http/https, no host, unparsable).
    #[error("MCP server '{label}': invalid URL '{url}': {reason}")]
    InvalidUrl {
        label: String,
        url: String,
        reason: String,
    },

    /// A configured header has an invalid or reserved name, or an invalid value.
    /// The value is deliberately not part of the message.
    #[error("MCP server '{label}': invalid HTTP header '{name}': {reason}")]
    InvalidHeader {
        label: String,
        name: String,
        reason: String,
    },

    /// The outbound policy refuses the server's address (loopback, private,
    /// link-local, metadata…) or its host name did not resolve. Not retried.
    #[error("MCP server '{label}' at {url} cannot be reached: {reason}")]
    NotAllowed {
        label: String,
        url: String,
        reason: String,
    },

    /// No HTTP exchange completed (connection refused, reset, DNS failure), even
    /// after retrying.
    #[error("MCP server '{label}' at {url} is unreachable after {attempts} attempt(s): {reason}")]
    Unreachable {
        label: String,
        url: String,
        attempts: u32,
        reason: String,
    },

    /// The TLS handshake failed, e.g. the certificate is not trusted by the
    /// system trust store, or the server does not speak TLS. Not retried.
    #[error("MCP server '{label}' at {url}: TLS connection failed: {reason}")]
    Tls {
        label: String,
        url: String,
        reason: String,
    },

    /// The server did not answer within the configured timeout.
    #[error("MCP server '{label}' at {url} did not answer {what} within {after:?}")]
    Timeout {
        label: String,
        url: String,
        /// What was being waited for, e.g. "the initialize handshake".
        what: String,
        after: Duration,
    },

    /// The server answered with an HTTP error status. 401/403 usually mean the
    /// configured credentials are missing or wrong; 4xx is never retried.
    #[error(
        "MCP server '{label}' at {url} answered {what} with HTTP {status}{hint}{detail}",
        hint = status_hint(*.status),
        detail = if .detail.is_empty() { String::new() } else { format!(": {}", .detail) }
    )]
    HttpStatus {
        label: String,
        url: String,
        what: String,
        status: u16,
        /// What the status means here (never the remote body), possibly empty.
        detail: String,
    },

    /// The server answered a request with a JSON-RPC error (e.g. unknown tool,
    /// invalid arguments).
    #[error("MCP server '{label}' at {url} rejected {what}: {message} (JSON-RPC error {code})")]
    Server {
        label: String,
        url: String,
        what: String,
        code: i32,
        message: String,
    },

    /// The session's connection has ended; connect again to keep using the server.
    #[error("MCP session with server '{label}' at {url} is closed; reconnect to use it")]
    Closed { label: String, url: String },

    /// The server's answer does not follow the MCP protocol as this client expects.
    #[error("MCP server '{label}' at {url} sent an unusable response: {reason}")]
    Protocol {
        label: String,
        url: String,
        reason: String,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (check the credentials in the configured headers)",
        404 => " (check the URL path, usually /mcp)",
        _ => "",
    }
}
