//! The router: which path goes where, and the layers around them.

use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};
use axum::Router;
use kiln_http::body_deadline;

use crate::gate;
use crate::middleware::{
    method_not_allowed_after_auth, not_found_after_auth, request_context, shutdown_gate,
};
use crate::routes::{
    admin, agents, batches, chat, completions, dashboard, embeddings, files, firewall, health,
    metrics, models, responses, tokenize, vector_stores, vectorize, workers_ai,
};
use crate::state::AppState;

/// The whole HTTP API over `state`.
///
/// API routes (`/v1/*`, `/ai/run/*`, `/tokenize`, `/detokenize`) need an API key when
/// keys are configured and answer 503 once shutdown has begun; a path no route matches
/// gets that 401 before its 404 (or 405), so routes can't be probed without a key;
/// `/admin/*` needs an admin key (see [`crate::auth`]); `/ready` and `/metrics` need a
/// metrics key when one is configured; `/health` is always open. Every request's body
/// must arrive within the body timeout, and the CORS policy, when there is one, wraps
/// everything.
pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/v1/agents", get(agents::list))
        .route(
            "/v1/agents/{name}",
            get(agents::get).put(agents::put).delete(agents::delete),
        )
        .route(
            "/v1/agents/{name}/responses",
            get(agents::history).post(agents::respond),
        )
        .route(
            "/v1/agents/{name}/state",
            get(agents::get_state).put(agents::put_state),
        )
        .route(
            "/v1/agents/{name}/schedules",
            get(agents::schedules).post(agents::add_schedule),
        )
        .route(
            "/v1/agents/{name}/schedules/{id}",
            axum::routing::delete(agents::delete_schedule),
        )
        .route("/v1/agents/{name}/events", get(agents::events))
        .route("/v1/files", get(files::list).post(files::upload))
        .route("/v1/files/{id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/batches", get(batches::list).post(batches::create))
        .route("/v1/batches/{id}", get(batches::retrieve))
        .route("/v1/batches/{id}/cancel", post(batches::cancel))
        .nest("/vectorize/v2/indexes", vectorize_routes())
        .nest("/v1/vector_stores", vector_store_routes())
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*model}", get(models::retrieve))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/ai/run/{*model}", post(workers_ai::run))
        .route("/v1/firewall/score", post(firewall::score))
        // Inside out: the firewall, then the cache, then the limits, after auth.
        .route_layer(from_fn_with_state(state.clone(), gate::firewall::screen))
        .route_layer(from_fn_with_state(state.clone(), gate::cache::serve_cached))
        .route_layer(from_fn_with_state(state.clone(), gate::limits::enforce))
        .route_layer(from_fn_with_state(
            state.clone(),
            crate::auth::require_api_key,
        ))
        .route_layer(from_fn_with_state(state.clone(), shutdown_gate));
    let admin = Router::new()
        .route("/admin/usage", get(admin::usage))
        .route_layer(from_fn_with_state(
            state.clone(),
            crate::auth::require_admin_key,
        ));
    let scraped = Router::new()
        .route("/ready", get(health::ready))
        .route("/metrics", get(metrics::metrics))
        .route_layer(from_fn_with_state(
            state.clone(),
            crate::auth::require_metrics_key,
        ));
    let health = Router::new()
        .route("/health", get(health::health))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/app.js", get(dashboard::script))
        .route("/dashboard/style.css", get(dashboard::style));
    let config = state.config();
    let (timeout, upload_timeout) = (config.body_timeout, config.upload_timeout);
    let max_file_bytes = state.files().ok().map(|f| f.limits().max_file_bytes);
    let body_limits = crate::body_limit::BodyLimits::new(config.body_limit, max_file_bytes);
    let cors = config.cors.clone();
    let colo = config
        .colo
        .as_ref()
        .and_then(|c| axum::http::HeaderValue::from_str(&c.name).ok());
    let app = api
        .merge(admin)
        .merge(scraped)
        .merge(health)
        .fallback(not_found_after_auth)
        .method_not_allowed_fallback(method_not_allowed_after_auth)
        // Each route's body limit, from the endpoint table.
        .layer(from_fn_with_state(body_limits, crate::body_limit::apply))
        .layer(from_fn(request_context))
        .layer(from_fn(move |req: axum::extract::Request, next| {
            crate::middleware::colo_header(colo.clone(), req, next)
        }))
        .layer(from_fn(move |req: axum::extract::Request, next| {
            let uploading = crate::body_limit::is_upload(req.method().as_str(), req.uri().path());
            body_deadline(if uploading { upload_timeout } else { timeout }, req, next)
        }))
        .with_state(state);
    cors.apply(app)
}

/// Vectorize's index routes, under `/vectorize/v2/indexes`.
fn vectorize_routes() -> Router<AppState> {
    use vectorize as v;
    Router::new()
        .route("/", get(v::list_indexes).post(v::create_index))
        .route("/{name}", get(v::get_index).delete(v::delete_index))
        .route("/{name}/info", get(v::info))
        .route(
            "/{name}/metadata_index/create",
            post(v::create_metadata_index),
        )
        .route("/{name}/metadata_index/list", get(v::list_metadata_indexes))
        .route(
            "/{name}/metadata_index/delete",
            post(v::delete_metadata_index),
        )
        .route("/{name}/insert", post(v::insert))
        .route("/{name}/upsert", post(v::upsert))
        .route("/{name}/query", post(v::query))
        .route("/{name}/get_by_ids", post(v::get_by_ids))
        .route("/{name}/delete_by_ids", post(v::delete_by_ids))
}

/// OpenAI's vector-store routes, under `/v1/vector_stores`.
fn vector_store_routes() -> Router<AppState> {
    use vector_stores as v;
    Router::new()
        .route("/", get(v::list).post(v::create))
        .route("/{id}", get(v::retrieve).post(v::modify).delete(v::delete))
        .route("/{id}/search", post(v::search))
        .route("/{id}/files", get(v::list_files).post(v::attach))
        .route(
            "/{id}/files/{file_id}",
            get(v::get_file).post(v::update_file).delete(v::detach),
        )
        .route("/{id}/files/{file_id}/content", get(v::file_content))
        .route("/{id}/file_batches", post(v::create_batch))
        .route("/{id}/file_batches/{batch}", get(v::get_batch))
        .route("/{id}/file_batches/{batch}/cancel", post(v::cancel_batch))
        .route("/{id}/file_batches/{batch}/files", get(v::list_batch_files))
}
