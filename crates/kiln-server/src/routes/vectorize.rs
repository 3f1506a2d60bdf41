//! Cloudflare Vectorize's v2 REST API (without the account prefix) on `kiln-vectors`,
//! scoped to the caller's key: indexes, metadata indexes, NDJSON insert and upsert,
//! queries, reads and deletes by id, info. Answers and errors are in Cloudflare's
//! envelope; an error also carries OpenAI's `error` object, so either kind of client
//! reads it.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::vectorize::{
    CreateIndex, Envelope, Ids, IndexConfig, IndexInfo, IndexResult, MetadataIndex,
    MetadataIndexList, MetadataIndexName, MutationResult, QueryMatch, QueryRequest, QueryResult,
    VectorLine,
};
use kiln_http::TransportError;
use kiln_http::{ClassifiedError, OpenAiError};
use kiln_vectors::{
    Filter, IndexDesc, MetaType, Metric, Query, ReturnMetadata, VectorDb, VectorError,
    VectorRecord, WriteMode,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{parse, ApiBody, NdjsonBody};
use crate::lease::CallContext;
use crate::state::AppState;

/// An error in Cloudflare's envelope.
pub struct VectorizeError(Box<ApiError>);

impl<E: Into<ApiError>> From<E> for VectorizeError {
    fn from(e: E) -> Self {
        Self(Box::new(e.into()))
    }
}

impl IntoResponse for VectorizeError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = e.status();
        let body = json!({
            "result": null,
            "success": false,
            "errors": [{"code": status.as_u16(), "message": e.safe_message()}],
            "messages": [],
            "error": e.body().error,
        });
        (status, Json(body)).into_response()
    }
}

type Answer<T> = Result<Json<Envelope<T>>, VectorizeError>;

fn ok<T: Serialize>(result: T) -> Answer<T> {
    Ok(Json(Envelope::success(result)))
}

/// Runs `f` on the vector database on a blocking thread (SQLite and graph work).
async fn on_db<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&VectorDb) -> Result<T, VectorError> + Send + 'static,
) -> Result<T, VectorizeError> {
    let db = state.vectors()?.clone();
    tokio::task::spawn_blocking(move || f(&db))
        .await
        .map_err(|e| TransportError::Internal(format!("vector task: {e}")))?
        .map_err(VectorizeError::from)
}

fn rfc3339(unix: u64) -> String {
    chrono::DateTime::from_timestamp(i64::try_from(unix).unwrap_or(i64::MAX), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn index_result(d: IndexDesc) -> IndexResult {
    IndexResult {
        name: d.name,
        description: d.description,
        config: IndexConfig {
            dimensions: d.dimensions as u64,
            metric: d.metric.as_str().into(),
            backend: (d.backend != kiln_vectors::EMBEDDED).then_some(d.backend),
        },
        created_on: rfc3339(d.created_at),
        modified_on: rfc3339(d.modified_at),
    }
}

/// `POST /vectorize/v2/indexes`.
pub async fn create_index(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Answer<IndexResult> {
    let req: CreateIndex = parse(&body)?;
    let metric = Metric::parse(&req.config.metric).ok_or_else(|| {
        ApiError::invalid(
            "config.metric",
            format!(
                "unknown metric '{}'; use cosine, euclidean or dot-product",
                req.config.metric
            ),
        )
    })?;
    let dims = usize::try_from(req.config.dimensions).unwrap_or(usize::MAX);
    let owner = ctx.caller.key_id;
    let backend = req
        .config
        .backend
        .unwrap_or_else(|| kiln_vectors::EMBEDDED.into());
    let desc = on_db(&state, move |db| {
        let description = req.description.as_deref();
        db.create_index_on(&owner, &req.name, dims, metric, description, &backend)
    })
    .await?;
    ok(index_result(desc))
}

/// `GET /vectorize/v2/indexes`.
pub async fn list_indexes(
    State(state): State<AppState>,
    ctx: CallContext,
) -> Answer<Vec<IndexResult>> {
    let owner = ctx.caller.key_id;
    let list = on_db(&state, move |db| db.list_indexes(&owner)).await?;
    ok(list.into_iter().map(index_result).collect())
}

/// `GET /vectorize/v2/indexes/{name}`.
pub async fn get_index(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Answer<IndexResult> {
    let owner = ctx.caller.key_id;
    ok(index_result(
        on_db(&state, move |db| db.get_index(&owner, &name)).await?,
    ))
}

/// `DELETE /vectorize/v2/indexes/{name}`.
pub async fn delete_index(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Answer<Value> {
    let owner = ctx.caller.key_id;
    on_db(&state, move |db| db.delete_index(&owner, &name)).await?;
    ok(Value::Null)
}

/// `GET /vectorize/v2/indexes/{name}/info`.
pub async fn info(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Answer<IndexInfo> {
    let owner = ctx.caller.key_id;
    let i = on_db(&state, move |db| db.info(&owner, &name)).await?;
    ok(IndexInfo {
        dimensions: i.dimensions as u64,
        vector_count: i.vector_count,
        processed_up_to_datetime: i.processed_up_to_datetime.map(rfc3339),
        processed_up_to_mutation: i.processed_up_to_mutation,
    })
}

/// `POST /vectorize/v2/indexes/{name}/metadata_index/create`.
pub async fn create_metadata_index(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiBody(body): ApiBody,
) -> Answer<MutationResult> {
    let req: MetadataIndex = parse(&body)?;
    let ty = MetaType::parse(&req.index_type).ok_or_else(|| {
        ApiError::invalid(
            "indexType",
            format!(
                "unknown indexType '{}'; use string, number or boolean",
                req.index_type
            ),
        )
    })?;
    let owner = ctx.caller.key_id;
    let m = on_db(&state, move |db| {
        db.create_metadata_index(&owner, &name, &req.property_name, ty)
    })
    .await?;
    ok(MutationResult {
        mutation_id: m.mutation_id,
        count: m.count,
    })
}

/// `GET /vectorize/v2/indexes/{name}/metadata_index/list`.
pub async fn list_metadata_indexes(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Answer<MetadataIndexList> {
    let owner = ctx.caller.key_id;
    let list = on_db(&state, move |db| db.list_metadata_indexes(&owner, &name)).await?;
    ok(MetadataIndexList {
        metadata_indexes: list
            .into_iter()
            .map(|m| MetadataIndex {
                property_name: m.property,
                index_type: m.index_type.as_str().into(),
            })
            .collect(),
    })
}

/// `POST /vectorize/v2/indexes/{name}/metadata_index/delete`.
pub async fn delete_metadata_index(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiBody(body): ApiBody,
) -> Answer<MutationResult> {
    let req: MetadataIndexName = parse(&body)?;
    let owner = ctx.caller.key_id;
    let m = on_db(&state, move |db| {
        db.delete_metadata_index(&owner, &name, &req.property_name)
    })
    .await?;
    ok(MutationResult {
        mutation_id: m.mutation_id,
        count: m.count,
    })
}

/// `POST /vectorize/v2/indexes/{name}/insert`.
pub async fn insert(
    state: State<AppState>,
    ctx: CallContext,
    name: Path<String>,
    body: NdjsonBody,
) -> Answer<MutationResult> {
    write(state, ctx, name, body, WriteMode::Insert).await
}

/// `POST /vectorize/v2/indexes/{name}/upsert`.
pub async fn upsert(
    state: State<AppState>,
    ctx: CallContext,
    name: Path<String>,
    body: NdjsonBody,
) -> Answer<MutationResult> {
    write(state, ctx, name, body, WriteMode::Upsert).await
}

async fn write(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    NdjsonBody(body): NdjsonBody,
    mode: WriteMode,
) -> Answer<MutationResult> {
    let records = ndjson(&body)?;
    let owner = ctx.caller.key_id;
    let m = on_db(&state, move |db| db.write(&owner, &name, &records, mode)).await?;
    ok(MutationResult {
        mutation_id: m.mutation_id,
        count: m.count,
    })
}

/// The vectors of an NDJSON body, one per non-blank line; a bad line is a 400 naming
/// its number.
fn ndjson(body: &[u8]) -> Result<Vec<VectorRecord>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid("body", "the body is not UTF-8 text"))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: VectorLine = serde_json::from_str(l).map_err(|e| {
                ApiError::invalid(
                    "body",
                    format!(
                        "line {} is not a vector ({{\"id\", \"values\", \"namespace\"?, \"metadata\"?}}): {e}",
                        i + 1
                    ),
                )
            })?;
            Ok(VectorRecord {
                id: v.id,
                values: v.values,
                namespace: v.namespace,
                metadata: v.metadata,
            })
        })
        .collect()
}

/// `POST /vectorize/v2/indexes/{name}/query`.
pub async fn query(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiBody(body): ApiBody,
) -> Answer<QueryResult> {
    let req: QueryRequest = parse(&body)?;
    let return_metadata = match &req.return_metadata {
        None | Some(Value::Null) | Some(Value::Bool(false)) => ReturnMetadata::None,
        Some(Value::Bool(true)) => ReturnMetadata::All,
        Some(Value::String(s)) if s == "none" => ReturnMetadata::None,
        Some(Value::String(s)) if s == "indexed" => ReturnMetadata::Indexed,
        Some(Value::String(s)) if s == "all" => ReturnMetadata::All,
        Some(_) => {
            return Err(ApiError::invalid(
                "returnMetadata",
                "`returnMetadata` must be \"none\", \"indexed\" or \"all\"",
            )
            .into())
        }
    };
    let filter = req
        .filter
        .as_ref()
        .filter(|f| !f.is_null())
        .map(Filter::from_vectorize)
        .transpose()
        .map_err(ApiError::from)?;
    let q = Query {
        vector: req.vector,
        top_k: req
            .top_k
            .map_or(5, |k| usize::try_from(k).unwrap_or(usize::MAX)),
        namespace: req.namespace,
        filter,
        return_values: req.return_values,
        return_metadata,
    };
    let owner = ctx.caller.key_id;
    let matches = on_db(&state, move |db| db.query(&owner, &name, &q)).await?;
    ok(QueryResult {
        count: matches.len(),
        matches: matches
            .into_iter()
            .map(|m| QueryMatch {
                id: m.id,
                score: m.score,
                values: m.values,
                metadata: m.metadata,
                namespace: m.namespace,
            })
            .collect(),
    })
}

/// `POST /vectorize/v2/indexes/{name}/get_by_ids`.
pub async fn get_by_ids(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiBody(body): ApiBody,
) -> Answer<Vec<VectorLine>> {
    let req: Ids = parse(&body)?;
    let owner = ctx.caller.key_id;
    let found = on_db(&state, move |db| db.get_by_ids(&owner, &name, &req.ids)).await?;
    ok(found
        .into_iter()
        .map(|r| VectorLine {
            id: r.id,
            values: r.values,
            namespace: r.namespace,
            metadata: r.metadata,
        })
        .collect())
}

/// `POST /vectorize/v2/indexes/{name}/delete_by_ids`.
pub async fn delete_by_ids(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiBody(body): ApiBody,
) -> Answer<MutationResult> {
    let req: Ids = parse(&body)?;
    let owner = ctx.caller.key_id;
    let m = on_db(&state, move |db| db.delete_by_ids(&owner, &name, &req.ids)).await?;
    ok(MutationResult {
        mutation_id: m.mutation_id,
        count: m.count,
    })
}
