//! The ingest worker: one file at a time, oldest first, read from the file store,
//! extracted to text, cut into chunks by the embedder's tokens, embedded in batches and
//! written to the store's vector index.
//!
//! Progress is the file's row: `in_progress` until the last vector is written, then
//! `completed` (or `failed` with `last_error`). A restart finds the files still in
//! progress and runs them again from the start; their chunk ids are fixed, so the
//! second run overwrites the first's vectors instead of adding to them.

use std::io::Read;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kiln_api::vector_stores::LastError;
use kiln_api::Caller;
use kiln_vectors::{VectorRecord, WriteMode};

use crate::chunking::{cut, slice};
use crate::db::FileRow;
use crate::error::{EmbedError, RagError, Result};
use crate::extract::text_of;
use crate::schema::{chunk_id, index_name, index_owner};
use crate::service::{blocking, Shared};

/// How long the idle worker waits for a wake-up before looking again.
const IDLE_POLL: Duration = Duration::from_secs(30);

/// Runs until the service is dropped.
pub(crate) async fn worker(shared: Weak<Shared>) {
    let Some(wake) = shared.upgrade().map(|s| s.wake.clone()) else {
        return;
    };
    let mut after = 0;
    loop {
        let next = {
            let Some(s) = shared.upgrade() else { return };
            let seen = s.idle.generation();
            match s.db.next_pending(after) {
                Ok(Some(row)) => {
                    after = row.seq;
                    s.idle.busy();
                    Some((s, row))
                }
                Ok(None) => {
                    // Older rows still pending are only those whose end failed to be
                    // recorded; they are retried after the wait, not waited for.
                    s.idle.caught_up(seen);
                    None
                }
                Err(e) => {
                    tracing::warn!(error = %e, "vector stores: cannot read the ingest queue");
                    None
                }
            }
        };
        match next {
            Some((s, row)) => {
                let (seq, file) = (row.seq, row.file_id.clone());
                if let Err(e) = ingest(&s, row).await {
                    tracing::warn!(seq, file, error = %e, "vector stores: ingestion stopped");
                }
            }
            None => {
                // Everything seen: wait for a new file, then start over from the
                // oldest (a file that failed to record its end is tried again).
                let _ = tokio::time::timeout(IDLE_POLL, wake.notified()).await;
                after = 0;
            }
        }
    }
}

/// Ingests one file. `Err` only when its end could not be recorded.
async fn ingest(s: &Arc<Shared>, row: FileRow) -> Result<()> {
    let started = std::time::Instant::now();
    match run(s, &row).await {
        Ok(Some(chunks)) => {
            tracing::info!(
                store = row.store_id,
                file = row.file_id,
                chunks,
                ms = started.elapsed().as_millis() as u64,
                "vector stores: file ingested"
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(failure) => {
            let shared = s.clone();
            let seq = row.seq;
            blocking(move || {
                let removal = {
                    let _w = shared.lock_writes();
                    shared.db.fail(seq, &failure)?
                };
                shared.carry_out_all(removal.as_slice())
            })
            .await
        }
    }
}

/// The chunks written, `None` if the file stopped being in progress (deleted or
/// cancelled), or the reason it failed.
async fn run(s: &Arc<Shared>, row: &FileRow) -> Result<Option<usize>, LastError> {
    let text: Arc<str> = read_text(s, row).await?.into();
    let spans = s
        .embedder
        .token_spans(text.clone())
        .await
        .map_err(embed_failure)?;
    let max = s.limits.max_file_tokens;
    if spans.len() > max {
        return Err(LastError {
            code: "invalid_file".into(),
            message: format!(
                "'{}' has {} tokens, more than the {max} a file may have",
                row.filename,
                spans.len()
            ),
        });
    }
    let ranges = cut(&spans, row.chunk_size as usize, row.chunk_overlap as usize);
    let chunks: Vec<String> = ranges
        .iter()
        .map(|r| slice(&text, r.clone()).to_string())
        .collect();
    // A store deleted meanwhile ends the file's run here.
    let Some(store) =
        s.db.store(&row.owner, &row.store_id)
            .map_err(server_error)?
    else {
        return Ok(None);
    };
    let dims = store.dimensions;
    let usage = (text.len() + chunks.len() * dims * 4) as u64;
    let saved = {
        let (shared, seq, text, chunks) = (s.clone(), row.seq, text.clone(), chunks.clone());
        blocking(move || {
            let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
            shared.db.save_chunks(seq, &text, &refs, usage)
        })
        .await
        .map_err(server_error)?
    };
    if !saved {
        return Ok(None);
    }
    let caller = Caller {
        key_id: row.owner.clone(),
        label: row.owner_label.clone(),
    };
    let batch = s.limits.embed_batch.max(1);
    for (b, group) in chunks.chunks(batch).enumerate() {
        let vectors = s
            .embedder
            .embed(&caller, group.to_vec(), true)
            .await
            .map_err(embed_failure)?;
        if vectors.len() != group.len() {
            return Err(server_error(RagError::Internal(format!(
                "the embedder returned {} vectors for {} chunks",
                vectors.len(),
                group.len()
            ))));
        }
        let first = (b * batch) as i64;
        let (shared, seq) = (s.clone(), row.seq);
        let written = blocking(move || {
            let _w = shared.lock_writes();
            // Read under the lock: attributes may have changed, or the file gone.
            let Some(file) = shared
                .db
                .file_by_seq(seq)?
                .filter(|f| f.status == "in_progress")
            else {
                return Ok(false);
            };
            let records: Vec<VectorRecord> = vectors
                .into_iter()
                .enumerate()
                .map(|(i, values)| VectorRecord {
                    id: chunk_id(seq, first + i as i64),
                    values,
                    namespace: None,
                    metadata: Some(file.attributes.clone()),
                })
                .collect();
            shared.vectors.write(
                &index_owner(&file.owner),
                &index_name(&file.store_id),
                &records,
                WriteMode::Upsert,
            )?;
            Ok(true)
        })
        .await
        .map_err(server_error)?;
        if !written {
            return Ok(None);
        }
    }
    let (shared, seq) = (s.clone(), row.seq);
    let done = blocking(move || {
        let _w = shared.lock_writes();
        shared.db.finish(seq, "completed", None)
    })
    .await
    .map_err(server_error)?;
    Ok(done.then_some(chunks.len()))
}

/// The file's text, or why it can't be had.
async fn read_text(s: &Arc<Shared>, row: &FileRow) -> Result<String, LastError> {
    let (files, owner, id, name) = (
        s.files.clone(),
        row.owner.clone(),
        row.file_id.clone(),
        row.filename.clone(),
    );
    blocking(move || {
        let Some((_, mut handle)) = files.open_content(&owner, &id)? else {
            return Ok(Err(LastError {
                code: "invalid_file".into(),
                message: format!("file '{id}' was deleted before it could be read"),
            }));
        };
        let mut bytes = Vec::new();
        handle
            .read_to_end(&mut bytes)
            .map_err(|e| RagError::Internal(format!("reading file '{id}': {e}")))?;
        Ok(text_of(&name, &bytes))
    })
    .await
    .map_err(server_error)?
}

fn embed_failure(e: EmbedError) -> LastError {
    match e {
        EmbedError::Input(message) => LastError {
            code: "invalid_file".into(),
            message,
        },
        EmbedError::Model(message) => LastError {
            code: "server_error".into(),
            message: format!("the embedding model failed: {message}"),
        },
    }
}

/// A failure of the server's own (storage paths stay in its log, not the file's
/// error).
fn server_error(e: RagError) -> LastError {
    tracing::error!(error = %e, "vector stores: ingestion failed");
    LastError {
        code: "server_error".into(),
        message: "the server failed while ingesting this file; see its log".into(),
    }
}
