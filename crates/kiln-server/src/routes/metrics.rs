//! `GET /metrics`: Prometheus text format.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use kiln_host::metrics::exposition::render_host;
use kiln_host::metrics::firewall;
use kiln_host::ModelKind;

use crate::state::AppState;
use kiln_db::unix_now;

pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = render_host(state.host(), unix_now() as f64);
    if let (Ok(_), Ok(classifier)) = (
        state.firewall(),
        state.generator().resolve_for(None, ModelKind::Classify),
    ) {
        firewall::render(&mut text, &classifier.name, &state.gates().firewall_metrics);
    }
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
