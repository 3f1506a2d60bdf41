//! Bearer keys: when API keys are configured, API routes need
//! `Authorization: Bearer <key>` (a missing or wrong key gets 401) and the request is
//! metered under that key's id; without keys every request is `anonymous`. `/admin/*`
//! needs an admin key when one is configured, is open when no key of any kind is, and is
//! closed (403) when only API keys are. `/metrics` and `/ready` need a metrics (or admin)
//! key once a metrics key is configured. With API keys, a path no route matches is a 401
//! before its 404 for a request bearing none of the server's keys.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::lease::Caller;
use crate::state::AppState;
use kiln_http::ApiKey;

pub async fn require_api_key(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let keys = &state.config().api_keys;
    if keys.is_empty() {
        req.extensions_mut().insert(Caller::anonymous());
        return next.run(req).await;
    }
    match authorize(&req, "API", |t| ApiKey::find(keys, t)) {
        Ok(key) => {
            let caller = Caller {
                key_id: kiln_api::key_id(&key.key),
                label: key.label.clone(),
            };
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(refused) => refused.into_response(),
    }
}

pub async fn require_admin_key(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let config = state.config();
    if config.admin_keys.is_empty() {
        if config.api_keys.is_empty() {
            return next.run(req).await;
        }
        return ApiError::Forbidden(
            "admin endpoints are closed: API keys are configured but no admin key is \
             (start the server with --admin-key)"
                .into(),
        )
        .into_response();
    }
    match authorize(&req, "admin", |t| ApiKey::find(&config.admin_keys, t)) {
        Ok(_) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// `/metrics` and `/ready`: open unless metrics keys are configured; then a metrics key
/// or an admin key.
pub async fn require_metrics_key(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let config = state.config();
    if config.metrics_keys.is_empty() {
        return next.run(req).await;
    }
    let keys =
        |t: &str| ApiKey::find(&config.metrics_keys, t).or(ApiKey::find(&config.admin_keys, t));
    match authorize(&req, "metrics", keys) {
        Ok(_) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// The 401 a request that matched no route (or not its method) gets instead of its
/// 404/405 when API keys are configured and it bears none of the server's keys, so a
/// caller without a key can't map which routes exist: auth comes before routing.
pub(crate) fn refuse_unmatched(state: &AppState, req: &Request) -> Option<ApiError> {
    let config = state.config();
    if config.api_keys.is_empty() {
        return None;
    }
    let any = |t: &str| {
        ApiKey::find(&config.api_keys, t)
            .or(ApiKey::find(&config.admin_keys, t))
            .or(ApiKey::find(&config.metrics_keys, t))
    };
    authorize(req, "API", any).err()
}

/// [`kiln_http::authorize`] on the request's headers, as an [`ApiError`].
fn authorize<'k>(
    req: &Request,
    what: &str,
    accept: impl Fn(&str) -> Option<&'k ApiKey>,
) -> Result<&'k ApiKey, ApiError> {
    Ok(kiln_http::authorize(req.headers(), what, accept)?)
}
