//! `POST /v1/firewall/score`: the prompt firewall's scores for any text, whatever the
//! caller's firewall mode (metered as the classifier's usage).

use axum::extract::State;
use axum::Json;
use kiln_api::firewall::{ScoreRequest, ScoreResponse, TextScore};
use kiln_generate::check_count;
use kiln_host::HostError;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::state::AppState;

pub async fn score(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<ScoreRequest>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let texts: Vec<String> = match req.input {
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(list)) => list
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| {
                ApiError::invalid("input", "`input` must be a string or a list of strings")
            })?,
        _ => {
            return Err(ApiError::invalid(
                "input",
                "`input` must be a string or a list of strings",
            ))
        }
    };
    check_count(texts.len(), "input")?;
    let verdicts = state
        .firewall()?
        .score(&ctx.caller, &texts)
        .await
        .map_err(|e| {
            ApiError::from(HostError::ModelUnavailable {
                model: "prompt firewall".into(),
                reason: e.to_string(),
            })
        })?;
    Ok(Json(ScoreResponse {
        data: verdicts
            .into_iter()
            .map(|v| TextScore {
                injection_score: v.injection_score,
                pii_detected: !v.pii.is_empty(),
                pii_categories: v.pii.iter().map(|c| c.as_str().to_string()).collect(),
            })
            .collect(),
    }))
}
