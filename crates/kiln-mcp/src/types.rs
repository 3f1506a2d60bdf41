//! Plain data types of the public API; they carry no rmcp types on purpose.

use std::time::Duration;

/// One MCP server to connect to.
#[derive(Clone)]
pub struct McpServer {
    /// Name used in logs and error messages (for example the config key).
    pub label: String,
    /// Streamable HTTP endpoint, for example `http://127.0.0.1:8000/mcp`.
    pub url: String,
    /// Extra headers sent on every HTTP request to the server, for example
    /// `("Authorization", "Bearer …")`. Values are treated as secrets: they are
    /// never logged or shown in errors.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for McpServer {
    /// Header values are redacted because they usually carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("McpServer")
            .field("label", &self.label)
            .field("url", &self.url)
            .field("header_names", &names)
            .finish()
    }
}

/// Timeouts and retry policy for one session.
#[derive(Clone, Debug)]
pub struct McpSettings {
    /// Upper bound for each request (handshake, one page of `tools/list`, one tool call).
    pub timeout: Duration,
    /// Total tries for connect and `list_tools` on transient failures (at least 1 is made).
    pub attempts: u32,
    /// Base delay of the jittered exponential backoff between tries.
    pub backoff: Duration,
    /// Which addresses the session may connect to: every server URL is resolved,
    /// checked against it, and connected to at the checked addresses only.
    pub outbound: kiln_outbound::OutboundPolicy,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            attempts: 3,
            backoff: Duration::from_millis(200),
            outbound: kiln_outbound::OutboundPolicy::default(),
        }
    }
}

/// A tool advertised by a server, in the shape needed to offer it to a model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct McpTool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object, as sent by the server.
    pub input_schema: serde_json::Value,
    /// MCP tool annotations (hints such as `readOnlyHint`), as sent by the server.
    pub annotations: Option<serde_json::Value>,
}

/// Outcome of a tool call that reached the tool.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResult {
    /// The text contents of the result, joined with `"\n"`.
    Output(String),
    /// The tool ran and reported failure (`isError: true`); text joined with `"\n"`.
    /// This is meant to be shown to the model, not treated as a transport error.
    ToolError(String),
}
