//! Rows as OpenAI's objects: a store with its file counts and status, a file with its
//! chunking and error.

use kiln_api::vector_stores::{
    ChunkingStrategy, ExpiresAfter, StaticChunking, StaticKind, VectorStore, VectorStoreFile,
};
use kiln_db::unix_now;

use crate::db::{FileRow, RagDb, StoreRow};
use crate::error::Result;

const DAY: u64 = 86_400;

/// When the store expires, if it does.
fn expires_at(row: &StoreRow) -> Option<u64> {
    row.expires_days.map(|d| row.last_active_at + d * DAY)
}

pub(crate) fn expired(row: &StoreRow, now: u64) -> bool {
    expires_at(row).is_some_and(|at| now >= at)
}

pub(crate) fn store(db: &RagDb, row: &StoreRow) -> Result<VectorStore> {
    let (counts, usage_bytes) = db.file_counts(&row.id, None)?;
    let status = if expired(row, unix_now()) {
        "expired"
    } else if counts.in_progress > 0 {
        "in_progress"
    } else {
        "completed"
    };
    Ok(VectorStore {
        id: row.id.clone(),
        object: "vector_store".into(),
        created_at: row.created_at,
        name: row.name.clone(),
        description: row.description.clone(),
        usage_bytes,
        file_counts: counts,
        status: status.into(),
        expires_after: row.expires_days.map(|days| ExpiresAfter {
            anchor: "last_active_at".into(),
            days,
        }),
        expires_at: expires_at(row),
        last_active_at: Some(row.last_active_at),
        metadata: row.metadata.clone(),
    })
}

pub(crate) fn file(row: &FileRow) -> VectorStoreFile {
    VectorStoreFile {
        id: row.file_id.clone(),
        object: "vector_store.file".into(),
        created_at: row.created_at,
        vector_store_id: row.store_id.clone(),
        status: row.status.clone(),
        usage_bytes: row.usage_bytes,
        last_error: row.error.clone(),
        chunking_strategy: ChunkingStrategy {
            kind: StaticKind::Static,
            sizes: StaticChunking {
                max_chunk_size_tokens: row.chunk_size,
                chunk_overlap_tokens: row.chunk_overlap,
            },
        },
        attributes: row.attributes.clone(),
    }
}
