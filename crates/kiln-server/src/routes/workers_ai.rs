//! `POST /ai/run/{model}`, after Cloudflare Workers AI; the model's task decides the
//! body. Text generation: `{prompt}` or `{messages}` in, `{result: {response, usage},
//! success, errors, messages}` out, or streamed as `data: {"response": "..."}` events
//! ending with `data: [DONE]`. Embeddings and text classification: see
//! [`super::workers_ai_encoders`]. With `?queueRequest=true` the requests are queued
//! as a batch: [`super::workers_ai_queue`]. The model name may contain slashes
//! (`@kiln/smollm2-135m-instruct`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::workers_ai::{AiRunChunk, AiRunRequest, AiRunResponse};
use kiln_api::Usage;
use kiln_generate::output::tool_calls::{self, Piece, ToolStream};
use kiln_generate::prompt::{self, PromptOrMessages};
use kiln_generate::workers_ai;
use kiln_generate::{
    Call, ChatInput, ChatRequest, ChatStream, ChoiceEvent, Generator, OutputFields, SamplingFields,
    TextEvent, ToolFields,
};
use kiln_host::{HostedModel, ModelKind};

use super::{collect, workers_ai_encoders, workers_ai_queue};
use crate::error::ApiError;
use crate::extract::{parse, ApiBody};
use crate::lease::CallContext;
use crate::state::AppState;
use crate::stream::{sse, to_json, ChunkFormat};

/// Workers AI's default `max_tokens` (capped by what the context leaves).
pub const DEFAULT_MAX_TOKENS: u32 = 256;

pub async fn run(
    State(state): State<AppState>,
    Path(model_name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let hosted = target(state.generator(), &model_name)?;
    if workers_ai_queue::queued(&query)? {
        return workers_ai_queue::queue(&state, &model_name, &ctx, &body);
    }
    respond_to(state.generator(), hosted, &model_name, &ctx.call(), &body).await
}

/// Answers a `/ai/run/{model_name}` body for `call`: the route's work, shared with
/// batch lines.
pub async fn respond(
    generator: &Generator,
    model_name: &str,
    call: &Call,
    body: &[u8],
) -> Result<Response, ApiError> {
    let hosted = target(generator, model_name)?;
    respond_to(generator, hosted, model_name, call, body).await
}

/// The model `{model}` names (it may be `base:adapter`).
fn target(generator: &Generator, model_name: &str) -> Result<Arc<HostedModel>, ApiError> {
    let (name, _) = generator.split_adapter(Some(model_name), None)?;
    Ok(generator.resolve(name)?)
}

async fn respond_to(
    generator: &Generator,
    hosted: Arc<HostedModel>,
    model_name: &str,
    call: &Call,
    body: &[u8],
) -> Result<Response, ApiError> {
    match hosted.kind {
        Some(ModelKind::Embed) => {
            workers_ai_encoders::embed(generator, hosted, call, parse(body)?).await
        }
        Some(ModelKind::Classify) => {
            workers_ai_encoders::classify(generator, hosted, call, parse(body)?).await
        }
        // A task the server can't run fails at load, with the reason.
        Some(ModelKind::Generate) | None => {
            generate(generator, hosted, model_name, call, parse(body)?).await
        }
    }
}

async fn generate(
    generator: &Generator,
    hosted: Arc<HostedModel>,
    model_name: &str,
    call: &Call,
    req: AiRunRequest,
) -> Result<Response, ApiError> {
    let input = match prompt::prompt_or_messages(req.prompt, req.messages)? {
        PromptOrMessages::Text(text) => ChatInput::Prompt {
            text,
            raw: req.raw.unwrap_or(false),
        },
        PromptOrMessages::Messages(m) => ChatInput::Messages(m),
    };
    let tools = req.tools.as_deref().map(workers_ai::tools).transpose()?;
    let response_format = req
        .response_format
        .as_ref()
        .map(workers_ai::response_format)
        .transpose()?;
    let chat = ChatRequest {
        model: Some(model_name.to_string()),
        lora: req.lora.clone(),
        hosted: Some(hosted),
        input,
        tools: ToolFields {
            tools,
            ..ToolFields::default()
        },
        output: OutputFields {
            response_format,
            ..OutputFields::default()
        },
        sampling: SamplingFields {
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            repetition_penalty: req.repetition_penalty,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
            seed: req.seed,
            max_tokens: req.max_tokens,
            max_tokens_param: "max_tokens",
            logprobs_param: "logprobs",
            ..SamplingFields::default()
        },
        logprobs: false,
        top_logprobs: None,
        default_max_tokens: Some(DEFAULT_MAX_TOKENS),
        add_generation_prompt: true,
        skip_special_tokens: true,
        reject_if_busy: req.reject_if_busy.unwrap_or(false),
    };
    let ChatStream {
        generation: gen,
        tools: parse_tools,
        ..
    } = generator.chat(chat, call).await?;
    if req.stream.unwrap_or(false) {
        let fmt = AiFormat {
            tools: parse_tools.map(ToolStream::new),
            calls: Vec::new(),
        };
        return Ok(sse(gen, fmt, generator.cutoff(), tracing::Span::current()));
    }
    let (outs, usage) = collect(generator, gen).await?;
    let text = outs.into_iter().next().map(|c| c.text).unwrap_or_default();
    let (response, calls) = match parse_tools {
        Some(f) => {
            let (content, calls) = tool_calls::complete(f, &text);
            let calls = calls.map(|cs| {
                cs.into_iter()
                    .map(|c| workers_ai::tool_call(c.function.name, &c.function.arguments))
                    .collect()
            });
            (content.unwrap_or_default(), calls)
        }
        None => (text, None),
    };
    Ok(Json(AiRunResponse::success(response, calls, usage)).into_response())
}

struct AiFormat {
    tools: Option<ToolStream>,
    /// Calls so far: name and arguments text.
    calls: Vec<(String, String)>,
}

impl AiFormat {
    fn text(&self, text: String, out: &mut Vec<String>) {
        if !text.is_empty() {
            out.push(to_json(&AiRunChunk {
                response: text,
                tool_calls: None,
                usage: None,
            }));
        }
    }

    fn pieces(&mut self, pieces: Vec<Piece>, out: &mut Vec<String>) {
        for p in pieces {
            match p {
                Piece::Content(t) => self.text(t, out),
                Piece::Call(d) => {
                    let i = d.index as usize;
                    if self.calls.len() <= i {
                        self.calls.resize(i + 1, Default::default());
                    }
                    if let Some(name) = d.function.name {
                        self.calls[i].0 = name;
                    }
                    self.calls[i]
                        .1
                        .push_str(d.function.arguments.as_deref().unwrap_or(""));
                }
            }
        }
    }
}

impl ChunkFormat for AiFormat {
    fn start(&mut self, _out: &mut Vec<String>) {}

    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>) {
        match (ev.event, self.tools.as_mut()) {
            (TextEvent::Delta { text, .. }, Some(ts)) => {
                let p = ts.push(&text);
                self.pieces(p, out);
            }
            (TextEvent::Delta { text, .. }, None) => self.text(text, out),
            (TextEvent::Finished { .. }, Some(ts)) => {
                let p = ts.finish();
                self.pieces(p, out);
            }
            _ => {}
        }
    }

    fn end(&mut self, usage: Usage, out: &mut Vec<String>) {
        let calls = std::mem::take(&mut self.calls);
        out.push(to_json(&AiRunChunk {
            response: String::new(),
            tool_calls: (!calls.is_empty()).then(|| {
                calls
                    .into_iter()
                    .map(|(n, a)| workers_ai::tool_call(n, &a))
                    .collect()
            }),
            usage: Some(usage),
        }));
    }
}
