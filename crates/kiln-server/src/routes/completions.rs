//! `POST /v1/completions`: a string, a batch of strings, token ids or a batch of them.
//! A batch of `p` prompts with `n` completions each gives choices `p * n + i`.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::completions::{Completion, CompletionChoice, CompletionRequest, Prompt};
use kiln_api::Usage;
use kiln_engine::output::TextEvent;
use kiln_engine::ServingModel;
use kiln_host::{ChoiceEvent, Generation};
use kiln_tokenizer::Tokenizer;

use super::chat::Head;
use super::{admit, collect, finish_reason};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::middleware::RequestId;
use crate::prompt::{self, blocking};
use crate::state::{unix_now, AppState};
use crate::stream::{sse, to_json, ChunkFormat};
use crate::structured;
use crate::validate::{openai_sampling_fields, Sampling};

/// Most prompts in one batch.
pub const MAX_BATCH: usize = 64;

pub async fn completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    ctx: CallContext,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let (lease, model, adapter) = state
        .lease_generator(req.model.as_deref(), req.lora.as_deref(), &ctx)
        .await?;
    let hosted = lease.hosted().clone();
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid(
            "suffix",
            "suffix (fill-in-the-middle) is not supported",
        ));
    }
    let mut sampling = Sampling::check(
        &openai_sampling_fields!(req, req.max_tokens, "max_tokens", req.logprobs, "logprobs"),
        prompt::vocab_size(&model),
    )?;
    let grammar = structured::output_grammar(
        req.response_format.as_ref(),
        req.structured_outputs.as_ref(),
        &req.guided,
    )?;
    let inputs = split_prompt(req.prompt)?;
    for ids in inputs.iter().filter_map(|p| p.as_tokens()) {
        prompt::check_token_ids(ids, prompt::vocab_size(&model), "prompt")?;
    }
    let constraint = match grammar {
        Some(g) => Some(structured::compile(&hosted, &model, g.spec, g.param).await?),
        None => None,
    };
    let permit = admit(
        &hosted,
        inputs.len() * sampling.n,
        req.reject_if_busy.unwrap_or(false),
    )?;

    let echo = req.echo.unwrap_or(false);
    if echo {
        // An echoed prompt carries its tokens' logprobs too, as OpenAI's legacy API does.
        sampling.params.prompt_logprobs = sampling.params.logprobs;
    }
    let add_special = req.add_special_tokens.unwrap_or(true);
    let m = model.clone();
    let prepared = blocking(move || {
        inputs
            .into_iter()
            .map(|p| p.prepare(&m, add_special, echo))
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let max_model_len = model.engine_config.max_model_len;
    let mut engine_reqs = Vec::with_capacity(prepared.len());
    let mut echoes = Vec::with_capacity(prepared.len());
    let mut prompt_ids = Vec::with_capacity(prepared.len());
    for (ids, echo_text) in prepared {
        if echo {
            prompt_ids.push(ids.clone());
        }
        let mut engine_req = sampling.request(ids, "prompt", max_model_len)?;
        engine_req.priority = ctx.class.priority();
        engine_req.adapter = adapter.clone();
        engine_req.constraint = constraint.clone();
        engine_reqs.push(engine_req);
        echoes.push(echo_text);
    }
    let skip_special = req.skip_special_tokens.unwrap_or(true);
    let gen = Generation::start(&model, lease, engine_reqs, skip_special, permit)?;
    let head = Head {
        id: format!("cmpl-{}", rid.0),
        created: unix_now(),
        model: hosted.name.clone(),
        fingerprint: hosted.fingerprint(),
    };
    let n = sampling.n;
    let want_logprobs = req.logprobs.is_some();
    if req.stream.unwrap_or(false) {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let echo_of = (0..gen.num_choices())
            .map(|c| echoes[c / n].clone())
            .collect::<Vec<_>>();
        let fmt = CompletionFormat {
            head,
            include_usage,
            logprobs: want_logprobs,
            tokenizer: model.tokenizer.clone(),
            chars: echo_of.iter().map(|e| e.chars().count()).collect(),
            echo_of,
            n,
            prompt_lps: vec![Vec::new(); prompt_ids.len()],
            prompt_offsets: vec![None; prompt_ids.len()],
            prompt_ids,
        };
        return Ok(sse(gen, fmt, state.cutoff(), tracing::Span::current()));
    }
    let (outs, usage) = collect(gen, state.cutoff()).await?;
    let choices = outs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let prefix = &echoes[i / n];
            let base = prefix.chars().count();
            CompletionChoice {
                logprobs: want_logprobs.then(|| {
                    let generated = crate::logprobs::legacy(
                        &model.tokenizer,
                        &c.token_ids,
                        &c.logprobs,
                        &c.text_offsets,
                        base,
                    );
                    // The prompt's logprobs arrive with the first completion of a prompt.
                    let Some(ids) = prompt_ids.get(i / n) else {
                        return generated;
                    };
                    let first = &outs[i / n * n].prompt_logprobs;
                    let offsets = crate::logprobs::prompt_offsets(&model.tokenizer, ids);
                    let mut all =
                        crate::logprobs::legacy_prompt(&model.tokenizer, ids, &offsets, first, 0);
                    crate::logprobs::extend_legacy(&mut all, generated);
                    all
                }),
                text: format!("{prefix}{}", c.text),
                index: i as u32,
                finish_reason: finish_reason(c.finish),
            }
        })
        .collect();
    Ok(Json(Completion {
        id: head.id,
        object: "text_completion".into(),
        created: head.created,
        model: head.model,
        system_fingerprint: head.fingerprint,
        choices,
        usage: Some(Some(usage)),
    })
    .into_response())
}

/// One prompt of a (possibly batched) request.
enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

impl PromptInput {
    fn as_tokens(&self) -> Option<&[u32]> {
        match self {
            PromptInput::Tokens(t) => Some(t),
            PromptInput::Text(_) => None,
        }
    }

    /// Token ids, and the text to echo (empty unless `echo`).
    fn prepare(
        self,
        model: &ServingModel,
        add_special: bool,
        echo: bool,
    ) -> Result<(Vec<u32>, String), ApiError> {
        match self {
            PromptInput::Text(text) => {
                let ids = prompt::encode(model, &text, add_special, "prompt")?;
                Ok((ids, if echo { text } else { String::new() }))
            }
            PromptInput::Tokens(ids) => {
                let text = if echo {
                    model.tokenizer.decode(&ids, false)
                } else {
                    String::new()
                };
                Ok((ids, text))
            }
        }
    }
}

fn split_prompt(p: Prompt) -> Result<Vec<PromptInput>, ApiError> {
    let inputs: Vec<PromptInput> = match p {
        Prompt::Text(t) => vec![PromptInput::Text(t)],
        Prompt::Tokens(t) => vec![PromptInput::Tokens(t)],
        Prompt::Texts(v) => v.into_iter().map(PromptInput::Text).collect(),
        Prompt::TokenBatches(v) => v.into_iter().map(PromptInput::Tokens).collect(),
    };
    if inputs.is_empty() {
        return Err(ApiError::invalid(
            "prompt",
            "prompt must not be an empty list",
        ));
    }
    if inputs.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "prompt",
            format!(
                "at most {MAX_BATCH} prompts per request, got {}",
                inputs.len()
            ),
        ));
    }
    Ok(inputs)
}

struct CompletionFormat {
    head: Head,
    include_usage: bool,
    logprobs: bool,
    tokenizer: Arc<Tokenizer>,
    /// Per choice: the echoed prompt, sent first.
    echo_of: Vec<String>,
    /// Per choice: characters sent so far (for `text_offset`).
    chars: Vec<usize>,
    /// Completions per prompt.
    n: usize,
    /// Per prompt, its tokens when echoed (their logprobs stream as they are computed).
    prompt_ids: Vec<Vec<u32>>,
    /// Per prompt, the prompt logprobs received so far.
    prompt_lps: Vec<Vec<kiln_engine::TokenLogprobs>>,
    /// Per prompt, its tokens' character offsets (computed when first needed).
    prompt_offsets: Vec<Option<Vec<usize>>>,
}

impl CompletionFormat {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> String {
        to_json(&Completion {
            id: self.head.id.clone(),
            object: "text_completion".into(),
            created: self.head.created,
            model: self.head.model.clone(),
            system_fingerprint: self.head.fingerprint.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        })
    }
}

impl ChunkFormat for CompletionFormat {
    fn start(&mut self, out: &mut Vec<String>) {
        for (i, echo) in self
            .echo_of
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty())
        {
            out.push(self.chunk(vec![choice(i, echo.clone(), None, None)], None));
        }
    }

    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>) {
        let i = ev.choice;
        match ev.event {
            TextEvent::Started { .. } => {}
            TextEvent::PromptLogprob { logprobs, .. } => {
                let p = i / self.n.max(1);
                let (Some(ids), Some(lps), Some(offsets)) = (
                    self.prompt_ids.get(p),
                    self.prompt_lps.get_mut(p),
                    self.prompt_offsets.get_mut(p),
                ) else {
                    return;
                };
                lps.push(logprobs);
                // Position 0 (no logprob) goes out with position 1.
                let first = if lps.len() == 1 { 0 } else { lps.len() };
                // Offsets are computed once per prompt, on its first scored token.
                let offsets = offsets
                    .get_or_insert_with(|| crate::logprobs::prompt_offsets(&self.tokenizer, ids));
                let lp = crate::logprobs::legacy_prompt(&self.tokenizer, ids, offsets, lps, first);
                for c in p * self.n..(p + 1) * self.n {
                    out.push(
                        self.chunk(vec![choice(c, String::new(), Some(lp.clone()), None)], None),
                    );
                }
            }
            TextEvent::Delta {
                text,
                token_ids,
                logprobs,
                ..
            } => {
                let base = self.chars.get(i).copied().unwrap_or(0);
                let lp = (self.logprobs && !token_ids.is_empty()).then(|| {
                    let offsets = vec![0; token_ids.len()];
                    crate::logprobs::legacy(&self.tokenizer, &token_ids, &logprobs, &offsets, base)
                });
                if text.is_empty() && lp.is_none() {
                    return;
                }
                if let Some(c) = self.chars.get_mut(i) {
                    *c += text.chars().count();
                }
                out.push(self.chunk(vec![choice(i, text, lp, None)], None));
            }
            TextEvent::Finished { reason, .. } => {
                out.push(self.chunk(
                    vec![choice(i, String::new(), None, finish_reason(Some(reason)))],
                    None,
                ));
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
    text: String,
    logprobs: Option<kiln_api::completions::CompletionLogprobs>,
    finish_reason: Option<String>,
) -> CompletionChoice {
    CompletionChoice {
        text,
        index: index as u32,
        logprobs,
        finish_reason,
    }
}
