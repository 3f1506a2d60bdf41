//! A store's files: attach one, list, read, change attributes, detach, read the text.

use kiln_api::vector_stores::{AttachFile, Deleted, FileContentPage, TextContent, VectorStoreFile};
use kiln_api::Caller;
use kiln_vectors::{VectorError, WriteMode};
use serde_json::Value;

use crate::attributes;
use crate::db::FileRow;
use crate::error::{RagError, Result};
use crate::page::ListQuery;
use crate::schema::{chunk_id, index_name, index_owner};
use crate::service::{blocking, VectorStores};
use crate::views;

/// The statuses a file list may be filtered by.
const STATUSES: &[&str] = &["in_progress", "completed", "failed", "cancelled"];

impl VectorStores {
    /// Attaches `req.file_id` to the store; it is ingested in the background (the file
    /// comes back `in_progress`).
    pub async fn attach(
        &self,
        caller: &Caller,
        store_id: &str,
        req: AttachFile,
    ) -> Result<VectorStoreFile> {
        let store = self.live_store(&caller.key_id, store_id, "vector_store_id")?;
        let Some(file_id) = req.file_id.filter(|f| !f.is_empty()) else {
            return Err(RagError::invalid("file_id", "`file_id` is required"));
        };
        let attributes = attributes::attributes(req.attributes.as_ref(), "attributes")?;
        let info = self.inner.embedder.info().await?;
        self.check_embedder(&store.embedder, &info.model, "vector_store_id")?;
        let strategy = crate::chunking::strategy(
            req.chunking_strategy.as_ref(),
            "chunking_strategy",
            info.max_text_tokens,
        )?;
        let (file_id, filename) = self.owned_file(&caller.key_id, &file_id, "file_id")?;
        let row = self
            .insert_file(
                caller,
                &store.id,
                file_id,
                filename,
                None,
                attributes,
                strategy.sizes,
            )
            .await?;
        Ok(views::file(&row))
    }

    /// A page of the store's files, of one status when `filter` is given.
    pub fn list_files(
        &self,
        owner: &str,
        store_id: &str,
        filter: Option<&str>,
        q: &ListQuery,
    ) -> Result<(Vec<VectorStoreFile>, bool)> {
        let store = self.store(owner, store_id)?;
        check_status(filter)?;
        let (rows, more) = self.inner.db.list_files(&store.id, filter, None, q)?;
        Ok((rows.iter().map(views::file).collect(), more))
    }

    pub fn get_file(&self, owner: &str, store_id: &str, file_id: &str) -> Result<VectorStoreFile> {
        Ok(views::file(&self.file_row(owner, store_id, file_id)?))
    }

    /// Replaces the file's attributes, on its stored chunks too (so filters see them).
    pub async fn update_attributes(
        &self,
        owner: &str,
        store_id: &str,
        file_id: &str,
        attributes: Option<&Value>,
    ) -> Result<VectorStoreFile> {
        let row = self.file_row(owner, store_id, file_id)?;
        let attrs = attributes::attributes(attributes, "attributes")?;
        let shared = self.inner.clone();
        let seq = row.seq;
        blocking(move || {
            let _w = shared.lock_writes();
            shared.db.set_attributes(seq, &attrs)?;
            let Some(file) = shared.db.file_by_seq(seq)? else {
                return Ok(());
            };
            let Some(n) = file.chunks.filter(|n| *n > 0) else {
                return Ok(());
            };
            let (iowner, iname) = (index_owner(&file.owner), index_name(&file.store_id));
            let ids: Vec<String> = (0..n).map(|i| chunk_id(seq, i)).collect();
            for part in ids.chunks(shared.vectors.limits().max_batch.max(1)) {
                let mut records = match shared.vectors.get_by_ids(&iowner, &iname, part) {
                    Ok(r) => r,
                    Err(VectorError::NoIndex(_)) => return Ok(()),
                    Err(e) => return Err(e.into()),
                };
                if records.is_empty() {
                    continue;
                }
                for r in &mut records {
                    r.metadata = Some(attrs.clone());
                }
                shared
                    .vectors
                    .write(&iowner, &iname, &records, WriteMode::Upsert)?;
            }
            Ok(())
        })
        .await?;
        self.get_file(owner, store_id, file_id)
    }

    /// Detaches the file: its chunks and vectors go; the uploaded file stays.
    pub async fn detach(&self, owner: &str, store_id: &str, file_id: &str) -> Result<Deleted> {
        let row = self.file_row(owner, store_id, file_id)?;
        let shared = self.inner.clone();
        blocking(move || {
            // Under the lock, so the chunk count queued is the last the worker recorded.
            let removal = {
                let _w = shared.lock_writes();
                shared.db.detach(row.seq)?
            };
            shared.carry_out_all(removal.as_slice())
        })
        .await?;
        Ok(Deleted {
            id: file_id.to_string(),
            object: "vector_store.file.deleted".into(),
            deleted: true,
        })
    }

    /// The file's text as it was extracted (empty until ingestion has read it).
    pub fn file_content(
        &self,
        owner: &str,
        store_id: &str,
        file_id: &str,
    ) -> Result<FileContentPage> {
        let row = self.file_row(owner, store_id, file_id)?;
        let text = self.inner.db.file_text(row.seq)?;
        Ok(FileContentPage {
            object: "vector_store.file_content.page".into(),
            data: text.into_iter().map(TextContent::text).collect(),
            has_more: false,
            next_page: None,
        })
    }

    pub(crate) fn file_row(&self, owner: &str, store_id: &str, file_id: &str) -> Result<FileRow> {
        let store = self.store(owner, store_id)?;
        self.inner
            .db
            .file(&store.id, file_id)?
            .ok_or_else(|| RagError::NotFound {
                what: "file in this vector store",
                id: file_id.to_string(),
            })
    }

    /// Refuses to mix vectors of two models in one store.
    pub(crate) fn check_embedder(&self, stored: &str, now: &str, param: &str) -> Result<()> {
        if stored == now {
            return Ok(());
        }
        Err(RagError::invalid(
            param,
            format!(
                "this vector store was embedded with '{stored}', but the server now embeds with \
                 '{now}'; serve '{stored}' as the embedding model or create a new store"
            ),
        ))
    }
}

pub(crate) fn check_status(filter: Option<&str>) -> Result<()> {
    match filter {
        Some(f) if !STATUSES.contains(&f) => Err(RagError::invalid(
            "filter",
            "`filter` must be in_progress, completed, failed or cancelled",
        )),
        _ => Ok(()),
    }
}
