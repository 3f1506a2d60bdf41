//! A response's MCP servers: connected and listed once per response, called by name.

use kiln_api::responses::{Item, McpToolInfo};
use kiln_api::structured::{FunctionDef, Tool};
use kiln_mcp::{CallResult, McpError, McpServer, McpSession, McpSettings, McpTool};
use serde_json::Value;

use crate::ids::new_id;
use crate::tools::{chat_tool, McpSpec};

/// The connected servers and the tools the model may call on them.
#[derive(Default)]
pub struct McpTools {
    servers: Vec<(McpSpec, McpSession)>,
    /// (server index, tool), in listing order.
    tools: Vec<(usize, McpTool)>,
}

/// A server that could not be listed: the `mcp_list_tools` item (with its error) and
/// the message for the failed response.
pub struct ListFailure {
    pub item: Item,
    pub message: String,
    /// `mcp_server_not_allowed` when the outbound policy refused the server's address,
    /// else `mcp_server_unreachable`.
    pub code: &'static str,
}

impl McpTools {
    /// Connects to every server in `specs` and lists its tools (filtered by
    /// `allowed_tools`): one `mcp_list_tools` item per server.
    pub async fn connect(
        specs: &[McpSpec],
        settings: &McpSettings,
    ) -> Result<(Self, Vec<Item>), (Vec<Item>, ListFailure)> {
        let mut out = Self::default();
        let mut items = Vec::new();
        for spec in specs {
            let server = McpServer {
                label: spec.label.clone(),
                url: spec.url.clone(),
                headers: spec.headers.clone(),
            };
            let listed = match McpSession::connect(&server, settings).await {
                Ok(session) => match session.list_tools().await {
                    Ok(tools) => Ok((session, tools)),
                    Err(e) => {
                        session.close().await;
                        Err(e)
                    }
                },
                Err(e) => Err(e),
            };
            let (session, tools) = match listed {
                Ok(ok) => ok,
                Err(e) => {
                    let code = match e {
                        McpError::NotAllowed { .. } => "mcp_server_not_allowed",
                        _ => "mcp_server_unreachable",
                    };
                    let message = e.to_string();
                    let item = Item::McpListTools {
                        id: new_id("mcpl"),
                        server_label: spec.label.clone(),
                        tools: Vec::new(),
                        error: Some(message.clone()),
                    };
                    out.close().await;
                    return Err((
                        items,
                        ListFailure {
                            item,
                            message,
                            code,
                        },
                    ));
                }
            };
            let tools: Vec<McpTool> = tools
                .into_iter()
                .filter(|t| spec.allowed.as_ref().is_none_or(|a| a.contains(&t.name)))
                .collect();
            items.push(Item::McpListTools {
                id: new_id("mcpl"),
                server_label: spec.label.clone(),
                tools: tools.iter().map(info).collect(),
                error: None,
            });
            let server = out.servers.len();
            out.tools.extend(tools.into_iter().map(|t| (server, t)));
            out.servers.push((spec.clone(), session));
        }
        Ok((out, items))
    }

    /// The server spec of MCP tool `name`, if the model may call one by that name.
    pub fn find(&self, name: &str) -> Option<&McpSpec> {
        self.tools
            .iter()
            .find(|(_, t)| t.name == name)
            .map(|(s, _)| &self.servers[*s].0)
    }

    /// The server spec labelled `label`.
    pub fn server(&self, label: &str) -> Option<&McpSpec> {
        self.servers
            .iter()
            .map(|(s, _)| s)
            .find(|s| s.label == label)
    }

    /// The tools as chat tools.
    pub fn chat_tools(&self) -> Vec<Tool> {
        self.tools
            .iter()
            .map(|(_, t)| {
                chat_tool(FunctionDef {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: Some(t.input_schema.clone()),
                    strict: None,
                })
            })
            .collect()
    }

    /// Calls `name` on server `label` with `arguments` (JSON text): its output, or the
    /// error to record on the `mcp_call` item.
    pub async fn call(&self, label: &str, name: &str, arguments: &str) -> Result<String, String> {
        let Some((_, session)) = self.servers.iter().find(|(s, _)| s.label == label) else {
            return Err(format!(
                "no MCP server labelled '{label}' in this request's tools"
            ));
        };
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("the call's arguments are not a JSON object".into()),
            Err(e) => return Err(format!("the call's arguments are not valid JSON: {e}")),
        };
        match session.call_tool(name, args).await {
            Ok(CallResult::Output(text)) => Ok(text),
            Ok(CallResult::ToolError(text)) => Err(text),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Ends every session.
    pub async fn close(self) {
        for (_, session) in self.servers {
            session.close().await;
        }
    }
}

fn info(t: &McpTool) -> McpToolInfo {
    McpToolInfo {
        name: t.name.clone(),
        description: t.description.clone(),
        input_schema: t.input_schema.clone(),
        annotations: t.annotations.clone(),
    }
}
