//! `POST /ai/run/{model}` for encoder models, in Workers AI's shapes, wrapped like every
//! Workers AI result in `{result, success, errors, messages}`:
//!
//! - embeddings: `{text: "..." | ["...", ...]}` → `{shape: [n, dim], data: [[...], ...],
//!   pooling: "mean"}`;
//! - text classification: `{text: "..."}` → `[{label, score}, ...]`, highest score first.
//!
//! An input over the model's limit is a 400 unless `truncate_inputs` (Workers AI's field)
//! is true; then it is cut to its first tokens.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::workers_ai::{AiEmbeddings, AiLabelScore, AiRunEnvelope, AiText, AiTextRequest};
use kiln_host::HostedModel;

use super::admit;
use crate::encoder::{check_count, input_error};
use crate::error::ApiError;
use crate::lease::CallContext;
use crate::state::AppState;

/// The pooling the served embedders use (kiln-encoder's BERT pipeline has only this).
const POOLING: &str = "mean";

pub async fn embed(
    state: &AppState,
    hosted: Arc<HostedModel>,
    ctx: &CallContext,
    req: AiTextRequest,
) -> Result<Response, ApiError> {
    let (texts, single) = match req.text {
        AiText::One(t) => (vec![t], true),
        AiText::Many(v) => (v, false),
    };
    check_count(texts.len(), "text")?;
    if let Some(p) = req.pooling.filter(|p| p != POOLING) {
        return Err(ApiError::invalid(
            "pooling",
            format!("this model pools by `{POOLING}`; `{p}` is not available"),
        ));
    }
    let truncate = req.truncate_inputs.unwrap_or(false);
    let lease = state.lease_hosted(hosted, ctx).await?;
    let embedder = lease.embedder()?;
    let dim = embedder.model().dim();
    let permit = admit(lease.hosted(), 1, false)?;
    let vectors = embedder
        .run::<_, ApiError, _>(lease, permit, move |m| {
            let out = m
                .embed(&texts, truncate)
                .map_err(|e| input_error(e, "text", single, "truncate_inputs"))?;
            let tokens = out.total_tokens();
            Ok((out.vectors, tokens))
        })
        .await?;
    Ok(Json(AiRunEnvelope::success(AiEmbeddings {
        shape: [vectors.len(), dim],
        data: vectors,
        pooling: POOLING.into(),
    }))
    .into_response())
}

pub async fn classify(
    state: &AppState,
    hosted: Arc<HostedModel>,
    ctx: &CallContext,
    req: AiTextRequest,
) -> Result<Response, ApiError> {
    let AiText::One(text) = req.text else {
        return Err(ApiError::invalid(
            "text",
            "a text-classification model takes one string in `text`",
        ));
    };
    if req.pooling.is_some() {
        return Err(ApiError::invalid(
            "pooling",
            "`pooling` applies to embedding models only",
        ));
    }
    let truncate = req.truncate_inputs.unwrap_or(false);
    let lease = state.lease_hosted(hosted, ctx).await?;
    let classifier = lease.classifier()?;
    let permit = admit(lease.hosted(), 1, false)?;
    let scores = classifier
        .run::<_, ApiError, _>(lease, permit, move |m| {
            let out = m
                .classify(&[text], truncate)
                .map_err(|e| input_error(e, "text", true, "truncate_inputs"))?;
            let first = out
                .into_iter()
                .next()
                .ok_or_else(|| ApiError::Internal("the classifier returned no result".into()))?;
            let scores: Vec<AiLabelScore> = first
                .scores
                .into_iter()
                .map(|s| AiLabelScore {
                    label: s.label,
                    score: s.score,
                })
                .collect();
            Ok((scores, first.tokens))
        })
        .await?;
    Ok(Json(AiRunEnvelope::success(scores)).into_response())
}
