//! `POST /v1/chat/completions`: the body mapped to the generator's typed request, and
//! its events to OpenAI's JSON or SSE chunks.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::chat::{
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChunkChoice, Delta,
};
use kiln_api::Usage;
use kiln_generate::output::logprobs;
use kiln_generate::output::tool_calls::{self, Piece, ToolStream};
use kiln_generate::{
    Call, ChatRequest, ChatStream, ChoiceEvent, FinishReason, Generator, TextEvent, Tokenizer,
};
use kiln_rag::VectorStores;

use super::{collect, finish_reason};
use crate::chat_file_search::{self, Parsed};
use crate::error::ApiError;
use crate::extract::ApiBody;
use crate::lease::CallContext;
use crate::middleware::RequestId;
use crate::state::AppState;
use crate::stream::{sse, to_json, ChunkFormat};
use kiln_db::unix_now;

pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    respond(state.generator(), state.stores(), &rid, &ctx.call(), &body).await
}

/// Answers a chat completions body for `call`: the route's work, shared with batch lines.
pub async fn respond(
    generator: &Generator,
    stores: Option<&VectorStores>,
    rid: &RequestId,
    call: &Call,
    body: &[u8],
) -> Result<Response, ApiError> {
    let Parsed {
        request: mut req,
        file_search,
    } = chat_file_search::parse_request(body)?;
    let annotations = match &file_search {
        Some(tool) => Some(chat_file_search::apply(stores, &call.caller, tool, &mut req).await?),
        None => None,
    };
    let ChatStream {
        generation: gen,
        hosted,
        tokenizer,
        tools: parse_tools,
        logprobs,
    } = generator.chat(ChatRequest::from_openai(&req), call).await?;
    let head = Head {
        id: format!("chatcmpl-{}", rid.0),
        created: unix_now(),
        model: hosted.name.clone(),
        fingerprint: hosted.fingerprint(),
    };
    let want_logprobs = logprobs.is_some();
    if req.stream.unwrap_or(false) {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let fmt = ChatFormat {
            n_choices: gen.num_choices(),
            head,
            include_usage,
            logprobs: want_logprobs,
            tokenizer,
            tools: parse_tools
                .map(|f| (0..gen.num_choices()).map(|_| ToolStream::new(f)).collect()),
            annotations,
        };
        return Ok(sse(gen, fmt, generator.cutoff(), tracing::Span::current()));
    }
    let (outs, usage) = collect(generator, gen).await?;
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let (content, tool_calls) = match parse_tools {
                Some(f) => tool_calls::complete(f, &c.text),
                None => (Some(c.text), None),
            };
            ChatChoice {
                index: i as u32,
                logprobs: want_logprobs
                    .then(|| logprobs::chat(&tokenizer, &c.token_ids, &c.logprobs)),
                finish_reason: chat_finish_reason(c.finish, tool_calls.is_some()),
                message: AssistantMessage {
                    role: "assistant".into(),
                    content,
                    refusal: None,
                    tool_calls,
                    annotations: annotations.clone(),
                },
            }
        })
        .collect();
    Ok(Json(ChatCompletion {
        id: head.id,
        object: "chat.completion".into(),
        created: head.created,
        model: head.model,
        system_fingerprint: head.fingerprint,
        choices,
        usage,
    })
    .into_response())
}

/// What every chunk of one response repeats.
pub struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

struct ChatFormat {
    head: Head,
    n_choices: usize,
    include_usage: bool,
    logprobs: bool,
    tokenizer: Arc<Tokenizer>,
    /// Per choice, when the output is parsed for tool calls.
    tools: Option<Vec<ToolStream>>,
    /// What a server-side `file_search` cites, sent on each choice's first chunk.
    annotations: Option<Vec<serde_json::Value>>,
}

impl ChatFormat {
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> String {
        to_json(&ChatCompletionChunk {
            id: self.head.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.head.created,
            model: self.head.model.clone(),
            system_fingerprint: self.head.fingerprint.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        })
    }
}

impl ChatFormat {
    /// One chunk per piece; logprobs ride on the first (or an empty delta of their own).
    fn pieces(
        &self,
        index: usize,
        pieces: Vec<Piece>,
        mut lp: Option<kiln_api::chat::ChatLogprobs>,
        out: &mut Vec<String>,
    ) {
        if pieces.is_empty() && lp.is_some() {
            let delta = Delta {
                content: Some(String::new()),
                ..Delta::default()
            };
            out.push(self.chunk(vec![choice(index, delta, lp.take(), None)], None));
        }
        for p in pieces {
            let delta = match p {
                Piece::Content(text) => Delta {
                    content: Some(text),
                    ..Delta::default()
                },
                Piece::Call(call) => Delta {
                    tool_calls: Some(vec![call]),
                    ..Delta::default()
                },
            };
            out.push(self.chunk(vec![choice(index, delta, lp.take(), None)], None));
        }
    }
}

/// `tool_calls` when a choice that called tools ended on its own; otherwise as usual.
fn chat_finish_reason(r: Option<FinishReason>, called: bool) -> Option<String> {
    match r {
        Some(FinishReason::Stop) if called => Some("tool_calls".into()),
        r => finish_reason(r),
    }
}

impl ChunkFormat for ChatFormat {
    fn start(&mut self, out: &mut Vec<String>) {
        for i in 0..self.n_choices {
            let delta = Delta {
                role: Some("assistant".into()),
                content: Some(String::new()),
                tool_calls: None,
                annotations: self.annotations.clone(),
            };
            out.push(self.chunk(vec![choice(i, delta, None, None)], None));
        }
    }

    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>) {
        match ev.event {
            TextEvent::Started { .. } | TextEvent::PromptLogprob { .. } => {}
            TextEvent::Delta {
                text,
                token_ids,
                logprobs,
                ..
            } => {
                let lp = (self.logprobs && !token_ids.is_empty())
                    .then(|| logprobs::chat(&self.tokenizer, &token_ids, &logprobs));
                let pieces = match self.tools.as_mut().and_then(|t| t.get_mut(ev.choice)) {
                    Some(ts) => ts.push(&text),
                    None if text.is_empty() => Vec::new(),
                    None => vec![Piece::Content(text)],
                };
                self.pieces(ev.choice, pieces, lp, out);
            }
            TextEvent::Finished { reason, .. } => {
                let (rest, calls) = match self.tools.as_mut().and_then(|t| t.get_mut(ev.choice)) {
                    Some(ts) => (ts.finish(), ts.num_calls() > 0),
                    None => (Vec::new(), false),
                };
                self.pieces(ev.choice, rest, None, out);
                let c = choice(
                    ev.choice,
                    Delta::default(),
                    None,
                    chat_finish_reason(Some(reason), calls),
                );
                out.push(self.chunk(vec![c], None));
            }
        }
    }

    fn end(&mut self, usage: Usage, out: &mut Vec<String>) {
        if self.include_usage {
            out.push(self.chunk(Vec::new(), Some(usage)));
        }
    }
}

fn choice(
    index: usize,
    delta: Delta,
    logprobs: Option<kiln_api::chat::ChatLogprobs>,
    finish_reason: Option<String>,
) -> ChunkChoice {
    ChunkChoice {
        index: index as u32,
        delta,
        logprobs,
        finish_reason,
    }
}
