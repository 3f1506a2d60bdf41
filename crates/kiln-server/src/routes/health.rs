//! `GET /health` (liveness: 200 while the process is up) and `GET /ready` (200 only when
//! every pinned model is loaded and the server is not shutting down; unpinned models load
//! on their first request).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::state::AppState;

pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let models: Vec<Value> = state
        .models()
        .iter()
        .map(|m| {
            json!({
                "id": m.name,
                "ready": m.is_ready(),
                "pinned": m.pinned,
                "status": m.status().as_str(),
            })
        })
        .collect();
    let colo = &state.config().colo;
    if state.is_ready() {
        (
            StatusCode::OK,
            Json(json!({"status": "ready", "models": models, "colo": colo})),
        )
    } else {
        let status = if state.is_shutting_down() {
            "shutting_down"
        } else {
            "loading"
        };
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": status, "models": models, "colo": colo})),
        )
    }
}
