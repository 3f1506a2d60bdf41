//! The public session: applies timeouts and retries around a [`Connection`] and
//! turns failures into [`McpError`]s that name the server.

use std::{collections::HashSet, fmt, future::Future, time::Duration};

use crate::{
    connection::{Connection, Failure},
    error::McpError,
    http_client, retry, rmcp_client,
    target::Target,
    types::{CallResult, McpServer, McpSettings, McpTool},
};

/// Stops a server that keeps handing out cursors from looping forever.
const MAX_TOOL_PAGES: usize = 100;

/// An initialized session with one MCP server.
///
/// Methods take `&self`, so a session can be shared (e.g. in an `Arc`) and used
/// concurrently. Dropping it ends the session too; [`McpSession::close`] also
/// tells the server, within the configured timeout.
pub struct McpSession {
    target: Target,
    settings: McpSettings,
    conn: Box<dyn Connection>,
}

impl fmt::Debug for McpSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpSession")
            .field("label", &self.target.label)
            .field("url", &self.target.display_url)
            .finish_non_exhaustive()
    }
}

/// Outcome of one bounded try.
#[derive(Debug)]
enum AttemptError {
    Failed(Failure),
    TimedOut,
}

impl AttemptError {
    fn is_transient(&self) -> bool {
        match self {
            AttemptError::TimedOut => true,
            AttemptError::Failed(failure) => failure.is_transient(),
        }
    }
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::TimedOut => f.write_str("timed out"),
            AttemptError::Failed(failure) => write!(f, "{failure:?}"),
        }
    }
}

/// The server's addresses, resolved once and each checked against the outbound
/// policy; the session's client connects to these and no others.
async fn resolve_checked(
    target: &Target,
    settings: &McpSettings,
) -> Result<Vec<std::net::SocketAddr>, McpError> {
    let host = target.url.host_str().unwrap_or_default();
    let port = target.url.port_or_known_default().unwrap_or(80);
    let resolving = settings.outbound.resolve(host, port);
    match tokio::time::timeout(settings.timeout, resolving).await {
        Ok(Ok(addrs)) => Ok(addrs),
        Ok(Err(refused)) => Err(McpError::NotAllowed {
            label: target.label.clone(),
            url: target.display_url.clone(),
            reason: refused.to_string(),
        }),
        Err(_elapsed) => Err(McpError::Timeout {
            label: target.label.clone(),
            url: target.display_url.clone(),
            what: "its host name to resolve".to_owned(),
            after: settings.timeout,
        }),
    }
}

async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, Failure>>,
) -> Result<T, AttemptError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result.map_err(AttemptError::Failed),
        Err(_elapsed) => Err(AttemptError::TimedOut),
    }
}

impl McpSession {
    /// Validates the configuration and performs the MCP initialize handshake.
    ///
    /// Transient failures (connection refused, HTTP 5xx/429, timeout) are retried
    /// up to `settings.attempts` times with jittered exponential backoff; HTTP 4xx
    /// (e.g. a wrong token) and protocol errors fail at once.
    pub async fn connect(server: &McpServer, settings: &McpSettings) -> Result<Self, McpError> {
        let target = Target::new(server)?;
        let checked = resolve_checked(&target, settings).await?;
        let client = http_client::build(&target, settings.timeout, &settings.outbound, &checked)
            .map_err(|reason| McpError::InvalidUrl {
                label: target.label.clone(),
                url: target.display_url.clone(),
                reason: format!("cannot build an HTTP client for it: {reason}"),
            })?;
        let url = target.url.as_str();
        let conn = retry::retry(
            settings.attempts,
            settings.backoff,
            || bounded(settings.timeout, rmcp_client::connect(client.clone(), url)),
            AttemptError::is_transient,
        )
        .await
        .map_err(|(error, tries)| {
            to_mcp_error(&target, settings, error, tries, "the initialize handshake")
        })?;
        tracing::debug!(label = %target.label, url = %target.display_url, "MCP session initialized");
        Ok(Self {
            target,
            settings: settings.clone(),
            conn,
        })
    }

    /// Lists every tool, following pagination cursors. Each page request is
    /// bounded by the timeout and retried like [`McpSession::connect`].
    pub async fn list_tools(&self) -> Result<Vec<McpTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = HashSet::new();
        for _ in 0..MAX_TOOL_PAGES {
            let page = retry::retry(
                self.settings.attempts,
                self.settings.backoff,
                || {
                    bounded(
                        self.settings.timeout,
                        self.conn.list_tools_page(cursor.clone()),
                    )
                },
                AttemptError::is_transient,
            )
            .await
            .map_err(|(error, tries)| self.error(error, tries, "tools/list"))?;
            tools.extend(page.tools);
            match page.next_cursor.filter(|c| !c.is_empty()) {
                None => return Ok(tools),
                Some(next) if !seen.insert(next.clone()) => {
                    return Err(self.protocol("tools/list repeated a pagination cursor"));
                }
                Some(next) => cursor = Some(next),
            }
        }
        Err(self.protocol(&format!(
            "tools/list returned more than {MAX_TOOL_PAGES} pages"
        )))
    }

    /// Calls a tool once, bounded by the timeout. Never retried, because tools may
    /// have side effects. A tool that reports failure yields
    /// `Ok(CallResult::ToolError(..))`; `Err` means the call itself failed.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallResult, McpError> {
        bounded(
            self.settings.timeout,
            self.conn.call_tool(name.to_owned(), arguments),
        )
        .await
        .map_err(|error| self.error(error, 1, &format!("the call to tool '{name}'")))
    }

    /// Ends the session, letting the server release it (HTTP DELETE), waiting at
    /// most the configured timeout.
    pub async fn close(self) {
        self.conn.close(self.settings.timeout).await;
    }

    fn error(&self, error: AttemptError, tries: u32, what: &str) -> McpError {
        to_mcp_error(&self.target, &self.settings, error, tries, what)
    }

    fn protocol(&self, reason: &str) -> McpError {
        McpError::Protocol {
            label: self.target.label.clone(),
            url: self.target.display_url.clone(),
            reason: reason.to_owned(),
        }
    }
}

fn to_mcp_error(
    target: &Target,
    settings: &McpSettings,
    error: AttemptError,
    tries: u32,
    what: &str,
) -> McpError {
    let label = target.label.clone();
    let url = target.display_url.clone();
    let failure = match error {
        AttemptError::TimedOut => {
            return McpError::Timeout {
                label,
                url,
                what: what.to_owned(),
                after: settings.timeout,
            };
        }
        AttemptError::Failed(failure) => failure,
    };
    match failure {
        Failure::Unreachable(reason) => McpError::Unreachable {
            label,
            url,
            attempts: tries,
            reason: target.scrub(&reason),
        },
        Failure::Tls(reason) => McpError::Tls {
            label,
            url,
            reason: target.scrub(&reason),
        },
        Failure::Http { status, detail } => McpError::HttpStatus {
            label,
            url,
            what: what.to_owned(),
            status,
            detail: target.scrub(&detail),
        },
        Failure::Rpc { code, message } => McpError::Server {
            label,
            url,
            what: what.to_owned(),
            code,
            message,
        },
        Failure::Closed => McpError::Closed { label, url },
        Failure::NotAllowed(reason) => McpError::NotAllowed { label, url, reason },
        Failure::Protocol(reason) => McpError::Protocol {
            label,
            url,
            reason: format!("during {what}: {}", target.scrub(&reason)),
        },
    }
}
