//! vLLM's `POST /tokenize` and `POST /detokenize`.

use axum::extract::State;
use axum::Json;
use kiln_api::tokenize::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};
use kiln_host::ModelKind;

use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::prompt::{self, blocking, PromptInput};
use crate::state::AppState;

pub async fn tokenize(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let lease = state
        .lease_for(req.model.as_deref(), &ctx, ModelKind::Generate)
        .await?;
    let model = lease.generator()?;
    let input = match prompt::prompt_or_messages(req.prompt, req.messages)? {
        PromptInput::Text(p) => Err(p),
        PromptInput::Messages(m) => Ok(prompt::to_template_messages(&m, "messages")?),
    };
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let add_special = req.add_special_tokens;
    let want_strs = req.return_token_strs.unwrap_or(false);
    let m = model.clone();
    let (tokens, token_strs) = blocking(move || {
        let ids = match input {
            Err(text) => prompt::encode(&m, &text, add_special.unwrap_or(true), "prompt")?,
            Ok(msgs) => {
                let text = prompt::render(&m, &msgs, None, add_generation_prompt, "messages")?;
                match add_special {
                    Some(add) => prompt::encode(&m, &text, add, "messages")?,
                    None => prompt::encode_rendered(&m, &text)?,
                }
            }
        };
        let strs = want_strs.then(|| {
            ids.iter()
                .map(|&t| String::from_utf8_lossy(m.tokenizer.token_bytes(t)).into_owned())
                .collect()
        });
        Ok((ids, strs))
    })
    .await?;
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: model.engine_config.max_model_len,
        tokens,
        token_strs,
    }))
}

pub async fn detokenize(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let lease = state
        .lease_for(req.model.as_deref(), &ctx, ModelKind::Generate)
        .await?;
    let model = lease.generator()?;
    prompt::check_token_ids(&req.tokens, model.tokenizer.vocab_size(), "tokens")?;
    let m = model.clone();
    let prompt = blocking(move || Ok(m.tokenizer.decode(&req.tokens, false))).await?;
    Ok(Json(DetokenizeResponse { prompt }))
}
