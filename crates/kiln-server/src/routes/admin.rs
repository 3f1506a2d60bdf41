//! `GET /admin/usage`: what each caller consumed on each model since the usage database
//! was created, with totals and the compute-unit formula.
//!
//! Everything recorded before the call is included (the meter is flushed first). Rows
//! are keyed by the API key's id (`key_` + a SHA-256 prefix) or `anonymous`, with the
//! key's configured label; `batch: true` rows are the lines of batches, billed apart.

use axum::extract::State;
use axum::Json;
use kiln_http::TransportError;
use kiln_usage::UsageRow;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn usage(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let Some(meter) = state.meter().cloned() else {
        return Ok(Json(json!({
            "object": "usage",
            "enabled": false,
            "formula": kiln_usage::FORMULA,
            "data": [],
            "totals": totals(&[]),
        })));
    };
    let rows = tokio::task::spawn_blocking(move || meter.rows())
        .await
        .map_err(|e| TransportError::Internal(format!("tokenizer task failed: {e}")))?
        .map_err(|e| TransportError::Internal(format!("cannot read usage: {e}")))?;
    let data: Vec<Value> = rows
        .iter()
        .map(|r| {
            let t = &r.totals;
            json!({
                "key_id": t.key_id,
                "label": t.label,
                "model": t.model,
                "batch": t.batch,
                "requests": t.requests,
                "prompt_tokens": t.prompt_tokens,
                "cached_tokens": t.cached_tokens,
                "completion_tokens": t.completion_tokens,
                "neurons": t.neurons,
                "first_at": r.first_at,
                "last_at": r.last_at,
            })
        })
        .collect();
    Ok(Json(json!({
        "object": "usage",
        "enabled": true,
        "formula": kiln_usage::FORMULA,
        "data": data,
        "totals": totals(&rows),
    })))
}

fn totals(rows: &[UsageRow]) -> Value {
    let sum = |f: fn(&UsageRow) -> u64| rows.iter().map(f).sum::<u64>();
    json!({
        "requests": sum(|r| r.totals.requests),
        "prompt_tokens": sum(|r| r.totals.prompt_tokens),
        "cached_tokens": sum(|r| r.totals.cached_tokens),
        "completion_tokens": sum(|r| r.totals.completion_tokens),
        "neurons": rows.iter().map(|r| r.totals.neurons).sum::<f64>(),
    })
}
