//! `/v1/files`: upload (multipart, streamed to disk as it arrives), list, retrieve,
//! download and delete, on `kiln-files`' store, scoped to the caller's key.

use kiln_http::TransportError;
use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::files::{FileDeleted, FileObject, List};
use kiln_files::{ListQuery, Order, StoredFile, Upload};
use tokio_util::io::ReaderStream;

use crate::error::ApiError;
use crate::extract::{query_number, query_order};
use crate::lease::CallContext;
use crate::state::AppState;

/// Purposes a client may upload with (`batch_output` is for files Kiln writes).
const PURPOSES: &[&str] = &["batch", "assistants", "user_data"];

/// `POST /v1/files`: `purpose` and `file`, in either order (as OpenAI takes them). The
/// file is written to disk chunk by chunk as it arrives and becomes visible only once
/// whole; a purpose sent after it is checked when the form ends, before `finish`.
pub async fn upload(
    State(state): State<AppState>,
    ctx: CallContext,
    mut form: Multipart,
) -> Result<Json<FileObject>, ApiError> {
    let store = state.files()?.clone();
    let limit = store.limits().max_file_bytes;
    let mut purpose: Option<String> = None;
    // Dropped unfinished (any error below), it removes its partial file.
    let mut upload: Option<Upload> = None;
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|e| form_error(&state, e, limit))?
    {
        match field.name() {
            Some("purpose") => {
                let p = field
                    .text()
                    .await
                    .map_err(|e| form_error(&state, e, limit))?;
                if !PURPOSES.contains(&p.as_str()) {
                    return Err(ApiError::invalid("purpose", purpose_message()));
                }
                purpose = Some(p);
            }
            Some("file") => {
                if upload.is_some() {
                    return Err(ApiError::invalid(
                        "file",
                        "the form has more than one `file` field; send one file per upload",
                    ));
                }
                let name = field.file_name().unwrap_or("upload").to_string();
                let p = purpose.as_deref().unwrap_or_default();
                let mut up = store.upload(&ctx.caller.key_id, &name, p)?;
                while let Some(chunk) = field
                    .chunk()
                    .await
                    .map_err(|e| form_error(&state, e, limit))?
                {
                    up.write(&chunk)?;
                }
                upload = Some(up);
            }
            _ => {}
        }
    }
    let Some(purpose) = purpose else {
        let m = format!("the form has no `purpose` field; {}", purpose_message());
        return Err(ApiError::invalid("purpose", m));
    };
    let Some(mut upload) = upload else {
        return Err(ApiError::invalid("file", "the form has no `file` field"));
    };
    upload.set_purpose(&purpose);
    let stored = tokio::task::spawn_blocking(move || upload.finish())
        .await
        .map_err(|e| TransportError::Internal(e.to_string()))??;
    Ok(Json(file_object(stored)))
}

fn purpose_message() -> String {
    format!("`purpose` must be one of {}", PURPOSES.join(", "))
}

/// `GET /v1/files`: newest first unless `order=asc`; at most 10000 a page.
pub async fn list(
    State(state): State<AppState>,
    ctx: CallContext,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Json<List<FileObject>>, ApiError> {
    let limit = query_number(&q, "limit", 1..=10_000)?.unwrap_or(10_000);
    let order = query_order(&q, Order::Desc)?;
    let query = ListQuery {
        purpose: q.remove("purpose"),
        after: q.remove("after"),
        limit,
        order,
    };
    let page = state.files()?.list(&ctx.caller.key_id, &query)?;
    let data = page.data.into_iter().map(file_object).collect();
    Ok(Json(List::page(data, page.has_more, |f: &FileObject| {
        &f.id
    })))
}

pub async fn retrieve(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<FileObject>, ApiError> {
    let file = state.files()?.get(&ctx.caller.key_id, &id)?;
    Ok(Json(file_object(file.ok_or_else(|| not_found(&id))?)))
}

/// `GET /v1/files/{id}/content`: the bytes, streamed from disk.
pub async fn content(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (file, handle) = state
        .files()?
        .open_content(&ctx.caller.key_id, &id)?
        .ok_or_else(|| not_found(&id))?;
    let stream = ReaderStream::new(tokio::fs::File::from_std(handle));
    let disposition = format!(
        "attachment; filename=\"{}\"",
        file.filename.replace('"', "")
    );
    Ok((
        StatusCode::OK,
        [
            (CONTENT_TYPE, "application/octet-stream".to_string()),
            (CONTENT_LENGTH, file.bytes.to_string()),
            (CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// `DELETE /v1/files/{id}`: the file, and with it its chunks in every vector store it
/// is attached to (`kiln-rag` carries the delete out, crash-safe).
pub async fn delete(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<FileDeleted>, ApiError> {
    let owner = &ctx.caller.key_id;
    let deleted = match state.vector_stores() {
        Ok(stores) => stores.delete_uploaded_file(owner, &id).await?,
        // Vector stores open with the file store; without them there is nothing to detach.
        Err(_) => state.files()?.delete(owner, &id)?,
    };
    if !deleted {
        return Err(not_found(&id));
    }
    Ok(Json(FileDeleted {
        id,
        object: "file".into(),
        deleted: true,
    }))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("no file with id '{id}'"),
        param: None,
    }
}

/// A multipart failure: past the file limit (413), past the body deadline (408), or a
/// malformed form (400).
fn form_error(
    state: &AppState,
    e: axum::extract::multipart::MultipartError,
    limit: u64,
) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        TransportError::PayloadTooLarge {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
        }
        .into()
    } else if kiln_http::is_body_timeout(&e) {
        TransportError::BodyTimeout {
            limit_s: state.config().upload_timeout.as_secs(),
        }
        .into()
    } else {
        ApiError::invalid("file", format!("cannot read the upload: {}", e.body_text()))
    }
}

pub fn file_object(f: StoredFile) -> FileObject {
    FileObject {
        id: f.id,
        object: "file".into(),
        bytes: f.bytes,
        created_at: f.created_at,
        expires_at: None,
        filename: f.filename,
        purpose: f.purpose,
        status: "processed".into(),
        status_details: None,
    }
}
