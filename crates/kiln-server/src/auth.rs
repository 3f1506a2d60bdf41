//! Bearer API keys: when any are configured, API routes need
//! `Authorization: Bearer <key>`; a missing or wrong key gets 401.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn require_api_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let keys = &state.config().api_keys;
    if keys.is_empty() {
        return next.run(req).await;
    }
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match token {
        None => ApiError::Unauthorized(
            "missing API key: send it as `Authorization: Bearer <key>`".into(),
        )
        .into_response(),
        Some(t)
            if keys
                .iter()
                .any(|k| constant_time_eq(k.as_bytes(), t.as_bytes())) =>
        {
            next.run(req).await
        }
        Some(_) => ApiError::Unauthorized("invalid API key".into()).into_response(),
    }
}

/// Compares without an early exit, so response timing doesn't reveal how much of a
/// guessed key was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"key", b"key"));
        assert!(!constant_time_eq(b"key", b"kez"));
        assert!(!constant_time_eq(b"key", b"key2"));
    }
}
