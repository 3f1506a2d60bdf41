//! Active checks, every `health_interval`, of every node at once: `GET /health` (is it
//! up), `GET /metrics` (its load, for least-loaded routing) and `GET /v1/models` (its
//! catalogue, for placement). A catalogue change re-places the models.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;

use crate::nodes::{CatalogueModel, Node, Probe};
use crate::prom::parse_load;
use crate::state::RouterState;

/// Longest wait for one check's answer.
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Checks one node.
pub async fn probe(
    client: &reqwest::Client,
    node: &Node,
    api_key: Option<&str>,
    timeout: Duration,
) -> Probe {
    let get = |path: &str| {
        let mut req = client
            .get(format!("{}{path}", node.spec.url))
            .timeout(timeout);
        if let Some(key) = api_key {
            req = req.bearer_auth(key);
        }
        req
    };
    let healthy = match get("/health").send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("GET /health answered {}", r.status())),
        Err(e) => Err(format!(
            "GET /health failed: {}",
            crate::proxy::describe(&e)
        )),
    };
    if let Err(error) = healthy {
        return Probe {
            healthy: false,
            error: Some(error),
            ..Probe::default()
        };
    }
    let load = match get("/metrics").send().await {
        Ok(r) if r.status().is_success() => r.text().await.ok().map(|t| parse_load(&t)),
        _ => None,
    };
    let catalogue = match get("/v1/models").send().await {
        Ok(r) if r.status().is_success() => r.json::<Value>().await.ok().and_then(|v| {
            let data = v.get("data")?.as_array()?;
            Some(data.iter().filter_map(CatalogueModel::from_card).collect())
        }),
        _ => None,
    };
    Probe {
        healthy: true,
        error: None,
        load,
        catalogue,
    }
}

/// Checks every node once; re-places the models if a catalogue changed.
pub async fn probe_all(state: &RouterState) {
    let placement = state.placement();
    let timeout = state
        .config()
        .health_interval
        .clamp(Duration::from_millis(500), MAX_PROBE_TIMEOUT);
    let key = state.config().node_api_key.as_deref();
    let probes = placement
        .nodes
        .iter()
        .map(|n| async move { n.record_probe(probe(state.client(), n, key, timeout).await) });
    let changed = join_all(probes).await.into_iter().any(|c| c);
    if changed {
        state.rebuild();
    }
}

/// Runs [`probe_all`] every `health_interval` until `stop` turns true.
pub async fn run(state: RouterState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(state.config().health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => probe_all(&state).await,
            () = stopped(&mut stop) => return,
        }
    }
}

/// Completes once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
