//! [`VectorStores`]: OpenAI's vector stores for every key of one node. Stores and
//! files are rows in the service's database; chunks' vectors live in one vector index
//! per store; files are ingested in the background ([`crate::ingest`]).
//!
//! A file's vectors are written only under `writes`, after checking its row is still in
//! progress, and a file stops being in progress (detached, cancelled, failed, its store
//! or its upload deleted) under `writes` too, with its vectors queued for removal in the
//! same transaction ([`crate::removal`]); so a file removed while it is ingested never
//! keeps vectors, whichever side gets there first, and a crash between the two leaves
//! the removal queued for the next open. A file is attached under `writes` after checking
//! it still exists, so an attach racing the file's delete never outlives it.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use kiln_api::vector_stores::{
    CreateVectorStore, Deleted, ExpiresAfter, ModifyVectorStore, VectorStore,
};
use kiln_api::Caller;
use kiln_db::unix_now;
use kiln_files::FileStore;
use kiln_vectors::{Metric, VectorDb};
use tokio::sync::Notify;

use crate::attributes;
use crate::db::{FileRow, RagDb, StoreRow};
use crate::embedder::Embedder;
use crate::error::{RagError, Result};
use crate::idle::IngestIdle;
use crate::page::ListQuery;
use crate::schema::{index_name, index_owner, new_id};
use crate::views;

/// Caps on what one key may keep and one file may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_stores_per_owner: u64,
    pub max_files_per_store: u64,
    /// Longest file, in the embedder's tokens (OpenAI's limit: 5,000,000).
    pub max_file_tokens: usize,
    /// Chunks embedded in one call of the embedder.
    pub embed_batch: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_stores_per_owner: 100,
            max_files_per_store: 10_000,
            max_file_tokens: 5_000_000,
            embed_batch: 32,
        }
    }
}

/// The vector-store service; cheap to clone.
#[derive(Clone)]
pub struct VectorStores {
    pub(crate) inner: Arc<Shared>,
}

pub(crate) struct Shared {
    pub db: RagDb,
    pub vectors: VectorDb,
    pub files: Arc<FileStore>,
    pub embedder: Arc<dyn Embedder>,
    pub limits: Limits,
    /// Wakes the ingest worker when a file is attached.
    pub wake: Arc<Notify>,
    pub idle: IngestIdle,
    writes: Mutex<()>,
}

impl VectorStores {
    /// Opens the service's database in `dir`; chunks go to `vectors`, files are read
    /// from `files`, text is embedded by `embedder`. Call [`VectorStores::start`] on a
    /// runtime to ingest.
    pub fn open(
        dir: &Path,
        vectors: VectorDb,
        files: Arc<FileStore>,
        embedder: Arc<dyn Embedder>,
        limits: Limits,
    ) -> Result<Self> {
        let shared = Shared {
            db: RagDb::open(dir)?,
            vectors,
            files,
            embedder,
            limits,
            wake: Arc::new(Notify::new()),
            idle: IngestIdle::default(),
            writes: Mutex::new(()),
        };
        // What is left stays queued, and is tried again at the next open.
        if let Err(e) = shared.recover() {
            tracing::warn!(error = %e, "vector stores: cannot finish the removals a restart cut short");
        }
        Ok(Self {
            inner: Arc::new(shared),
        })
    }

    /// Resolves once the ingest worker has ingested, failed or stopped every file
    /// attached before the call.
    pub async fn ingest_idle(&self) {
        self.inner.idle.wait().await;
    }

    /// Starts the ingest worker, which first resumes files a restart cut short.
    pub fn start(&self) {
        tokio::spawn(crate::ingest::worker(Arc::downgrade(&self.inner)));
    }

    pub async fn create(&self, caller: &Caller, req: CreateVectorStore) -> Result<VectorStore> {
        let owner = &caller.key_id;
        let metadata = attributes::metadata(req.metadata.as_ref(), "metadata")?;
        let expires_days = req.expires_after.as_ref().map(expiry).transpose()?;
        check_name(req.name.as_deref())?;
        let info = self.inner.embedder.info().await?;
        // Checked before anything is written, so a bad file or strategy creates nothing.
        let strategy = crate::chunking::strategy(
            req.chunking_strategy.as_ref(),
            "chunking_strategy",
            info.max_text_tokens,
        )?;
        let file_ids = req.file_ids.unwrap_or_default();
        let files = self.owned_files(owner, &file_ids, "file_ids")?;
        let cap = self.inner.limits.max_stores_per_owner;
        if self.inner.db.count_stores(owner)? >= cap {
            return Err(RagError::invalid(
                "name",
                format!("this key has {cap} vector stores, the most allowed; delete one first"),
            ));
        }
        let now = unix_now();
        let row = StoreRow {
            id: new_id("vs_"),
            owner: owner.clone(),
            name: req.name,
            description: req.description,
            metadata,
            created_at: now,
            last_active_at: now,
            expires_days,
            embedder: info.model,
            dimensions: info.dimensions,
        };
        let vectors = self.inner.vectors.clone();
        let (iowner, iname, dims) = (index_owner(owner), index_name(&row.id), row.dimensions);
        blocking(move || {
            Ok(vectors
                .create_index(&iowner, &iname, dims, Metric::Cosine, None)
                .map(drop)?)
        })
        .await?;
        self.inner.db.insert_store(&row)?;
        for (file_id, filename) in files {
            self.insert_file(
                caller,
                &row.id,
                file_id,
                filename,
                None,
                Default::default(),
                strategy.sizes,
            )
            .await?;
        }
        views::store(&self.inner.db, &row)
    }

    pub fn retrieve(&self, owner: &str, id: &str) -> Result<VectorStore> {
        views::store(&self.inner.db, &self.store(owner, id)?)
    }

    pub fn list(&self, owner: &str, q: &ListQuery) -> Result<(Vec<VectorStore>, bool)> {
        let (rows, more) = self.inner.db.list_stores(owner, q)?;
        let data = rows
            .iter()
            .map(|r| views::store(&self.inner.db, r))
            .collect::<Result<_>>()?;
        Ok((data, more))
    }

    pub async fn modify(
        &self,
        owner: &str,
        id: &str,
        req: ModifyVectorStore,
    ) -> Result<VectorStore> {
        let row = self.store(owner, id)?;
        check_name(req.name.as_deref())?;
        let metadata = req
            .metadata
            .as_ref()
            .map(|m| attributes::metadata(Some(m), "metadata"))
            .transpose()?;
        let expires = match &req.expires_after {
            None => None,
            Some(None) => Some(None),
            Some(Some(e)) => Some(Some(expiry(e)?)),
        };
        self.inner
            .db
            .update_store(&row.id, req.name.as_deref(), expires, metadata.as_ref())?;
        self.retrieve(owner, id)
    }

    /// Deletes the store, its files' chunks and its vectors (the uploaded files stay).
    pub async fn delete(&self, owner: &str, id: &str) -> Result<Deleted> {
        let row = self.store(owner, id)?;
        let shared = self.inner.clone();
        blocking(move || {
            let removal = {
                let _w = shared.lock_writes();
                shared.db.delete_store(&row.id)?
            };
            shared.carry_out_all(removal.as_slice())
        })
        .await?;
        Ok(Deleted {
            id: id.to_string(),
            object: "vector_store.deleted".into(),
            deleted: true,
        })
    }

    /// `owner`'s store `id`, or not found.
    pub(crate) fn store(&self, owner: &str, id: &str) -> Result<StoreRow> {
        self.inner
            .db
            .store(owner, id)?
            .ok_or_else(|| RagError::NotFound {
                what: "vector store",
                id: id.to_string(),
            })
    }

    /// `owner`'s store `id`, refused if it expired.
    pub(crate) fn live_store(&self, owner: &str, id: &str, param: &str) -> Result<StoreRow> {
        let row = self.store(owner, id)?;
        if views::expired(&row, unix_now()) {
            return Err(RagError::invalid(
                param,
                format!("vector store '{id}' has expired; create a new one"),
            ));
        }
        Ok(row)
    }

    /// Each file id as `(id, filename)`, checked to be `owner`'s (`param[i]` names a
    /// missing one).
    pub(crate) fn owned_files(
        &self,
        owner: &str,
        ids: &[String],
        param: &str,
    ) -> Result<Vec<(String, String)>> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| self.owned_file(owner, id, &format!("{param}[{i}]")))
            .collect()
    }

    /// File `id` as `(id, filename)`, checked to be `owner`'s.
    pub(crate) fn owned_file(
        &self,
        owner: &str,
        id: &str,
        param: &str,
    ) -> Result<(String, String)> {
        match self.inner.files.get(owner, id)? {
            Some(f) => Ok((f.id, f.filename)),
            None => Err(RagError::invalid(
                param,
                format!("no file with id '{id}'; upload it to /v1/files first"),
            )),
        }
    }

    /// Deletes `owner`'s uploaded file `file_id` (the Files API's delete) with its
    /// chunks and vectors in every store it is attached to; false if it had no such
    /// file. Crash-safe: see [`crate::removal`].
    pub async fn delete_uploaded_file(&self, owner: &str, file_id: &str) -> Result<bool> {
        let (shared, owner, file_id) = (self.inner.clone(), owner.to_string(), file_id.to_string());
        blocking(move || shared.delete_uploaded(&owner, &file_id)).await
    }

    /// Attaches a checked file to a checked store and wakes the worker. A file attached
    /// already keeps its row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_file(
        &self,
        caller: &Caller,
        store_id: &str,
        file_id: String,
        filename: String,
        batch_id: Option<String>,
        attributes: serde_json::Map<String, serde_json::Value>,
        sizes: kiln_api::vector_stores::StaticChunking,
    ) -> Result<FileRow> {
        let row = FileRow {
            seq: 0,
            store_id: store_id.to_string(),
            file_id,
            filename,
            owner: caller.key_id.clone(),
            owner_label: caller.label.clone(),
            batch_id,
            created_at: unix_now(),
            status: "in_progress".into(),
            error: None,
            chunk_size: sizes.max_chunk_size_tokens,
            chunk_overlap: sizes.chunk_overlap_tokens,
            attributes,
            chunks: None,
            usage_bytes: 0,
        };
        let shared = self.inner.clone();
        let row = blocking(move || shared.insert_file(row)).await?;
        self.inner.idle.attached();
        self.inner.wake.notify_one();
        Ok(row)
    }
}

impl Shared {
    pub(crate) fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `row` (its `seq` filled in), under `writes` and only if its file still
    /// exists; the store's cap on files is checked first.
    fn insert_file(&self, mut row: FileRow) -> Result<FileRow> {
        let _w = self.lock_writes();
        if self.files.get(&row.owner, &row.file_id)?.is_none() {
            return Err(RagError::invalid(
                "file_id",
                format!(
                    "file '{}' was deleted while it was being attached",
                    row.file_id
                ),
            ));
        }
        let (db, store_id) = (&self.db, row.store_id.clone());
        let (counts, _) = db.file_counts(&store_id, None)?;
        let cap = self.limits.max_files_per_store;
        if counts.total >= cap {
            return Err(RagError::invalid(
                "file_id",
                format!("vector store '{store_id}' holds {cap} files, the most allowed"),
            ));
        }
        match db.insert_file(&row)? {
            Some(seq) => row.seq = seq,
            None => {
                return db.file(&store_id, &row.file_id)?.ok_or_else(|| {
                    RagError::Corrupt(format!("file '{}' vanished while attached", row.file_id))
                })
            }
        }
        db.touch_store(&store_id, unix_now())?;
        Ok(row)
    }
}

/// `expires_after` as days.
fn expiry(e: &ExpiresAfter) -> Result<u64> {
    if e.anchor != "last_active_at" {
        return Err(RagError::invalid(
            "expires_after.anchor",
            "`anchor` must be \"last_active_at\"",
        ));
    }
    if !(1..=365).contains(&e.days) {
        return Err(RagError::invalid(
            "expires_after.days",
            format!("`days` must be between 1 and 365, not {}", e.days),
        ));
    }
    Ok(e.days)
}

fn check_name(name: Option<&str>) -> Result<()> {
    match name {
        Some(n) if n.chars().count() > 256 => Err(RagError::invalid(
            "name",
            "`name` is at most 256 characters",
        )),
        _ => Ok(()),
    }
}

/// Runs `f` on a blocking thread (SQLite and the vector graph block).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(RagError::Internal(format!("a storage task failed: {e}"))))
}
