//! `POST /ai/run/{model}` for encoder models, in Workers AI's shapes, wrapped like every
//! Workers AI result in `{result, success, errors, messages}`:
//!
//! - embeddings: `{text: "..." | ["...", ...]}` → `{shape: [n, dim], data: [[...], ...],
//!   pooling: "mean"}`;
//! - text classification: `{text: "..."}` → `[{label, score}, ...]`, highest score first,
//!   with the top score in `x-kiln-confidence`.
//!
//! An input over the model's limit is a 400 unless `truncate_inputs` (Workers AI's field)
//! is true; then it is cut to its first tokens.

use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::observe::CONFIDENCE_HEADER;
use kiln_api::workers_ai::{AiEmbeddings, AiLabelScore, AiRunEnvelope, AiText, AiTextRequest};
use kiln_generate::{
    check_count, Call, ClassifyRequest, EmbedRequest, EncodeInput, Generator, Truncation,
};
use kiln_host::HostedModel;

use crate::error::ApiError;

/// The pooling the served embedders use (kiln-encoder's BERT pipeline has only this).
const POOLING: &str = "mean";

pub async fn embed(
    generator: &Generator,
    hosted: Arc<HostedModel>,
    call: &Call,
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
    let embedded = generator
        .embed(
            EmbedRequest {
                hosted,
                input: input(texts, single, req.truncate_inputs),
                dimensions: None,
            },
            call,
        )
        .await?;
    Ok(Json(AiRunEnvelope::success(AiEmbeddings {
        shape: [embedded.vectors.len(), embedded.dim],
        data: embedded.vectors,
        pooling: POOLING.into(),
    }))
    .into_response())
}

pub async fn classify(
    generator: &Generator,
    hosted: Arc<HostedModel>,
    call: &Call,
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
    let classified = generator
        .classify(
            ClassifyRequest {
                hosted,
                input: input(vec![text], true, req.truncate_inputs),
            },
            call,
        )
        .await?;
    let scores: Vec<AiLabelScore> = classified
        .scores
        .into_iter()
        .map(|(label, score)| AiLabelScore { label, score })
        .collect();
    let top = scores
        .iter()
        .map(|s| s.score)
        .fold(None, |m: Option<f32>, s| Some(m.map_or(s, |m| m.max(s))));
    let mut resp = Json(AiRunEnvelope::success(scores)).into_response();
    if let Some(v) = top.and_then(|t| HeaderValue::from_str(&format!("{t:.6}")).ok()) {
        resp.headers_mut().insert(CONFIDENCE_HEADER, v);
    }
    Ok(resp)
}

/// Workers AI's `text`, as the generator's input.
fn input(texts: Vec<String>, single: bool, truncate: Option<bool>) -> EncodeInput {
    EncodeInput {
        texts,
        param: "text",
        single,
        truncation: Truncation::Flag(truncate.unwrap_or(false)),
        truncate_field: "truncate_inputs",
    }
}
