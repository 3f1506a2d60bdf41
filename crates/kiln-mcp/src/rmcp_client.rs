//! The only module that knows about `rmcp`: implements [`Connection`] on top of
//! rmcp's streamable HTTP client and maps its errors to [`Failure`].

use std::{error::Error as StdError, sync::Arc, time::Duration};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
        ContentBlock, ErrorData, Implementation, PaginatedRequestParams, Tool,
    },
    service::{ClientInitializeError, RoleClient, RunningService},
    transport::{
        common::client_side_sse::ExponentialBackoff,
        streamable_http_client::{
            AuthRequiredError, HttpStatusError, InsufficientScopeError,
            StreamableHttpClientTransportConfig, StreamableHttpError,
        },
        StreamableHttpClientTransport,
    },
    ServiceError, ServiceExt,
};

use crate::{
    connection::{BoxFuture, Connection, Failure, ToolPage},
    types::{CallResult, McpTool},
};

/// Reconnects of the session's background SSE stream before rmcp gives up, so a
/// dead server is not polled forever by an idle session.
const SSE_RECONNECTS: usize = 5;
const SSE_MAX_DELAY: Duration = Duration::from_secs(10);

/// Longest server-provided text kept in an error message.
const MAX_DETAIL: usize = 300;

/// Runs the MCP initialize handshake over `client` (which carries the custom headers).
pub(crate) async fn connect(
    client: reqwest::Client,
    url: &str,
) -> Result<Box<dyn Connection>, Failure> {
    let mut sse_retry = ExponentialBackoff::default();
    sse_retry.max_times = Some(SSE_RECONNECTS);
    sse_retry.max_delay = Some(SSE_MAX_DELAY);
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    config.retry_config = Arc::new(sse_retry);

    let transport = StreamableHttpClientTransport::with_client(client, config);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("kiln", env!("CARGO_PKG_VERSION")),
    );
    let service = info.serve(transport).await.map_err(init_failure)?;
    Ok(Box::new(RmcpConnection { service }))
}

struct RmcpConnection {
    service: RunningService<RoleClient, ClientConfig>,
}

impl Connection for RmcpConnection {
    fn list_tools_page(&self, cursor: Option<String>) -> BoxFuture<'_, Result<ToolPage, Failure>> {
        Box::pin(async move {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = self
                .service
                .list_tools(Some(params))
                .await
                .map_err(service_failure)?;
            Ok(ToolPage {
                tools: page.tools.into_iter().map(convert_tool).collect(),
                next_cursor: page.next_cursor,
            })
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> BoxFuture<'_, Result<CallResult, Failure>> {
        Box::pin(async move {
            let params = CallToolRequestParams::new(name).with_arguments(arguments);
            // `call_tool_once` (not `call_tool`): no interactive follow-up rounds are
            // driven, and dropping the future on timeout cancels the request.
            match self
                .service
                .call_tool_once(params)
                .await
                .map_err(service_failure)?
            {
                CallToolResponse::Complete(result) => Ok(convert_result(result)),
                CallToolResponse::InputRequired(_) => Err(Failure::Protocol(
                    "the tool asked for interactive input, which this client does not support"
                        .into(),
                )),
                CallToolResponse::Task(_) => Err(Failure::Protocol(
                    "the tool answered with a deferred task, which this client does not support"
                        .into(),
                )),
                _ => Err(Failure::Protocol(
                    "the tool answered with a result kind this client does not know".into(),
                )),
            }
        })
    }

    fn close(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut service = self.service;
            if let Err(error) = service.close_with_timeout(grace).await {
                tracing::debug!(%error, "MCP session task ended abnormally on close");
            }
        })
    }
}

fn convert_tool(tool: Tool) -> McpTool {
    McpTool {
        name: tool.name.into_owned(),
        description: tool.description.map(|d| d.into_owned()),
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        annotations: tool
            .annotations
            .and_then(|a| serde_json::to_value(a).ok())
            .filter(|v| !v.is_null()),
    }
}

/// Joins the text contents; a result without text but with structured content
/// is rendered as that JSON so the caller still gets something useful.
fn convert_result(result: CallToolResult) -> CallResult {
    let texts: Vec<String> = result
        .content
        .into_iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text),
            _ => None,
        })
        .collect();
    let text = match (texts.is_empty(), result.structured_content) {
        (true, Some(structured)) => structured.to_string(),
        _ => texts.join("\n"),
    };
    if result.is_error == Some(true) {
        CallResult::ToolError(text)
    } else {
        CallResult::Output(text)
    }
}

fn init_failure(error: ClientInitializeError) -> Failure {
    match error {
        ClientInitializeError::TransportError { error, .. } => {
            transport_failure(error.error.as_ref())
        }
        ClientInitializeError::JsonRpcError(data) => rpc_failure(data),
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => init_failure(*fallback),
        ClientInitializeError::ConnectionClosed(context) => Failure::Protocol(format!(
            "the connection closed during the handshake ({context}); is this an MCP streamable HTTP endpoint?"
        )),
        other => Failure::Protocol(truncate(&other.to_string())),
    }
}

fn service_failure(error: ServiceError) -> Failure {
    match error {
        ServiceError::McpError(data) => rpc_failure(data),
        ServiceError::TransportSend(error) => transport_failure(error.error.as_ref()),
        ServiceError::TransportClosed | ServiceError::Cancelled { .. } => Failure::Closed,
        other => Failure::Protocol(truncate(&other.to_string())),
    }
}

fn rpc_failure(data: ErrorData) -> Failure {
    Failure::Rpc {
        code: data.code.0,
        message: truncate(&data.message),
    }
}

/// Finds the most specific known error in the chain and classifies it.
fn transport_failure(error: &(dyn StdError + Send + Sync + 'static)) -> Failure {
    if let Some(denied) = find_nested::<kiln_outbound::OutboundError>(error) {
        return Failure::NotAllowed(denied.to_string());
    }
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return http_failure(http);
        }
        if let Some(req) = err.downcast_ref::<reqwest::Error>() {
            return reqwest_failure(req);
        }
        if let Some(status) = err.downcast_ref::<HttpStatusError>() {
            return status_failure(status);
        }
        current = err.source();
    }
    Failure::Protocol(truncate(&chain(error)))
}

fn http_failure(error: &StreamableHttpError<reqwest::Error>) -> Failure {
    match error {
        StreamableHttpError::Client(req) => reqwest_failure(req),
        StreamableHttpError::HttpStatus(status) => status_failure(status),
        StreamableHttpError::AuthRequired(AuthRequiredError { .. }) => Failure::Http {
            status: 401,
            detail: "authorization required".into(),
        },
        StreamableHttpError::InsufficientScope(InsufficientScopeError { .. }) => Failure::Http {
            status: 403,
            detail: "insufficient scope".into(),
        },
        // Non-success statuses without a JSON-RPC body arrive as "HTTP <status>: <body>";
        // the body is the remote's and is never passed on (an internal error page can
        // hold secrets, and its text would tell a prober what answered).
        StreamableHttpError::UnexpectedServerResponse(text) => match parse_status(text) {
            Some(status) => Failure::Http {
                status,
                detail: String::new(),
            },
            None => Failure::Protocol("the answer is not an MCP message".into()),
        },
        StreamableHttpError::Io(io) => Failure::Unreachable(io.to_string()),
        StreamableHttpError::TransportChannelClosed => Failure::Closed,
        other => Failure::Protocol(truncate(&chain(other))),
    }
}

fn reqwest_failure(error: &reqwest::Error) -> Failure {
    if let Some(denied) = find_nested::<kiln_outbound::OutboundError>(error) {
        return Failure::NotAllowed(denied.to_string());
    }
    if let Some(status) = error.status() {
        return Failure::Http {
            status: status.as_u16(),
            detail: String::new(),
        };
    }
    // The session names the URL itself; reqwest's copy would only repeat it.
    let mut text = chain(error);
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    if is_tls_failure(error) {
        return Failure::Tls(truncate(&text));
    }
    if error.is_connect() || error.is_request() || error.is_body() || error.is_timeout() {
        return Failure::Unreachable(unreachable_class(error, &text));
    }
    Failure::Protocol(truncate(&text))
}

/// What kind of "no exchange" it was, in words a client can act on, from the OS error
/// under the HTTP client's: the transport's own wording adds nothing but noise.
fn unreachable_class(error: &reqwest::Error, text: &str) -> String {
    use std::io::ErrorKind as K;
    let kind = find_nested::<std::io::Error>(error).map(std::io::Error::kind);
    match kind {
        Some(K::ConnectionRefused) => "the MCP server refused the connection".into(),
        Some(K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe) => {
            "the MCP server closed the connection".into()
        }
        Some(K::TimedOut) => "the connection timed out".into(),
        Some(K::HostUnreachable | K::NetworkUnreachable) => {
            "no route to the MCP server's address".into()
        }
        _ if error.is_timeout() => "the connection timed out".into(),
        _ => truncate(text),
    }
}

fn is_tls_failure(error: &reqwest::Error) -> bool {
    find_nested::<rustls::Error>(error).is_some()
}

/// The first `E` in `error`'s chain. rustls and resolver errors reach us wrapped in
/// (nested) `io::Error`s, whose `source()` skips the wrapped error, so look inside each
/// `io::Error` explicitly.
fn find_nested<'a, E: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = current {
        let mut inner = Some(err);
        while let Some(candidate) = inner {
            if let Some(found) = candidate.downcast_ref::<E>() {
                return Some(found);
            }
            inner = candidate
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|wrapped| wrapped as &(dyn StdError + 'static));
        }
        current = err.source();
    }
    None
}

fn status_failure(status: &HttpStatusError) -> Failure {
    Failure::Http {
        status: status.status,
        detail: status
            .retry_after
            .as_deref()
            .map(|after| format!("retry after {after}"))
            .unwrap_or_default(),
    }
}

/// Parses the status out of rmcp's "HTTP 401 Unauthorized: …" messages.
fn parse_status(text: &str) -> Option<u16> {
    let rest = text.strip_prefix("HTTP ")?;
    let code = rest.get(..3)?;
    code.parse().ok().filter(|c| (100..600).contains(c))
}

/// "outer: inner: root cause", skipping repeats (some errors print their source).
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(err) = current {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_DETAIL) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
