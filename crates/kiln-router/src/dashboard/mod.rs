//! `GET /dashboard`: the router's live page (static assets compiled into the binary,
//! no CDN), fed by `GET /dashboard/events`, an SSE stream of one snapshot every
//! [`TICK`]: the last [`WINDOW_MINUTES`] minutes summed per colo, model and minute,
//! the latest fallbacks, the alerts firing and the nodes' load.
//!
//! Like `/metrics` the page is open; when the router has API keys the stream wants one
//! as `?key=` (a browser's `EventSource` cannot send `Authorization`), which the page
//! takes from its URL's `#key=` fragment.

use kiln_http::assets::{asset, CSS, HTML, JAVASCRIPT};
use kiln_http::TransportError;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use kiln_observe::observer::now_ms;
use kiln_observe::summary::summarize;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::state::RouterState;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// How often the stream sends a snapshot.
pub const TICK: Duration = Duration::from_secs(2);
/// The window the snapshot sums.
pub const WINDOW_MINUTES: i64 = 15;
/// Fallback events a snapshot lists (the newest).
pub const MAX_FALLBACKS: usize = 200;
/// Events scanned for them.
const SCANNED: usize = 10_000;

pub async fn page() -> Response {
    asset(HTML, INDEX)
}

pub async fn script() -> Response {
    asset(JAVASCRIPT, SCRIPT)
}

pub async fn style() -> Response {
    asset(CSS, STYLE)
}

#[derive(Deserialize)]
pub struct Key {
    key: Option<String>,
}

/// One snapshot shared by every open page, rebuilt at most once a tick.
#[derive(Default)]
pub struct Cache(Mutex<Option<(Instant, String)>>);

pub async fn events(State(state): State<RouterState>, Query(q): Query<Key>) -> Response {
    let keys = &state.config().api_keys;
    if !keys.is_empty() && !q.key.as_ref().is_some_and(|k| keys.contains(k)) {
        return TransportError::Unauthorized(
            "the dashboard's stream needs `?key=` with an API key".into(),
        )
        .into_response();
    }
    Sse::new(ticks(state))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn ticks(state: RouterState) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold((state, true), |(state, first)| async move {
        if !first {
            tokio::time::sleep(TICK).await;
        }
        let data = shared_snapshot(&state).await;
        Some((
            Ok(SseEvent::default().event("snapshot").data(data)),
            (state, false),
        ))
    })
}

async fn shared_snapshot(state: &RouterState) -> String {
    let cache = state.dashboard_cache();
    {
        let c = cache.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, data)) = c.as_ref().filter(|(at, _)| at.elapsed() < TICK / 2) {
            return data.clone();
        }
    }
    let s = state.clone();
    let data = tokio::task::spawn_blocking(move || snapshot(&s).to_string())
        .await
        .unwrap_or_else(|e| json!({"error": e.to_string()}).to_string());
    *cache.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), data.clone()));
    data
}

/// The page's data (blocking: it reads the store).
pub fn snapshot(state: &RouterState) -> Value {
    let observer = state.observer();
    let now = (now_ms() / 60_000) as i64;
    let rollups = observer
        .rollups(now - WINDOW_MINUTES + 1, now)
        .unwrap_or_default();
    let mut fallbacks: Vec<_> = observer
        .events(None, SCANNED)
        .into_iter()
        .filter(|e| e.fallback.is_some())
        .collect();
    fallbacks.drain(..fallbacks.len().saturating_sub(MAX_FALLBACKS));
    fallbacks.reverse();
    let alerts = observer.alerts().unwrap_or_default();
    let nodes = state.placement().view(Instant::now())["nodes"].clone();
    json!({
        "time_ms": now_ms(),
        "window_minutes": WINDOW_MINUTES,
        "summary": summarize(&rollups),
        "fallbacks": fallbacks,
        "alerts": alerts,
        "nodes": nodes,
    })
}
