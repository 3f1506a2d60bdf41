//! `POST /ai/run/{model}`, after Cloudflare Workers AI; the model's task decides the
//! body. Text generation: `{prompt}` or `{messages}` in, `{result: {response, usage},
//! success, errors, messages}` out, or streamed as `data: {"response": "..."}` events
//! ending with `data: [DONE]`. Embeddings and text classification: see
//! [`super::workers_ai_encoders`]. The model name may contain slashes
//! (`@kiln/smollm2-135m-instruct`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::chat::{ChatMessage, Role};
use kiln_api::workers_ai::{AiRunChunk, AiRunRequest, AiRunResponse};
use kiln_api::Usage;
use kiln_engine::output::TextEvent;

use super::{admit, workers_ai_encoders};
use crate::error::ApiError;
use crate::extract::{parse, ApiBody};
use crate::generation::{collect, ChoiceEvent, Generation};
use crate::kind::ModelKind;
use crate::lease::CallContext;
use crate::prompt::{self, blocking, PromptInput};
use crate::slot::ModelSlot;
use crate::state::AppState;
use crate::stream::{sse, to_json, ChunkFormat};
use crate::validate::{Sampling, SamplingFields};

/// Workers AI's default `max_tokens` (capped by what the context leaves).
pub const DEFAULT_MAX_TOKENS: u32 = 256;

pub async fn run(
    State(state): State<AppState>,
    Path(model_name): Path<String>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    // `{model}` may be `base:adapter`.
    let (name, _) = state.split_adapter(Some(&model_name), None)?;
    let slot = state.resolve(name)?;
    match slot.kind {
        Some(ModelKind::Embed) => {
            workers_ai_encoders::embed(&state, slot, &ctx, parse(&body)?).await
        }
        Some(ModelKind::Classify) => {
            workers_ai_encoders::classify(&state, slot, &ctx, parse(&body)?).await
        }
        // A task the server can't run fails at load, with the reason.
        Some(ModelKind::Generate) | None => {
            generate(&state, slot, &model_name, &ctx, parse(&body)?).await
        }
    }
}

async fn generate(
    state: &AppState,
    slot: Arc<ModelSlot>,
    model_name: &str,
    ctx: &CallContext,
    req: AiRunRequest,
) -> Result<Response, ApiError> {
    let (_, lora) = state.split_adapter(Some(model_name), req.lora.as_deref())?;
    let lease = state.lease_slot(slot, ctx).await?;
    let (lease, model, adapter) = state.with_adapter(lease, lora).await?;
    let slot = lease.slot().clone();
    let messages = match prompt::prompt_or_messages(req.prompt, req.messages)? {
        PromptInput::Text(p) if req.raw.unwrap_or(false) || model.chat_template.is_none() => Err(p),
        PromptInput::Text(p) => Ok(vec![ChatMessage::text(Role::User, p)]),
        PromptInput::Messages(m) => Ok(m),
    };
    let param = if messages.is_ok() {
        "messages"
    } else {
        "prompt"
    };
    let sampling = Sampling::check(
        &SamplingFields {
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
        prompt::vocab_size(&model),
    )?;
    let messages = match messages {
        Ok(m) => Ok(prompt::to_template_messages(&m, "messages")?),
        Err(text) => Err(text),
    };
    let permit = admit(&slot, 1, req.reject_if_busy.unwrap_or(false))?;
    let m = model.clone();
    let ids = blocking(move || match messages {
        Ok(msgs) => prompt::chat(&m, &msgs, None, true, "messages"),
        Err(text) => prompt::encode(&m, &text, true, "prompt"),
    })
    .await?;
    let max_model_len = model.engine_config.max_model_len;
    let mut sampling = sampling;
    if req.max_tokens.is_none() {
        let room = max_model_len.saturating_sub(ids.len()).max(1);
        sampling.set_max_tokens((DEFAULT_MAX_TOKENS as usize).min(room));
    }
    let mut engine_req = sampling.request(ids, param, max_model_len)?;
    engine_req.adapter = adapter;
    let gen = Generation::start(&model, lease, vec![engine_req], true, permit)?;
    if req.stream.unwrap_or(false) {
        return Ok(sse(gen, AiFormat, tracing::Span::current()));
    }
    let (outs, usage) = collect(gen).await?;
    let response = outs.into_iter().next().map(|c| c.text).unwrap_or_default();
    Ok(Json(AiRunResponse::success(response, usage)).into_response())
}

struct AiFormat;

impl ChunkFormat for AiFormat {
    fn start(&mut self, _out: &mut Vec<String>) {}

    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>) {
        if let TextEvent::Delta { text, .. } = ev.event {
            if !text.is_empty() {
                out.push(to_json(&AiRunChunk {
                    response: text,
                    usage: None,
                }));
            }
        }
    }

    fn end(&mut self, usage: Usage, out: &mut Vec<String>) {
        out.push(to_json(&AiRunChunk {
            response: String::new(),
            usage: Some(usage),
        }));
    }
}
