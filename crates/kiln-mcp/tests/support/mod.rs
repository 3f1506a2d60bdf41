//! In-process MCP servers for the integration tests, built with rmcp's server side
//! and served over real streamable HTTP on 127.0.0.1.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    extract::{Request, State},
    http::StatusCode,
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use rmcp::{
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
        ServerConfig,
    },
    schemars,
    service::{RequestContext, RoleServer},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    ErrorData, ServerHandler,
};
use tokio_util::sync::CancellationToken;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    text: String,
}

#[derive(Clone)]
pub struct TestTools {
    tool_router: ToolRouter<Self>,
    /// Serve `tools/list` one tool per page, to exercise cursors.
    paginate: bool,
}

#[tool_router]
impl TestTools {
    #[tool(description = "Add two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Return the text unchanged")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "boom: the tool failed",
        )]))
    }

    #[tool(description = "Sleeps for five seconds")]
    async fn slow(&self) -> String {
        tokio::time::sleep(Duration::from_secs(5)).await;
        "done".to_owned()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self.tool_router.list_all();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        if !self.paginate {
            return Ok(ListToolsResult::with_all_items(tools));
        }
        let index: usize = request
            .and_then(|r| r.cursor)
            .map(|c| {
                c.parse()
                    .map_err(|_| ErrorData::invalid_params("bad cursor", None))
            })
            .transpose()?
            .unwrap_or(0);
        let mut page =
            ListToolsResult::with_all_items(tools.get(index).cloned().into_iter().collect());
        if index + 1 < tools.len() {
            page.next_cursor = Some((index + 1).to_string());
        }
        Ok(page)
    }
}

/// How the HTTP layer in front of the MCP service behaves.
#[derive(Clone, Default)]
pub struct Options {
    /// Required `Authorization` value; other requests get 401.
    pub bearer: Option<&'static str>,
    /// Answer this many first requests with 503 before serving normally.
    pub fail_first: usize,
    pub paginate: bool,
}

/// Counts what the HTTP layer saw.
#[derive(Default)]
pub struct Counters {
    pub requests: AtomicUsize,
    pub rejected: AtomicUsize,
}

pub struct TestServer {
    pub url: String,
    pub counters: Arc<Counters>,
    ct: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

#[derive(Clone)]
struct Gate {
    options: Options,
    counters: Arc<Counters>,
}

async fn gate(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let seen = gate.counters.requests.fetch_add(1, Ordering::SeqCst);
    if seen < gate.options.fail_first {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if let Some(token) = gate.options.bearer {
        let expected = format!("Bearer {token}");
        let got = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if got != Some(expected.as_str()) {
            gate.counters.rejected.fetch_add(1, Ordering::SeqCst);
            return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response();
        }
    }
    next.run(request).await
}

pub async fn start(options: Options) -> TestServer {
    let ct = CancellationToken::new();
    let paginate = options.paginate;
    let service: StreamableHttpService<TestTools, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(TestTools {
                tool_router: TestTools::tool_router(),
                paginate,
            })
        },
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_cancellation_token(ct.child_token()),
    );
    let counters = Arc::new(Counters::default());
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(middleware::from_fn_with_state(
                Gate {
                    options,
                    counters: counters.clone(),
                },
                gate,
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let shutdown = ct.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
            .await;
    });
    TestServer {
        url: format!("http://{addr}/mcp"),
        counters,
        ct,
    }
}

/// A port with nothing listening on it.
pub async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// Accepts TCP connections and never writes a byte. Returns the address and a
/// counter of accepted connections.
pub async fn silent_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted)
}
