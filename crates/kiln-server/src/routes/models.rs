//! `GET /v1/models` and `GET /v1/models/{model}`.
//!
//! Each card is OpenAI's plus Kiln's `task`, `aliases`, `ready` and, for the model
//! lifecycle, `status` (`loaded`, `unloaded`, `loading` or `failed`, with `load_error`),
//! `pinned`, `memory_bytes` (its charge against `--models-memory`) and `parameters`
//! (known once loaded). A text model's card lists the LoRA adapters requests may name
//! (`adapters`, as `"<model>:<adapter>"` or `lora`) and those loaded for it
//! (`adapters_loaded`).

use axum::extract::{Path, State};
use axum::Json;
use kiln_api::models::ModelCard;
use kiln_host::{HostedModel, ModelKind, ModelStatus};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn list(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": state.models().iter().map(|m| card(&state, m)).collect::<Vec<_>>(),
    }))
}

pub async fn retrieve(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let hosted = state.generator().resolve(Some(&name))?;
    Ok(Json(card(&state, &hosted)))
}

fn card(state: &AppState, hosted: &HostedModel) -> Value {
    let model = hosted.loaded();
    let card = ModelCard {
        id: hosted.name.clone(),
        object: "model".into(),
        created: hosted.created,
        owned_by: "kiln".into(),
        max_model_len: model.as_ref().and_then(|m| m.max_model_len()),
        task: hosted.task.clone(),
        aliases: hosted.aliases.clone(),
        ready: model.is_some(),
    };
    let status = hosted.status();
    let mut v = serde_json::to_value(card).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.insert("status".into(), json!(status.as_str()));
        o.insert("pinned".into(), json!(hosted.pinned));
        o.insert("memory_bytes".into(), json!(hosted.memory_bytes()));
        o.insert("parameters".into(), json!(hosted.parameters()));
        if hosted.kind == Some(ModelKind::Generate) {
            o.insert("adapters".into(), json!(state.adapters().available()));
            o.insert(
                "adapters_loaded".into(),
                json!(state.adapters().loaded(&hosted.name)),
            );
        }
        if status == ModelStatus::Failed {
            let failure = hosted.failure().map(|f| kiln_api::without_paths(&f));
            o.insert("load_error".into(), json!(failure));
        }
    }
    v
}
