//! File batches: several files attached at once, followed and cancelled together.

use kiln_api::vector_stores::{CreateFileBatch, FileBatch, VectorStoreFile};
use kiln_api::Caller;
use kiln_db::unix_now;

use crate::attributes;
use crate::error::{RagError, Result};
use crate::page::ListQuery;
use crate::schema::new_id;
use crate::service::{blocking, VectorStores};
use crate::store_files::check_status;
use crate::views;

/// Most files one batch may attach (OpenAI's limit).
const MAX_BATCH_FILES: usize = 500;

impl VectorStores {
    pub async fn create_batch(
        &self,
        caller: &Caller,
        store_id: &str,
        req: CreateFileBatch,
    ) -> Result<FileBatch> {
        let owner = &caller.key_id;
        let store = self.live_store(owner, store_id, "vector_store_id")?;
        let info = self.inner.embedder.info().await?;
        self.check_embedder(&store.embedder, &info.model, "vector_store_id")?;
        let shared_strategy = crate::chunking::strategy(
            req.chunking_strategy.as_ref(),
            "chunking_strategy",
            info.max_text_tokens,
        )?;
        let shared_attrs = attributes::attributes(req.attributes.as_ref(), "attributes")?;
        // Every file checked before any is attached.
        let mut files = Vec::new();
        match (req.file_ids, req.files) {
            (Some(ids), None) if !ids.is_empty() => {
                for (id, name) in self.owned_files(owner, &ids, "file_ids")? {
                    files.push((id, name, shared_attrs.clone(), shared_strategy.sizes));
                }
            }
            (None, Some(list)) if !list.is_empty() => {
                for (i, f) in list.into_iter().enumerate() {
                    let at = |field: &str| format!("files[{i}].{field}");
                    let id = f.file_id.filter(|f| !f.is_empty()).ok_or_else(|| {
                        RagError::invalid(at("file_id"), "each file needs a `file_id`")
                    })?;
                    let attrs = match &f.attributes {
                        None => shared_attrs.clone(),
                        some => attributes::attributes(some.as_ref(), &at("attributes"))?,
                    };
                    let sizes = match &f.chunking_strategy {
                        None => shared_strategy.sizes,
                        some => {
                            crate::chunking::strategy(
                                some.as_ref(),
                                &at("chunking_strategy"),
                                info.max_text_tokens,
                            )?
                            .sizes
                        }
                    };
                    let (id, name) = self.owned_file(owner, &id, &at("file_id"))?;
                    files.push((id, name, attrs, sizes));
                }
            }
            _ => {
                return Err(RagError::invalid(
                    "file_ids",
                    "give a non-empty `file_ids` or `files`, not both",
                ))
            }
        }
        if files.len() > MAX_BATCH_FILES {
            return Err(RagError::invalid(
                "file_ids",
                format!(
                    "{} files in one batch; at most {MAX_BATCH_FILES} are allowed",
                    files.len()
                ),
            ));
        }
        let id = new_id("vsfb_");
        self.inner.db.insert_batch(&id, &store.id, unix_now())?;
        for (file_id, filename, attrs, sizes) in files {
            self.insert_file(
                caller,
                &store.id,
                file_id,
                filename,
                Some(id.clone()),
                attrs,
                sizes,
            )
            .await?;
        }
        self.get_batch(owner, store_id, &id)
    }

    pub fn get_batch(&self, owner: &str, store_id: &str, batch_id: &str) -> Result<FileBatch> {
        let store = self.store(owner, store_id)?;
        let Some((created_at, cancelled)) = self.inner.db.batch(&store.id, batch_id)? else {
            return Err(RagError::NotFound {
                what: "file batch in this vector store",
                id: batch_id.to_string(),
            });
        };
        let (counts, _) = self.inner.db.file_counts(&store.id, Some(batch_id))?;
        let status = if cancelled {
            "cancelled"
        } else if counts.in_progress > 0 {
            "in_progress"
        } else if counts.total > 0 && counts.failed == counts.total {
            "failed"
        } else {
            "completed"
        };
        Ok(FileBatch {
            id: batch_id.to_string(),
            object: "vector_store.files_batch".into(),
            created_at,
            vector_store_id: store.id,
            status: status.into(),
            file_counts: counts,
        })
    }

    /// Cancels the batch's files not yet ingested (their vectors are removed).
    pub async fn cancel_batch(
        &self,
        owner: &str,
        store_id: &str,
        batch_id: &str,
    ) -> Result<FileBatch> {
        self.get_batch(owner, store_id, batch_id)?;
        let shared = self.inner.clone();
        let id = batch_id.to_string();
        blocking(move || {
            let removals = {
                let _w = shared.lock_writes();
                shared.db.cancel_batch(&id)?
            };
            shared.carry_out_all(&removals)
        })
        .await?;
        self.get_batch(owner, store_id, batch_id)
    }

    pub fn list_batch_files(
        &self,
        owner: &str,
        store_id: &str,
        batch_id: &str,
        filter: Option<&str>,
        q: &ListQuery,
    ) -> Result<(Vec<VectorStoreFile>, bool)> {
        self.get_batch(owner, store_id, batch_id)?;
        check_status(filter)?;
        let (rows, more) = self
            .inner
            .db
            .list_files(store_id, filter, Some(batch_id), q)?;
        Ok((rows.iter().map(views::file).collect(), more))
    }
}
