//! `POST /v1/chat/completions`.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::chat::{
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
    ChunkChoice, Delta,
};
use kiln_api::Usage;
use kiln_engine::output::TextEvent;
use kiln_tokenizer::Tokenizer;

use super::{admit, finish_reason};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::generation::{collect, ChoiceEvent, Generation};
use crate::lease::CallContext;
use crate::middleware::RequestId;
use crate::prompt::{self, blocking};
use crate::state::{unix_now, AppState};
use crate::stream::{sse, to_json, ChunkFormat};
use crate::validate::{Sampling, SamplingFields};

pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    ctx: CallContext,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let (lease, model, adapter) = state
        .lease_generator(req.model.as_deref(), req.lora.as_deref(), &ctx)
        .await?;
    let slot = lease.slot().clone();
    if let Some(f) = req.response_format.as_ref().filter(|f| f.kind != "text") {
        return Err(ApiError::invalid(
            "response_format",
            format!(
                "response_format type `{}` is not supported; only `text` is",
                f.kind
            ),
        ));
    }
    let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (true, k) => Some(k.unwrap_or(0)),
        (false, Some(k)) if k > 0 => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "top_logprobs requires `logprobs: true`",
            ))
        }
        (false, _) => None,
    };
    let (max_tokens, max_tokens_param) = match (req.max_completion_tokens, req.max_tokens) {
        (Some(m), _) => (Some(m), "max_completion_tokens"),
        (None, m) => (m, "max_tokens"),
    };
    let sampling = Sampling::check(
        &SamplingFields {
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            min_p: req.min_p,
            repetition_penalty: req.repetition_penalty,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
            logit_bias: req.logit_bias.as_ref(),
            seed: req.seed,
            n: req.n,
            max_tokens,
            max_tokens_param,
            min_tokens: req.min_tokens,
            ignore_eos: req.ignore_eos,
            stop: req.stop.clone().map(|s| s.into_vec()),
            stop_token_ids: req.stop_token_ids.as_deref(),
            logprobs,
            logprobs_param: "top_logprobs",
        },
        prompt::vocab_size(&model),
    )?;
    let messages = prompt::to_template_messages(&req.messages, "messages")?;
    let permit = admit(&slot, sampling.n, req.reject_if_busy.unwrap_or(false))?;

    let tools = req.tools.clone().map(serde_json::Value::Array);
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let m = model.clone();
    let ids = blocking(move || {
        prompt::chat(
            &m,
            &messages,
            tools.as_ref(),
            add_generation_prompt,
            "messages",
        )
    })
    .await?;
    let mut engine_req = sampling.request(ids, "messages", model.engine_config.max_model_len)?;
    engine_req.adapter = adapter;
    let skip_special = req.skip_special_tokens.unwrap_or(true);
    let gen = Generation::start(&model, lease, vec![engine_req], skip_special, permit)?;

    let head = Head {
        id: format!("chatcmpl-{}", rid.0),
        created: unix_now(),
        model: slot.name.clone(),
        fingerprint: slot.fingerprint(),
    };
    let want_logprobs = logprobs.is_some();
    if req.stream.unwrap_or(false) {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let fmt = ChatFormat {
            n_choices: gen.num_choices(),
            head,
            include_usage,
            logprobs: want_logprobs,
            tokenizer: model.tokenizer.clone(),
        };
        return Ok(sse(gen, fmt, tracing::Span::current()));
    }
    let (outs, usage) = collect(gen).await?;
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(i, c)| ChatChoice {
            index: i as u32,
            logprobs: want_logprobs
                .then(|| crate::logprobs::chat(&model.tokenizer, &c.token_ids, &c.logprobs)),
            message: AssistantMessage {
                role: "assistant".into(),
                content: Some(c.text),
                refusal: None,
            },
            finish_reason: finish_reason(c.finish),
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

impl ChunkFormat for ChatFormat {
    fn start(&mut self, out: &mut Vec<String>) {
        for i in 0..self.n_choices {
            let delta = Delta {
                role: Some("assistant".into()),
                content: Some(String::new()),
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
                    .then(|| crate::logprobs::chat(&self.tokenizer, &token_ids, &logprobs));
                if text.is_empty() && lp.is_none() {
                    return;
                }
                let delta = Delta {
                    role: None,
                    content: Some(text),
                };
                out.push(self.chunk(vec![choice(ev.choice, delta, lp, None)], None));
            }
            TextEvent::Finished { reason, .. } => {
                let c = choice(
                    ev.choice,
                    Delta::default(),
                    None,
                    finish_reason(Some(reason)),
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
