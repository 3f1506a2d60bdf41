//! vLLM's `POST /tokenize` and `POST /detokenize`.

use axum::extract::State;
use axum::Json;
use kiln_api::tokenize::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};
use kiln_generate::prompt;
use kiln_generate::Tokenized;

use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::state::AppState;

pub async fn tokenize(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let input = prompt::prompt_or_messages(req.prompt, req.messages)?;
    let request = kiln_generate::TokenizeRequest {
        model: req.model,
        input,
        add_generation_prompt: req.add_generation_prompt.unwrap_or(true),
        add_special_tokens: req.add_special_tokens,
        return_token_strs: req.return_token_strs.unwrap_or(false),
    };
    let Tokenized {
        tokens,
        token_strs,
        max_model_len,
    } = state.generator().tokenize(request, &ctx.call()).await?;
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len,
        tokens,
        token_strs,
    }))
}

pub async fn detokenize(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let prompt = state
        .generator()
        .detokenize(req.model.as_deref(), req.tokens, &ctx.call())
        .await?;
    Ok(Json(DetokenizeResponse { prompt }))
}
