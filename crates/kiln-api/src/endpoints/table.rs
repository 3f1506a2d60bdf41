//! The table itself. Order matters only for the error hints and the Batch API's list,
//! which name endpoints in table order.

use super::BodyLimit::{Bytes, Upload};
use super::Method::{Delete, Get, Post, Put};
use super::ModelKind::{Classify, Embed, Generate};
use super::Pin::{Agent, Caller, Model, NodeOnly, Router, RouterOnly};
use super::{BodyLimit, Endpoint, Method, ModelKind, Pin, Prompt, VECTORIZE_WRITE_BYTES};

/// Every route of the API (`/v1/*`, `/ai/run/*`, `/vectorize/*`, `/tokenize`,
/// `/detokenize`); the nodes' and the router's own operations endpoints (`/health`,
/// `/ready`, `/metrics`, `/dashboard`, `/admin/*`, `/nodes`) are not API routes.
pub const ENDPOINTS: &[Endpoint] = &[
    // Models run on the model a request names.
    model(
        Post,
        "/v1/chat/completions",
        &[Generate],
        Some(Prompt::Chat),
    ),
    model(
        Post,
        "/v1/completions",
        &[Generate],
        Some(Prompt::Completion),
    ),
    model(Post, "/v1/embeddings", &[Embed], None),
    Endpoint {
        cacheable: false,
        batchable: false,
        ..model(
            Post,
            "/ai/run/{*model}",
            &[Generate, Embed, Classify],
            Some(Prompt::WorkersAi),
        )
    },
    plain(Post, "/tokenize", Model),
    plain(Post, "/detokenize", Model),
    plain(Get, "/v1/models", Router),
    plain(Get, "/v1/models/{*model}", Router),
    // The router's inference events, their rollups and its alerts.
    plain(Get, "/v1/observability/events", RouterOnly),
    plain(Get, "/v1/observability/rollups", RouterOnly),
    plain(Get, "/v1/observability/alerts", RouterOnly),
    // The Responses API: stored per key.
    runs(Post, "/v1/responses", Some(Prompt::Responses), Caller),
    plain(Get, "/v1/responses/{id}", Caller),
    plain(Delete, "/v1/responses/{id}", Caller),
    plain(Get, "/v1/responses/{id}/input_items", Caller),
    plain(Post, "/v1/responses/{id}/cancel", Caller),
    // Agents live on the node their name hashes to; a key's list is a node's own.
    plain(Get, "/v1/agents", NodeOnly),
    plain(Get, "/v1/agents/{name}", Agent),
    plain(Put, "/v1/agents/{name}", Agent),
    plain(Delete, "/v1/agents/{name}", Agent),
    plain(Get, "/v1/agents/{name}/responses", Agent),
    runs(
        Post,
        "/v1/agents/{name}/responses",
        Some(Prompt::Responses),
        Agent,
    ),
    plain(Get, "/v1/agents/{name}/state", Agent),
    plain(Put, "/v1/agents/{name}/state", Agent),
    plain(Get, "/v1/agents/{name}/schedules", Agent),
    plain(Post, "/v1/agents/{name}/schedules", Agent),
    plain(Delete, "/v1/agents/{name}/schedules/{id}", Agent),
    plain(Get, "/v1/agents/{name}/events", Agent),
    // Files and batches, on the caller's node.
    plain(Get, "/v1/files", Caller),
    limited(Post, "/v1/files", Upload),
    plain(Get, "/v1/files/{id}", Caller),
    plain(Delete, "/v1/files/{id}", Caller),
    plain(Get, "/v1/files/{id}/content", Caller),
    plain(Get, "/v1/batches", Caller),
    plain(Post, "/v1/batches", Caller),
    plain(Get, "/v1/batches/{id}", Caller),
    plain(Post, "/v1/batches/{id}/cancel", Caller),
    // Vectorize, on the caller's node; writes take what Cloudflare documents.
    plain(Get, "/vectorize/v2/indexes", Caller),
    plain(Post, "/vectorize/v2/indexes", Caller),
    plain(Get, "/vectorize/v2/indexes/{name}", Caller),
    plain(Delete, "/vectorize/v2/indexes/{name}", Caller),
    plain(Get, "/vectorize/v2/indexes/{name}/info", Caller),
    plain(
        Post,
        "/vectorize/v2/indexes/{name}/metadata_index/create",
        Caller,
    ),
    plain(
        Get,
        "/vectorize/v2/indexes/{name}/metadata_index/list",
        Caller,
    ),
    plain(
        Post,
        "/vectorize/v2/indexes/{name}/metadata_index/delete",
        Caller,
    ),
    limited(
        Post,
        "/vectorize/v2/indexes/{name}/insert",
        Bytes(VECTORIZE_WRITE_BYTES),
    ),
    limited(
        Post,
        "/vectorize/v2/indexes/{name}/upsert",
        Bytes(VECTORIZE_WRITE_BYTES),
    ),
    plain(Post, "/vectorize/v2/indexes/{name}/query", Caller),
    plain(Post, "/vectorize/v2/indexes/{name}/get_by_ids", Caller),
    plain(Post, "/vectorize/v2/indexes/{name}/delete_by_ids", Caller),
    // Vector stores, beside the caller's files; a search embeds its query.
    plain(Get, "/v1/vector_stores", Caller),
    plain(Post, "/v1/vector_stores", Caller),
    plain(Get, "/v1/vector_stores/{id}", Caller),
    plain(Post, "/v1/vector_stores/{id}", Caller),
    plain(Delete, "/v1/vector_stores/{id}", Caller),
    runs(Post, "/v1/vector_stores/{id}/search", None, Caller),
    plain(Get, "/v1/vector_stores/{id}/files", Caller),
    plain(Post, "/v1/vector_stores/{id}/files", Caller),
    plain(Get, "/v1/vector_stores/{id}/files/{file_id}", Caller),
    plain(Post, "/v1/vector_stores/{id}/files/{file_id}", Caller),
    plain(Delete, "/v1/vector_stores/{id}/files/{file_id}", Caller),
    plain(
        Get,
        "/v1/vector_stores/{id}/files/{file_id}/content",
        Caller,
    ),
    plain(Post, "/v1/vector_stores/{id}/file_batches", Caller),
    plain(Get, "/v1/vector_stores/{id}/file_batches/{batch}", Caller),
    plain(
        Post,
        "/v1/vector_stores/{id}/file_batches/{batch}/cancel",
        Caller,
    ),
    plain(
        Get,
        "/v1/vector_stores/{id}/file_batches/{batch}/files",
        Caller,
    ),
    // Scores text on the node's classifier; the router has no classifier placement.
    runs(Post, "/v1/firewall/score", None, NodeOnly),
];

/// A route that runs no model, with the default body limit.
const fn plain(method: Method, path: &'static str, pin: Pin) -> Endpoint {
    Endpoint {
        method,
        path,
        runs_model: false,
        serves: &[],
        cacheable: false,
        prompt: None,
        batchable: false,
        pin,
        body: BodyLimit::Default,
    }
}

/// A route on the caller's node with a body limit of its own.
const fn limited(method: Method, path: &'static str, body: BodyLimit) -> Endpoint {
    Endpoint {
        body,
        ..plain(method, path, Caller)
    }
}

/// A route that runs a model through stored state or the server's choice.
const fn runs(method: Method, path: &'static str, prompt: Option<Prompt>, pin: Pin) -> Endpoint {
    Endpoint {
        runs_model: true,
        prompt,
        ..plain(method, path, pin)
    }
}

/// A route that runs the model the request names: cached, batchable, placed by model.
const fn model(
    method: Method,
    path: &'static str,
    serves: &'static [ModelKind],
    prompt: Option<Prompt>,
) -> Endpoint {
    Endpoint {
        serves,
        cacheable: true,
        batchable: true,
        ..runs(method, path, prompt, Model)
    }
}
