//! `GET /v1/models` and `GET /v1/models/{model}`.

use axum::extract::{Path, State};
use axum::Json;
use kiln_api::models::{ModelCard, ModelList};

use crate::error::ApiError;
use crate::state::{AppState, ModelSlot};

pub async fn list(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList::new(
        state.models().iter().map(|m| card(m)).collect(),
    ))
}

pub async fn retrieve(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let slot = state.resolve(Some(&name))?;
    Ok(Json(card(&slot)))
}

fn card(slot: &ModelSlot) -> ModelCard {
    let model = slot.serving().ok();
    ModelCard {
        id: slot.name.clone(),
        object: "model".into(),
        created: slot.created,
        owned_by: "kiln".into(),
        max_model_len: model.as_ref().map(|m| m.engine_config.max_model_len),
        task: slot.task.clone(),
        aliases: slot.aliases.clone(),
        ready: model.is_some(),
    }
}
