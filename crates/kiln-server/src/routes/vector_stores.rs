//! `/v1/vector_stores`: stores, their files and file batches, and search, mapped onto
//! `kiln-rag`, scoped to the caller's key.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use kiln_api::files::List;
use kiln_api::vector_stores::{
    AttachFile, CreateFileBatch, CreateVectorStore, Deleted, FileBatch, FileContentPage,
    ModifyVectorStore, SearchPage, SearchRequest, UpdateFileAttributes, VectorStore,
    VectorStoreFile,
};
use kiln_rag::{ListQuery, Search};

use crate::error::ApiError;
use crate::extract::{query_number, query_order, ApiJson};
use crate::lease::CallContext;
use crate::state::AppState;

type Listed<T> = Result<Json<List<T>>, ApiError>;

pub async fn create(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<CreateVectorStore>,
) -> Result<Json<VectorStore>, ApiError> {
    Ok(Json(state.vector_stores()?.create(&ctx.caller, req).await?))
}

pub async fn list(
    State(state): State<AppState>,
    ctx: CallContext,
    Query(mut q): Query<HashMap<String, String>>,
) -> Listed<VectorStore> {
    let query = list_query(&mut q)?;
    let (data, more) = state.vector_stores()?.list(&ctx.caller.key_id, &query)?;
    Ok(Json(List::page(data, more, |s: &VectorStore| &s.id)))
}

pub async fn retrieve(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<VectorStore>, ApiError> {
    Ok(Json(
        state.vector_stores()?.retrieve(&ctx.caller.key_id, &id)?,
    ))
}

pub async fn modify(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<ModifyVectorStore>,
) -> Result<Json<VectorStore>, ApiError> {
    Ok(Json(
        state
            .vector_stores()?
            .modify(&ctx.caller.key_id, &id, req)
            .await?,
    ))
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    Ok(Json(
        state
            .vector_stores()?
            .delete(&ctx.caller.key_id, &id)
            .await?,
    ))
}

/// `POST .../search`. `rewrite_query` is refused rather than ignored: there is no
/// rewriting model here.
pub async fn search(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SearchRequest>,
) -> Result<Json<SearchPage>, ApiError> {
    if req.rewrite_query == Some(true) {
        return Err(ApiError::invalid(
            "rewrite_query",
            "`rewrite_query` is not supported by this server; send the query to search with",
        ));
    }
    let ranking = req.ranking_options.unwrap_or_default();
    if let Some(r) = ranking
        .ranker
        .as_deref()
        .filter(|r| !matches!(*r, "auto" | "none" | "default-2024-11-15"))
    {
        return Err(ApiError::invalid(
            "ranking_options.ranker",
            format!("unknown ranker '{r}'; use auto, none or default-2024-11-15"),
        ));
    }
    let search = Search::parse(
        req.query.as_ref(),
        req.filters.as_ref(),
        req.max_num_results,
        ranking.score_threshold,
        "",
    )?;
    let stores = state.vector_stores()?;
    Ok(Json(stores.search_page(&ctx.caller, &id, &search).await?))
}

pub async fn attach(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<AttachFile>,
) -> Result<Json<VectorStoreFile>, ApiError> {
    Ok(Json(
        state.vector_stores()?.attach(&ctx.caller, &id, req).await?,
    ))
}

pub async fn list_files(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Listed<VectorStoreFile> {
    let query = list_query(&mut q)?;
    let filter = q.get("filter").map(String::as_str);
    let (data, more) =
        state
            .vector_stores()?
            .list_files(&ctx.caller.key_id, &id, filter, &query)?;
    Ok(Json(List::page(data, more, |f: &VectorStoreFile| &f.id)))
}

pub async fn get_file(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, file_id)): Path<(String, String)>,
) -> Result<Json<VectorStoreFile>, ApiError> {
    Ok(Json(state.vector_stores()?.get_file(
        &ctx.caller.key_id,
        &id,
        &file_id,
    )?))
}

pub async fn update_file(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, file_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<UpdateFileAttributes>,
) -> Result<Json<VectorStoreFile>, ApiError> {
    let stores = state.vector_stores()?;
    let file = stores
        .update_attributes(&ctx.caller.key_id, &id, &file_id, req.attributes.as_ref())
        .await?;
    Ok(Json(file))
}

pub async fn detach(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, file_id)): Path<(String, String)>,
) -> Result<Json<Deleted>, ApiError> {
    Ok(Json(
        state
            .vector_stores()?
            .detach(&ctx.caller.key_id, &id, &file_id)
            .await?,
    ))
}

pub async fn file_content(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, file_id)): Path<(String, String)>,
) -> Result<Json<FileContentPage>, ApiError> {
    Ok(Json(state.vector_stores()?.file_content(
        &ctx.caller.key_id,
        &id,
        &file_id,
    )?))
}

pub async fn create_batch(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<CreateFileBatch>,
) -> Result<Json<FileBatch>, ApiError> {
    Ok(Json(
        state
            .vector_stores()?
            .create_batch(&ctx.caller, &id, req)
            .await?,
    ))
}

pub async fn get_batch(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, batch)): Path<(String, String)>,
) -> Result<Json<FileBatch>, ApiError> {
    Ok(Json(state.vector_stores()?.get_batch(
        &ctx.caller.key_id,
        &id,
        &batch,
    )?))
}

pub async fn cancel_batch(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, batch)): Path<(String, String)>,
) -> Result<Json<FileBatch>, ApiError> {
    Ok(Json(
        state
            .vector_stores()?
            .cancel_batch(&ctx.caller.key_id, &id, &batch)
            .await?,
    ))
}

pub async fn list_batch_files(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((id, batch)): Path<(String, String)>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Listed<VectorStoreFile> {
    let query = list_query(&mut q)?;
    let filter = q.get("filter").map(String::as_str);
    let (data, more) =
        state
            .vector_stores()?
            .list_batch_files(&ctx.caller.key_id, &id, &batch, filter, &query)?;
    Ok(Json(List::page(data, more, |f: &VectorStoreFile| &f.id)))
}

/// OpenAI's paging parameters: `limit` 1 to 100 (20), `order` (desc), `after`, `before`.
fn list_query(q: &mut HashMap<String, String>) -> Result<ListQuery, ApiError> {
    let limit = query_number(q, "limit", 1..=100)?.unwrap_or(20);
    Ok(ListQuery {
        limit,
        order: query_order(q, kiln_files::Order::Desc)?,
        after: q.remove("after"),
        before: q.remove("before"),
    })
}
