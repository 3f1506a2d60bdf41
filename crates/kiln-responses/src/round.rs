//! One model round of a response: the chat turn's events → output items and their
//! streamed events.
//!
//! Text becomes one assistant message per round (leading whitespace before a tool call
//! is dropped); each call becomes a `function_call` (the client runs it), an `mcp_call`
//! (run here after the round) or an `mcp_approval_request` (waits for the client).

use std::collections::HashMap;
use std::time::Duration;

use kiln_api::responses::{ContentPart, Item};
use serde_json::{json, Value};

use crate::cancel::Cancel;
use crate::chat::{ChatTurn, GenError, TurnEvent, TurnUsage};
use crate::events::Emitter;
use crate::ids::new_id;
use crate::mcp_tools::McpTools;
use crate::tools::Tools;

/// Longest wait for a stopped generation's metered usage (it comes at once unless the
/// engine is wedged; then the round's own count stands).
const USAGE_WAIT: Duration = Duration::from_secs(10);

/// How a round ended.
pub enum RoundEnd {
    /// The model stopped; `length` when the token limit cut it.
    Finished {
        length: bool,
    },
    Failed(GenError),
    /// Cancelled, or the streaming client went away.
    Cancelled,
}

/// What a round left to do.
pub struct RoundResult {
    pub end: RoundEnd,
    pub usage: TurnUsage,
    /// Output indexes of `mcp_call` items to execute.
    pub mcp_calls: Vec<usize>,
    /// Whether the client has calls to run or approvals to give.
    pub client_calls: bool,
}

struct Message {
    index: usize,
    text: String,
}

/// Streams `turn` into `output`; its message carries `annotations` (the files a
/// search found).
pub async fn stream(
    turn: ChatTurn,
    tools: &Tools,
    mcp: &McpTools,
    annotations: &[Value],
    output: &mut Vec<Item>,
    em: &mut Emitter,
    cancel: &Cancel,
) -> RoundResult {
    let ChatTurn {
        mut events, usage, ..
    } = turn;
    let mut message: Option<Message> = None;
    let mut pending_space = String::new();
    let mut calls: HashMap<usize, usize> = HashMap::new();
    let mut result = RoundResult {
        end: RoundEnd::Cancelled,
        usage: TurnUsage::default(),
        mcp_calls: Vec::new(),
        client_calls: false,
    };
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            () = cancel.cancelled() => break,
        };
        if em.gone() {
            break;
        }
        let Some(ev) = ev else {
            result.end = RoundEnd::Failed(GenError::new(
                "server_error",
                "the model stopped without finishing the response",
            ));
            break;
        };
        match ev {
            TurnEvent::Text(text) => {
                if message.is_none() {
                    pending_space.push_str(&text);
                    if pending_space.trim().is_empty() {
                        continue;
                    }
                    message = Some(open_message(output, em).await);
                }
                let Some(m) = message.as_mut() else { continue };
                let delta = if m.text.is_empty() {
                    std::mem::take(&mut pending_space).trim_start().to_string()
                } else {
                    text
                };
                m.text.push_str(&delta);
                let item_id = output[m.index].id().to_string();
                em.emit(
                    "response.output_text.delta",
                    json!({"item_id": item_id, "output_index": m.index, "content_index": 0,
                           "delta": delta, "logprobs": []}),
                )
                .await;
            }
            TurnEvent::CallStart { index, name } => {
                let item = call_item(&name, tools, mcp);
                if matches!(
                    item,
                    Item::FunctionCall { .. } | Item::McpApprovalRequest { .. }
                ) {
                    result.client_calls = true;
                }
                let at = output.len();
                calls.insert(index, at);
                em.item_added(at, &item).await;
                if matches!(item, Item::McpCall { .. }) {
                    em.emit(
                        "response.mcp_call.in_progress",
                        json!({"item_id": item.id(), "output_index": at}),
                    )
                    .await;
                    result.mcp_calls.push(at);
                }
                output.push(item);
            }
            TurnEvent::CallArguments { index, fragment } => {
                let Some(&at) = calls.get(&index) else {
                    continue;
                };
                let kind = match &mut output[at] {
                    Item::FunctionCall { arguments, .. } => {
                        arguments.push_str(&fragment);
                        "response.function_call_arguments.delta"
                    }
                    Item::McpCall { arguments, .. } => {
                        arguments.push_str(&fragment);
                        "response.mcp_call_arguments.delta"
                    }
                    Item::McpApprovalRequest { arguments, .. } => {
                        arguments.push_str(&fragment);
                        continue;
                    }
                    _ => continue,
                };
                let item_id = output[at].id().to_string();
                em.emit(
                    kind,
                    json!({"item_id": item_id, "output_index": at, "delta": fragment}),
                )
                .await;
            }
            TurnEvent::Finished(finish) => {
                result.usage = finish.usage;
                result.end = RoundEnd::Finished {
                    length: finish.length,
                };
                break;
            }
            TurnEvent::Failed(e) => {
                result.end = RoundEnd::Failed(e);
                break;
            }
        }
    }
    // Stop the generation (if it still runs) and take its metered usage, which counts
    // what a cut or failed round consumed too.
    drop(events);
    if let Ok(Ok(metered)) = tokio::time::timeout(USAGE_WAIT, usage).await {
        result.usage = metered;
    }
    let finished = matches!(result.end, RoundEnd::Finished { .. });
    // Close what the round opened, whatever ended it, so every item is whole; a cut
    // message is `incomplete`.
    if let Some(m) = message {
        close_message(output, m, annotations, finished, em).await;
    }
    let mut opened: Vec<usize> = calls.into_values().collect();
    opened.sort_unstable();
    for at in opened {
        close_call(output, at, finished, em).await;
    }
    if !finished {
        result.mcp_calls.clear();
    }
    result
}

fn call_item(name: &str, tools: &Tools, mcp: &McpTools) -> Item {
    let is_function = tools.functions.iter().any(|f| f.name == name);
    match mcp.find(name).filter(|_| !is_function) {
        Some(server) if server.approval.needed(name) => Item::McpApprovalRequest {
            id: new_id("mcpr"),
            server_label: server.label.clone(),
            name: name.to_string(),
            arguments: String::new(),
        },
        Some(server) => Item::McpCall {
            id: new_id("mcp"),
            server_label: server.label.clone(),
            name: name.to_string(),
            arguments: String::new(),
            output: None,
            error: None,
            approval_request_id: None,
        },
        None => Item::FunctionCall {
            id: new_id("fc"),
            call_id: new_id("call"),
            name: name.to_string(),
            arguments: String::new(),
            status: Some("in_progress".into()),
        },
    }
}

async fn open_message(output: &mut Vec<Item>, em: &mut Emitter) -> Message {
    let item = Item::Message {
        id: new_id("msg"),
        role: "assistant".into(),
        content: Vec::new(),
        status: Some("in_progress".into()),
    };
    let index = output.len();
    em.item_added(index, &item).await;
    em.emit(
        "response.content_part.added",
        json!({"item_id": item.id(), "output_index": index, "content_index": 0,
               "part": {"type": "output_text", "text": "", "annotations": []}}),
    )
    .await;
    output.push(item);
    Message {
        index,
        text: String::new(),
    }
}

async fn close_message(
    output: &mut [Item],
    m: Message,
    annotations: &[Value],
    finished: bool,
    em: &mut Emitter,
) {
    // Citations point at the end of the answer.
    let end = m.text.chars().count();
    let annotations: Vec<Value> = annotations
        .iter()
        .cloned()
        .map(|mut a| {
            a["index"] = json!(end);
            a
        })
        .collect();
    let part = ContentPart::OutputText {
        text: m.text.clone(),
        annotations: annotations.clone(),
    };
    if let Item::Message {
        content, status, ..
    } = &mut output[m.index]
    {
        *content = vec![part.clone()];
        *status = Some(if finished { "completed" } else { "incomplete" }.into());
    }
    let item = &output[m.index];
    em.emit(
        "response.output_text.done",
        json!({"item_id": item.id(), "output_index": m.index, "content_index": 0,
               "text": m.text, "logprobs": []}),
    )
    .await;
    for (i, a) in annotations.into_iter().enumerate() {
        em.emit(
            "response.output_text.annotation.added",
            json!({"item_id": item.id(), "output_index": m.index, "content_index": 0,
                   "annotation_index": i, "annotation": a}),
        )
        .await;
    }
    em.emit(
        "response.content_part.done",
        json!({"item_id": item.id(), "output_index": m.index, "content_index": 0, "part": part}),
    )
    .await;
    em.item_done(m.index, item).await;
}

/// Ends a call's argument stream; an `mcp_call` is done only once it has run, or now
/// (with an error) when the round did not finish.
async fn close_call(output: &mut [Item], at: usize, finished: bool, em: &mut Emitter) {
    match &mut output[at] {
        Item::FunctionCall {
            id,
            arguments,
            status,
            ..
        } => {
            *status = Some("completed".into());
            let (id, arguments) = (id.clone(), arguments.clone());
            em.emit(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": at, "arguments": arguments}),
            )
            .await;
            em.item_done(at, &output[at]).await;
        }
        Item::McpCall {
            id,
            arguments,
            error,
            ..
        } => {
            let (id, arguments) = (id.clone(), arguments.clone());
            em.emit(
                "response.mcp_call_arguments.done",
                json!({"item_id": id, "output_index": at, "arguments": arguments}),
            )
            .await;
            if !finished {
                *error = Some("not run: the response ended before the call was complete".into());
                em.emit(
                    "response.mcp_call.failed",
                    json!({"item_id": id, "output_index": at}),
                )
                .await;
                em.item_done(at, &output[at]).await;
            }
        }
        item @ Item::McpApprovalRequest { .. } => em.item_done(at, item).await,
        _ => {}
    }
}
