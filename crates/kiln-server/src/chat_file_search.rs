//! Chat completions' server-side `file_search` tool (Kiln's extension, in the
//! Responses API's shape): the server searches the named vector stores with the last
//! user message, puts the passages found before it, and the answer's message carries
//! `file_citation` annotations for their files. The model never sees the tool.

use kiln_api::chat::ChatCompletionRequest;
use kiln_http::TransportError;
use kiln_rag::sources::ground_chat;
use kiln_rag::{FileSearchTool, VectorStores};
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::parse;
use crate::lease::Caller;

/// A chat request with its `file_search` tool taken out of `tools`.
pub struct Parsed {
    pub request: ChatCompletionRequest,
    pub file_search: Option<FileSearchTool>,
}

/// Parses a chat request body, taking a `file_search` tool out of `tools` (the other
/// tools are the model's). A `tool_choice` of `none` skips the search.
pub fn parse_request(body: &[u8]) -> Result<Parsed, ApiError> {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        // Not JSON: the typed parse names what is wrong.
        return parse(body).map(|request| Parsed {
            request,
            file_search: None,
        });
    };
    let Some(tools) = v.get_mut("tools").and_then(Value::as_array_mut) else {
        return Ok(Parsed {
            request: parse(body)?,
            file_search: None,
        });
    };
    let mut found = None;
    let mut kept = Vec::with_capacity(tools.len());
    for (i, t) in std::mem::take(tools).into_iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("file_search") {
            kept.push(t);
            continue;
        }
        let at = format!("tools[{i}]");
        if found.is_some() {
            return Err(ApiError::invalid(
                at,
                "give one `file_search` tool (it may name several vector stores)",
            ));
        }
        found = Some(FileSearchTool::parse(&t, &at)?);
    }
    let Some(tool) = found else {
        return Ok(Parsed {
            request: parse(body)?,
            file_search: None,
        });
    };
    let choice = v.get("tool_choice").cloned();
    let skip = choice.as_ref().and_then(Value::as_str) == Some("none");
    let obj = v.as_object_mut().ok_or_else(|| ApiError::InvalidJson {
        message: "expected a JSON object".into(),
    })?;
    if kept.is_empty() {
        obj.remove("tools");
        // With no tool left for the model, a choice among tools means nothing to it.
        obj.remove("tool_choice");
        obj.remove("parallel_tool_calls");
    } else {
        obj.insert("tools".into(), Value::Array(kept));
        if choice
            .as_ref()
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
            == Some("file_search")
        {
            obj.remove("tool_choice");
        }
    }
    let request =
        parse(&serde_json::to_vec(&v).map_err(|e| TransportError::Internal(e.to_string()))?)?;
    Ok(Parsed {
        request,
        file_search: (!skip).then_some(tool),
    })
}

/// Grounds `req` in the stores `tool` names (`kiln_rag::sources::ground_chat`): the
/// `file_citation` annotations for the answer.
pub async fn apply(
    stores: Option<&VectorStores>,
    caller: &Caller,
    tool: &FileSearchTool,
    req: &mut ChatCompletionRequest,
) -> Result<Vec<Value>, ApiError> {
    let stores = stores.ok_or_else(|| {
        ApiError::StoreUnavailable(
            "vector stores need a data directory; start the server with --data-dir".into(),
        )
    })?;
    Ok(ground_chat(stores, caller, tool, req).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_http::ClassifiedError;
    use serde_json::json;

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn the_tool_is_taken_out_and_the_rest_kept() {
        let fs = json!({"type": "file_search", "vector_store_ids": ["vs_1"]});
        let f = json!({"type": "function", "function": {"name": "f"}});
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let p = parse_request(&body(
            json!({"messages": msgs, "tools": [fs, f], "tool_choice": {"type": "file_search"}}),
        ))
        .expect("parsed");
        assert!(p.file_search.is_some());
        assert_eq!(p.request.tools.as_ref().map(Vec::len), Some(1));
        assert!(p.request.tool_choice.is_none());
        let p = parse_request(&body(
            json!({"messages": msgs, "tools": [fs], "tool_choice": "auto"}),
        ))
        .expect("parsed");
        assert!(
            p.file_search.is_some() && p.request.tools.is_none() && p.request.tool_choice.is_none()
        );
        let p = parse_request(&body(
            json!({"messages": msgs, "tools": [fs], "tool_choice": "none"}),
        ))
        .expect("parsed");
        assert!(p.file_search.is_none());
        let p = parse_request(&body(json!({"messages": msgs, "tools": [f]}))).expect("parsed");
        assert!(p.file_search.is_none() && p.request.tools.is_some());
        for (bad, param) in [
            (
                json!({"messages": msgs, "tools": [{"type": "file_search"}]}),
                "tools[0].vector_store_ids",
            ),
            (json!({"messages": msgs, "tools": [fs, fs]}), "tools[1]"),
            (json!({"tools": [fs]}), "messages"),
        ] {
            let e = parse_request(&body(bad.clone()))
                .err()
                .and_then(|e| e.param());
            assert_eq!(e.as_deref(), Some(param), "{bad}");
        }
    }
}
