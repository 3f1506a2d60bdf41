//! Running one response: list the MCP servers' tools, run approved calls, then model
//! rounds, executing MCP calls between them, until the model answers, calls a client
//! function, waits for an approval, or a bound is reached.
//!
//! Nothing is streamed until the first model round has started, so a request the model
//! refuses (unknown model, bad sampling field, full queue) is an error the caller can
//! answer with a status code, not a failed stream.

use kiln_api::chat::ChatCompletionRequest;
use kiln_api::responses::{
    IncompleteDetails, InputTokensDetails, Item, OutputTokensDetails, Response, ResponseError,
    ResponseUsage, StreamEvent,
};
use kiln_api::structured::ResponseFormat;
use kiln_api::Caller;
use kiln_mcp::McpSettings;
use serde_json::{json, Value};

use crate::cancel::Cancel;
use crate::chat::{ChatRunner, ChatTurn, GenError, TurnUsage};
use crate::conversation;
use crate::error::{ResponsesError, Result};
use crate::events::Emitter;
use crate::file_search::{self, Sources};
use crate::ids::new_id;
use crate::mcp_tools::McpTools;
use crate::round::{self, RoundEnd};
use crate::tools::{chat_tool, Tools};

/// A checked request, ready to run.
pub struct Turn {
    pub caller: Caller,
    /// The response as it starts: id, echoed fields, `in_progress`.
    pub response: Response,
    /// The stored conversation before this request, oldest first.
    pub history: Vec<Item>,
    pub input: Vec<Item>,
    pub tools: Tools,
    pub tool_choice: Option<Value>,
    pub format: Option<ResponseFormat>,
    /// Whether `file_search_call` items carry their results (`include`).
    pub search_results: bool,
}

/// What running a turn needs besides the turn.
pub struct RunContext<'a> {
    pub chat: &'a dyn ChatRunner,
    pub mcp: &'a McpSettings,
    /// Most MCP calls executed in one response (`max_tool_calls` may lower it).
    pub max_tool_calls: u32,
}

/// Runs `turn` to its end: the final response (completed, incomplete, failed or
/// cancelled). `Err` only when the first model round could not start.
pub async fn run(
    turn: &Turn,
    ctx: &RunContext<'_>,
    em: &mut Emitter,
    cancel: &Cancel,
) -> Result<Response> {
    let mut response = turn.response.clone();
    let (mcp, mut output) = match McpTools::connect(&turn.tools.mcp, ctx.mcp).await {
        Ok(ok) => ok,
        Err((mut items, failure)) => {
            items.push(failure.item);
            announce(&mut response, em, &items).await;
            response.output = items;
            return Ok(failed(response, failure.code, &failure.message));
        }
    };
    let mut calls_left = turn
        .response
        .max_tool_calls
        .unwrap_or(ctx.max_tool_calls)
        .min(ctx.max_tool_calls);
    approved_calls(turn, &mcp, &mut output).await;
    let sources = match file_search::run(turn, ctx.chat, &mut output).await {
        Ok(s) => s,
        Err(e) => {
            mcp.close().await;
            return Err(ResponsesError::Generate(e));
        }
    };
    let rounds = Rounds {
        turn,
        ctx,
        mcp: &mcp,
        sources: sources.as_ref(),
    };
    let annotations = sources.as_ref().map(Sources::citations).unwrap_or_default();
    let mut usage = TurnUsage::default();
    let first = match rounds.start(&output, usage, calls_left > 0, true).await {
        Ok(t) => t,
        Err(e) => {
            mcp.close().await;
            return Err(ResponsesError::Generate(e));
        }
    };
    response.model = first.model.clone();
    announce(&mut response, em, &output).await;
    let mut chat = first;
    let end = loop {
        let r = round::stream(
            chat,
            &turn.tools,
            &mcp,
            &annotations,
            &mut output,
            em,
            cancel,
        )
        .await;
        usage.add(r.usage);
        match r.end {
            RoundEnd::Finished { length: true } => break End::Incomplete("max_output_tokens"),
            RoundEnd::Finished { .. } if r.mcp_calls.is_empty() || r.client_calls => {
                break End::Completed
            }
            RoundEnd::Finished { .. } => {}
            RoundEnd::Failed(e) => break End::Failed(e),
            RoundEnd::Cancelled => break End::Cancelled,
        }
        for at in r.mcp_calls {
            if calls_left == 0 {
                skip(&mut output, at, em).await;
                continue;
            }
            calls_left -= 1;
            execute(&mcp, &mut output, at, em).await;
        }
        if cancel.is_cancelled() || em.gone() {
            break End::Cancelled;
        }
        // With the call budget spent, the model answers without MCP tools.
        chat = match rounds.start(&output, usage, calls_left > 0, false).await {
            Ok(t) => t,
            Err(e) => break End::Failed(e),
        };
    };
    mcp.close().await;
    response.output = output;
    response.usage = Some(api_usage(usage));
    Ok(match end {
        End::Completed => {
            response.status = "completed".into();
            response
        }
        End::Incomplete(reason) => {
            response.status = "incomplete".into();
            response.incomplete_details = Some(IncompleteDetails {
                reason: reason.into(),
            });
            response
        }
        End::Failed(e) => failed(response, &e.code, &e.message),
        End::Cancelled => {
            response.status = "cancelled".into();
            response
        }
    })
}

/// The terminal event of a finished response, numbered but not yet delivered: it is
/// stored with the response first, so a client that reads it can fetch the response at
/// once. A cancelled response has none.
pub fn terminal(em: &mut Emitter, response: &Response) -> Option<StreamEvent> {
    let kind = match response.status.as_str() {
        "completed" => "response.completed",
        "incomplete" => "response.incomplete",
        "failed" => "response.failed",
        _ => return None,
    };
    em.number(kind, json!({ "response": response }))
}

enum End {
    Completed,
    Incomplete(&'static str),
    Failed(GenError),
    Cancelled,
}

/// `response.created` and `response.in_progress`, then `items` as added and done.
async fn announce(response: &mut Response, em: &mut Emitter, items: &[Item]) {
    response.status = "in_progress".into();
    em.response("response.created", response).await;
    em.response("response.in_progress", response).await;
    for (i, item) in items.iter().enumerate() {
        em.item_added(i, item).await;
        if let Item::FileSearchCall { id, .. } = item {
            for stage in ["in_progress", "searching", "completed"] {
                em.emit(
                    &format!("response.file_search_call.{stage}"),
                    json!({"item_id": id, "output_index": i}),
                )
                .await;
            }
        }
        em.item_done(i, item).await;
    }
}

/// `response` as failed with `code` and `message`.
pub fn failed(mut response: Response, code: &str, message: &str) -> Response {
    response.status = "failed".into();
    response.error = Some(ResponseError {
        code: code.into(),
        message: message.into(),
    });
    response
}

/// What every model round of a turn starts from.
struct Rounds<'a> {
    turn: &'a Turn,
    ctx: &'a RunContext<'a>,
    mcp: &'a McpTools,
    /// What `file_search` found, put before the question.
    sources: Option<&'a Sources>,
}

impl Rounds<'_> {
    /// Starts a model round over the conversation so far.
    async fn start(
        &self,
        output: &[Item],
        used: TurnUsage,
        offer_mcp: bool,
        first: bool,
    ) -> std::result::Result<ChatTurn, GenError> {
        let (turn, r) = (self.turn, &self.turn.response);
        let mut messages = conversation::messages(
            r.instructions.as_deref(),
            turn.history.iter().chain(&turn.input).chain(output),
        );
        if let Some(s) = self.sources {
            s.insert(&mut messages);
        }
        let mut tools: Vec<_> = turn
            .tools
            .functions
            .iter()
            .cloned()
            .map(chat_tool)
            .collect();
        if offer_mcp {
            tools.extend(self.mcp.chat_tools().into_iter().filter(|t| {
                !turn
                    .tools
                    .functions
                    .iter()
                    .any(|f| f.name == t.function.name)
            }));
        }
        let max_tokens = r.max_output_tokens.map(|m| {
            m.saturating_sub(u32::try_from(used.completion).unwrap_or(u32::MAX))
                .max(1)
        });
        let request = ChatCompletionRequest {
            model: Some(r.model.clone()),
            messages,
            // After a tool round the model answers freely: a forced choice would loop.
            tool_choice: if first && !tools.is_empty() {
                turn.tool_choice.clone()
            } else {
                None
            },
            parallel_tool_calls: Some(r.parallel_tool_calls),
            tools: (!tools.is_empty()).then_some(tools),
            response_format: turn.format.clone(),
            max_completion_tokens: max_tokens,
            temperature: r.temperature,
            top_p: r.top_p,
            user: r.user.clone(),
            ..ChatCompletionRequest::default()
        };
        self.ctx.chat.start(&turn.caller, request).await
    }
}

/// `mcp_call` items for the approvals in this request's input.
async fn approved_calls(turn: &Turn, mcp: &McpTools, output: &mut Vec<Item>) {
    for item in &turn.input {
        let Item::McpApprovalResponse {
            approval_request_id,
            approve,
            ..
        } = item
        else {
            continue;
        };
        let asked = turn.history.iter().find_map(|h| match h {
            Item::McpApprovalRequest {
                id,
                server_label,
                name,
                arguments,
            } if id == approval_request_id => Some((server_label, name, arguments)),
            _ => None,
        });
        let Some((label, name, arguments)) = asked else {
            continue;
        };
        let (out, error) = if !approve {
            (None, Some("the call was not approved".to_string()))
        } else if mcp.server(label).is_none() {
            (
                None,
                Some(format!(
                    "approved, but this request has no MCP tool labelled '{label}'"
                )),
            )
        } else {
            match mcp.call(label, name, arguments).await {
                Ok(o) => (Some(o), None),
                Err(e) => (None, Some(e)),
            }
        };
        output.push(Item::McpCall {
            id: new_id("mcp"),
            server_label: label.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
            output: out,
            error,
            approval_request_id: Some(approval_request_id.clone()),
        });
    }
}

/// Records that the `mcp_call` at `at` was not run (the response's call budget is spent).
async fn skip(output: &mut [Item], at: usize, em: &mut Emitter) {
    if let Item::McpCall { error, .. } = &mut output[at] {
        *error = Some("not run: the response reached max_tool_calls".into());
    }
    em.emit(
        "response.mcp_call.failed",
        json!({"item_id": output[at].id(), "output_index": at}),
    )
    .await;
    em.item_done(at, &output[at]).await;
}

/// Runs the `mcp_call` at `at` and records its output or error.
async fn execute(mcp: &McpTools, output: &mut [Item], at: usize, em: &mut Emitter) {
    let Item::McpCall {
        server_label,
        name,
        arguments,
        ..
    } = &output[at]
    else {
        return;
    };
    let result = mcp.call(server_label, name, arguments).await;
    let ok = result.is_ok();
    if let Item::McpCall { output, error, .. } = &mut output[at] {
        match result {
            Ok(o) => *output = Some(o),
            Err(e) => *error = Some(e),
        }
    }
    let kind = if ok {
        "response.mcp_call.completed"
    } else {
        "response.mcp_call.failed"
    };
    em.emit(
        kind,
        json!({"item_id": output[at].id(), "output_index": at}),
    )
    .await;
    em.item_done(at, &output[at]).await;
}

fn api_usage(u: TurnUsage) -> ResponseUsage {
    ResponseUsage {
        input_tokens: u.prompt,
        input_tokens_details: InputTokensDetails {
            cached_tokens: u.cached,
        },
        output_tokens: u.completion,
        output_tokens_details: OutputTokensDetails::default(),
        total_tokens: u.prompt + u.completion,
    }
}
