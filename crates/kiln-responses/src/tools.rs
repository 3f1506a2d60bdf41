//! A request's `tools`, `tool_choice` and `text.format`, checked and mapped to what a
//! chat turn takes.

use kiln_api::responses::{CreateResponse, TextFormat};
use kiln_api::structured::{FunctionDef, JsonSchemaFormat, ResponseFormat, Tool};
use kiln_rag::{FileSearchTool, RagError};
use serde_json::{json, Map, Value};

use crate::error::{ResponsesError, Result};

/// A remote MCP server a response may use.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSpec {
    pub label: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// Tools the model may see; `None`: all the server lists.
    pub allowed: Option<Vec<String>>,
    pub approval: Approval,
}

/// `require_approval`: which calls wait for the client's `mcp_approval_response`.
#[derive(Debug, Clone, PartialEq)]
pub enum Approval {
    Always,
    Never,
    /// Calls of these tools run without approval; the rest wait.
    NeverFor(Vec<String>),
    /// Calls of these tools wait; the rest run.
    AlwaysFor(Vec<String>),
}

impl Approval {
    pub fn needed(&self, tool: &str) -> bool {
        match self {
            Approval::Always => true,
            Approval::Never => false,
            Approval::NeverFor(names) => !names.iter().any(|n| n == tool),
            Approval::AlwaysFor(names) => names.iter().any(|n| n == tool),
        }
    }
}

/// The request's tools, split by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    pub functions: Vec<FunctionDef>,
    pub mcp: Vec<McpSpec>,
    pub file_search: Option<FileSearchTool>,
}

/// Parses `tools`.
pub fn parse(tools: Option<&[Value]>) -> Result<Tools> {
    let mut out = Tools::default();
    for (i, t) in tools.unwrap_or_default().iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => out.functions.push(function(t, &at)?),
            Some("mcp") => {
                let spec = mcp(t, &at)?;
                if out.mcp.iter().any(|m| m.label == spec.label) {
                    return Err(ResponsesError::invalid(
                        format!("{at}.server_label"),
                        format!("two MCP tools are labelled '{}'", spec.label),
                    ));
                }
                out.mcp.push(spec);
            }
            Some("file_search") => {
                if out.file_search.is_some() {
                    return Err(ResponsesError::invalid(
                        at,
                        "give one `file_search` tool (it may name several vector stores)",
                    ));
                }
                out.file_search = Some(file_search(t, &at)?);
            }
            Some(other) => {
                return Err(ResponsesError::invalid(
                    format!("{at}.type"),
                    format!(
                        "unsupported tool type '{other}'; this server runs `function`, `mcp` and \
                         `file_search` tools"
                    ),
                ))
            }
            None => {
                return Err(ResponsesError::invalid(
                    format!("{at}.type"),
                    "a tool needs a `type`: function, mcp or file_search",
                ))
            }
        }
    }
    Ok(out)
}

fn function(t: &Value, at: &str) -> Result<FunctionDef> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ResponsesError::invalid(format!("{at}.name"), "a function tool needs a `name`")
        })?;
    let parameters = match t.get("parameters") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p.clone()),
        Some(_) => {
            return Err(ResponsesError::invalid(
                format!("{at}.parameters"),
                "`parameters` must be a JSON schema object",
            ))
        }
    };
    Ok(FunctionDef {
        name: name.to_string(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        parameters,
        strict: t.get("strict").and_then(Value::as_bool),
    })
}

fn mcp(t: &Value, at: &str) -> Result<McpSpec> {
    let text = |field: &str| {
        t.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                ResponsesError::invalid(
                    format!("{at}.{field}"),
                    format!("an mcp tool needs `{field}`"),
                )
            })
    };
    let label = text("server_label")?;
    let url = text("server_url")?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ResponsesError::invalid(
            format!("{at}.server_url"),
            "`server_url` must be an http:// or https:// URL",
        ));
    }
    let headers = match t.get("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(h)) => h
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(v) => Ok((k.clone(), v.to_string())),
                None => Err(ResponsesError::invalid(
                    format!("{at}.headers.{k}"),
                    "header values must be strings",
                )),
            })
            .collect::<Result<_>>()?,
        Some(_) => {
            return Err(ResponsesError::invalid(
                format!("{at}.headers"),
                "`headers` must be an object of strings",
            ))
        }
    };
    let allowed = match t.get("allowed_tools") {
        None | Some(Value::Null) => None,
        Some(v) => Some(names(v).ok_or_else(|| {
            ResponsesError::invalid(
                format!("{at}.allowed_tools"),
                "`allowed_tools` must be a list of tool names or {\"tool_names\": [...]}",
            )
        })?),
    };
    let approval = approval(t.get("require_approval")).ok_or_else(|| {
        ResponsesError::invalid(
            format!("{at}.require_approval"),
            "`require_approval` must be \"always\", \"never\", or {\"never\": {\"tool_names\": [...]}} / {\"always\": {\"tool_names\": [...]}}",
        )
    })?;
    Ok(McpSpec {
        label,
        url,
        headers,
        allowed,
        approval,
    })
}

fn file_search(t: &Value, at: &str) -> Result<FileSearchTool> {
    FileSearchTool::parse(t, at).map_err(|e| match e {
        RagError::Invalid { param, message } => ResponsesError::invalid(param, message),
        e => ResponsesError::invalid(at, e.to_string()),
    })
}

/// A list of names, or `{"tool_names": [...]}`.
fn names(v: &Value) -> Option<Vec<String>> {
    let list = match v {
        Value::Array(a) => a,
        Value::Object(o) => o.get("tool_names")?.as_array()?,
        _ => return None,
    };
    list.iter()
        .map(|n| n.as_str().map(str::to_string))
        .collect()
}

/// OpenAI's default is `always`.
fn approval(v: Option<&Value>) -> Option<Approval> {
    match v {
        None | Some(Value::Null) => Some(Approval::Always),
        Some(Value::String(s)) if s == "always" => Some(Approval::Always),
        Some(Value::String(s)) if s == "never" => Some(Approval::Never),
        Some(Value::Object(o)) => match (o.get("never"), o.get("always")) {
            (Some(n), None) => Some(Approval::NeverFor(names(n)?)),
            (None, Some(a)) => Some(Approval::AlwaysFor(names(a)?)),
            _ => None,
        },
        _ => None,
    }
}

/// The chat request's `tool_choice` for the Responses API's.
pub fn tool_choice(v: Option<&Value>) -> Result<Option<Value>> {
    let bad = || {
        ResponsesError::invalid(
            "tool_choice",
            "`tool_choice` must be \"none\", \"auto\", \"required\", {\"type\": \"function\", \"name\"}, {\"type\": \"mcp\", \"server_label\", \"name\"?} or {\"type\": \"file_search\"}",
        )
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if matches!(s.as_str(), "none" | "auto" | "required") => {
            Ok(Some(Value::String(s.clone())))
        }
        Some(Value::Object(o)) => match (o.get("type").and_then(Value::as_str), o.get("name")) {
            (Some("function"), Some(Value::String(name))) => Ok(Some(
                json!({"type": "function", "function": {"name": name}}),
            )),
            (Some("mcp"), Some(Value::String(name))) => Ok(Some(
                json!({"type": "function", "function": {"name": name}}),
            )),
            (Some("mcp"), None) => Ok(Some(Value::String("required".into()))),
            // The search runs before the model whenever the tool is given.
            (Some("file_search"), None) => Ok(None),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

/// The chat request's `response_format` for `text.format`.
pub fn response_format(req: &CreateResponse) -> Result<Option<ResponseFormat>> {
    let Some(TextFormat {
        kind,
        name,
        description,
        schema,
        strict,
    }) = req.text.as_ref().and_then(|t| t.format.clone())
    else {
        return Ok(None);
    };
    match kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat {
            kind,
            json_schema: None,
        })),
        "json_schema" => {
            let Some(schema @ Value::Object(_)) = schema else {
                return Err(ResponsesError::invalid(
                    "text.format.schema",
                    "a `json_schema` format needs a `schema` object",
                ));
            };
            Ok(Some(ResponseFormat {
                kind,
                json_schema: Some(JsonSchemaFormat {
                    name: name.unwrap_or_else(|| "response".into()),
                    description,
                    schema: Some(schema),
                    strict,
                }),
            }))
        }
        other => Err(ResponsesError::invalid(
            "text.format.type",
            format!("unsupported format '{other}'; expected text, json_object or json_schema"),
        )),
    }
}

/// A chat tool for `def`.
pub fn chat_tool(def: FunctionDef) -> Tool {
    Tool {
        kind: "function".into(),
        function: def,
    }
}

/// `tools` as echoed in a response: MCP headers (credentials) removed.
pub fn echoed(tools: Option<&[Value]>) -> Vec<Value> {
    tools
        .unwrap_or_default()
        .iter()
        .map(|t| match t {
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("mcp") => {
                let mut o: Map<String, Value> = o.clone();
                o.remove("headers");
                Value::Object(o)
            }
            t => t.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_parse_and_bad_ones_name_their_field() {
        let t = parse(Some(&[
            json!({"type": "function", "name": "f", "parameters": {"type": "object"}}),
            json!({"type": "mcp", "server_label": "s", "server_url": "http://x/mcp",
                   "headers": {"Authorization": "Bearer k"}, "require_approval": "never"}),
        ]))
        .expect("tools");
        assert_eq!(t.functions[0].name, "f");
        assert_eq!(t.mcp[0].approval, Approval::Never);
        let t = parse(Some(&[
            json!({"type": "file_search", "vector_store_ids": ["vs_1"],
            "max_num_results": 3, "filters": {"type": "eq", "key": "a", "value": 1}}),
        ]))
        .expect("file_search");
        let fs = t.file_search.expect("file_search");
        assert_eq!((fs.store_ids.len(), fs.search.max_results), (1, 3));
        let e = parse(Some(&[json!({"type": "file_search"})])).expect_err("no stores");
        assert!(
            matches!(e, ResponsesError::Invalid { ref param, .. } if param == "tools[0].vector_store_ids")
        );
        let e = parse(Some(&[json!({"type": "web_search"})])).expect_err("type");
        assert!(matches!(e, ResponsesError::Invalid { ref param, .. } if param == "tools[0].type"));
        let e = parse(Some(&[
            json!({"type": "mcp", "server_label": "s", "server_url": "ftp://x"}),
        ]))
        .expect_err("url");
        assert!(
            matches!(e, ResponsesError::Invalid { ref param, .. } if param == "tools[0].server_url")
        );
        let echoed = echoed(Some(&[json!({"type": "mcp", "headers": {"a": "b"}})]));
        assert!(echoed[0].get("headers").is_none());
    }

    #[test]
    fn approval_rules() {
        assert!(approval(None).expect("default").needed("x"));
        let a = approval(Some(&json!({"never": {"tool_names": ["safe"]}}))).expect("never for");
        assert!(!a.needed("safe") && a.needed("other"));
        assert!(approval(Some(&json!("sometimes"))).is_none());
    }
}
