//! `GET /metrics`: Prometheus text format.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use kiln_host::ModelKind;

use crate::metrics::{render, render_firewall, LoraSample, ModelSample};
use crate::state::{unix_now, AppState};

pub async fn metrics(State(state): State<AppState>) -> Response {
    let loaded: Vec<_> = state.models().iter().map(|m| (m, m.loaded())).collect();
    let now = unix_now() as f64;
    let samples: Vec<ModelSample<'_>> = loaded
        .iter()
        .map(|(hosted, model)| ModelSample {
            name: &hosted.name,
            ready: model.is_some(),
            memory_bytes: hosted.charge(),
            engine: model.as_ref().and_then(|m| m.engine_stats()),
            admitted: hosted.admission.in_flight(),
            metrics: &hosted.metrics,
            lora: (hosted.kind == Some(ModelKind::Generate)).then(|| LoraSample {
                max_lora: state.adapters().max_loaded(),
                running: state.adapters().loaded(&hosted.name),
                waiting: state.adapters().loading(&hosted.name),
                at: now,
            }),
        })
        .collect();
    let mut text = render(&samples);
    if let (Ok(_), Ok(classifier)) = (
        state.firewall(),
        state.generator().resolve_for(None, ModelKind::Classify),
    ) {
        render_firewall(&mut text, &classifier.name, &state.gates().firewall_metrics);
    }
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
