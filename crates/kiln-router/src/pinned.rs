//! Requests whose state lives on one node: an agent (placed by its name), and the
//! Responses, Files and Batch APIs and queued Workers AI requests (placed by the
//! caller's API key, so a key's stored responses and their chains, its files and the
//! batches that read them are on one node). Such a request goes to its owner node on the ring
//! and nowhere else: retrying on another node would find no state, or split it.

use kiln_http::TransportError;
use std::time::Instant;

use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::hash::hash_str;
use crate::proxy::{self, Attempt, Inbound};
use crate::state::RouterState;

/// The ring key of agent `name`.
pub fn agent_key(name: &str) -> String {
    format!("agent:{name}")
}

/// The ring key of the state `req`'s API key keeps (stored responses, files,
/// batches): the key, hashed (or `anonymous`).
pub fn caller_key(req: &Inbound) -> String {
    match kiln_http::bearer(&req.headers) {
        Some(t) => format!("caller:{:016x}", hash_str(t)),
        None => "caller:anonymous".into(),
    }
}

/// Sends `req` to the owner node of `key`; `what` names the state for errors.
pub async fn route(state: &RouterState, req: Inbound, key: &str, what: String) -> Response {
    if state.is_shutting_down() {
        return TransportError::ShuttingDown.into_response();
    }
    let placement = state.placement();
    let Some(node) = placement.owner(key).cloned() else {
        return ApiError::NoNode {
            model: what,
            detail: "no node is known yet".into(),
        }
        .into_response();
    };
    let config = state.config();
    match proxy::attempt(state, &node, &req).await {
        Attempt::Served(resp) => resp,
        Attempt::Busy(r) => {
            node.record_overload(Instant::now(), std::time::Duration::from_secs(1));
            proxy::served(state, &node, r)
        }
        Attempt::ContextLength(r) | Attempt::NotServed(r) => proxy::served(state, &node, r),
        Attempt::Failed { why, .. } => {
            node.record_failure(Instant::now(), config.eject_base, config.eject_max, &why);
            ApiError::OwnerDown {
                what,
                node: node.id.clone(),
                detail: why,
            }
            .into_response()
        }
    }
}
