//! Taking vectors out of a store's index so that a crash never leaves any behind, and
//! deleting an uploaded file together with everything retrieval kept of it.
//!
//! Vectors are made unreachable and queued for removal in one transaction (a file's row
//! deleted, cancelled or failed; a store's row deleted), then removed from the index,
//! then dequeued; what a crash leaves queued is removed when the service next opens. A
//! chunk id names its file's `seq`, which is never reused, so a removal carried out late
//! never touches another file's vectors, and carrying one out twice is harmless.
//!
//! Deleting an uploaded file (the Files API's delete) starts with a tombstone: in one
//! transaction under the service's write lock, the tombstone naming the file is written
//! and the file is detached from every store; then the file is deleted from the file
//! store, still under the lock (so no attach can slip in between: attaching checks the
//! file under the same lock), and the tombstone goes; then the queued removals are
//! carried out. A tombstone found at open is finished the same way, so a `kill -9` at
//! any point converges to no file, no attachment and no vector.

use kiln_api::vector_stores::LastError;
use kiln_vectors::VectorError;
use rusqlite::{params, Connection, OptionalExtension};

use crate::db::RagDb;
use crate::error::Result;
use crate::schema::{chunk_id, index_name, index_owner};
use crate::service::Shared;

/// Vectors queued for removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Removal {
    /// Its row in `removals`.
    pub seq: i64,
    pub owner: String,
    pub store_id: String,
    /// The file whose chunks go, as its `seq` and chunk count; `None`: the store's
    /// whole index.
    pub file: Option<(i64, i64)>,
}

/// Queues a removal inside the caller's transaction (the one that makes the vectors
/// unreachable).
fn queue(
    conn: &Connection,
    owner: &str,
    store_id: &str,
    file: Option<(i64, i64)>,
) -> rusqlite::Result<Removal> {
    conn.execute(
        "INSERT INTO removals (owner, store_id, file_seq, chunks) VALUES (?1, ?2, ?3, ?4)",
        params![owner, store_id, file.map(|f| f.0), file.map_or(0, |f| f.1)],
    )?;
    Ok(Removal {
        seq: conn.last_insert_rowid(),
        owner: owner.to_string(),
        store_id: store_id.to_string(),
        file,
    })
}

/// Queues the removal of attached file `seq`'s vectors; `None` if it is not attached.
fn queue_file(conn: &Connection, seq: i64) -> rusqlite::Result<Option<Removal>> {
    let found: Option<(String, String, Option<i64>)> = conn
        .query_row(
            "SELECT owner, store_id, chunks FROM store_files WHERE seq = ?1",
            [seq],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    found
        .map(|(owner, store, chunks)| queue(conn, &owner, &store, Some((seq, chunks.unwrap_or(0)))))
        .transpose()
}

impl RagDb {
    /// Detaches file `seq` (its chunks' texts go with its row) and queues its vectors'
    /// removal; `None` if it was not attached.
    pub(crate) fn detach(&self, seq: i64) -> Result<Option<Removal>> {
        self.transaction(|tx| {
            let removal = queue_file(tx, seq)?;
            tx.execute("DELETE FROM store_files WHERE seq = ?1", [seq])?;
            Ok(removal)
        })
    }

    /// Deletes the store with its files, chunks and batches, and queues its index's
    /// removal; `None` if there was no such store.
    pub(crate) fn delete_store(&self, id: &str) -> Result<Option<Removal>> {
        self.transaction(|tx| {
            let owner: Option<String> = tx
                .query_row("SELECT owner FROM stores WHERE id = ?1", [id], |r| r.get(0))
                .optional()?;
            let Some(owner) = owner else {
                return Ok(None);
            };
            tx.execute("DELETE FROM stores WHERE id = ?1", [id])?;
            queue(tx, &owner, id, None).map(Some)
        })
    }

    /// Ends an in-progress file as `failed` and queues its vectors' removal; `None` if it
    /// was not in progress any more (deleted or cancelled meanwhile).
    pub(crate) fn fail(&self, seq: i64, error: &LastError) -> Result<Option<Removal>> {
        self.transaction(|tx| {
            let n = tx.execute(
                "UPDATE store_files SET status = 'failed', error_code = ?1, error_message = ?2
                 WHERE seq = ?3 AND status = 'in_progress'",
                params![error.code, error.message, seq],
            )?;
            if n == 0 {
                return Ok(None);
            }
            queue_file(tx, seq)
        })
    }

    /// Cancels the batch: its files still in progress become `cancelled`, their
    /// vectors queued for removal (returned).
    pub(crate) fn cancel_batch(&self, id: &str) -> Result<Vec<Removal>> {
        self.transaction(|tx| {
            tx.execute("UPDATE file_batches SET cancelled = 1 WHERE id = ?1", [id])?;
            let seqs = {
                let mut stmt = tx.prepare(
                    "SELECT seq FROM store_files WHERE batch_id = ?1 AND status = 'in_progress'",
                )?;
                let seqs = stmt
                    .query_map([id], |r| r.get::<_, i64>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                seqs
            };
            tx.execute(
                "UPDATE store_files SET status = 'cancelled' WHERE batch_id = ?1 AND status = 'in_progress'",
                [id],
            )?;
            let mut removals = Vec::with_capacity(seqs.len());
            for seq in seqs {
                removals.extend(queue_file(tx, seq)?);
            }
            Ok(removals)
        })
    }

    /// Writes the tombstone of `owner`'s uploaded file `file_id` and detaches it from
    /// every store, queueing each attachment's vectors for removal.
    pub(crate) fn begin_file_delete(&self, owner: &str, file_id: &str) -> Result<Vec<Removal>> {
        self.transaction(|tx| {
            tx.execute(
                "INSERT OR IGNORE INTO file_deletes (owner, file_id) VALUES (?1, ?2)",
                params![owner, file_id],
            )?;
            let seqs = {
                let mut stmt =
                    tx.prepare("SELECT seq FROM store_files WHERE owner = ?1 AND file_id = ?2")?;
                let seqs = stmt
                    .query_map(params![owner, file_id], |r| r.get::<_, i64>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                seqs
            };
            let mut removals = Vec::with_capacity(seqs.len());
            for seq in seqs {
                removals.extend(queue_file(tx, seq)?);
                tx.execute("DELETE FROM store_files WHERE seq = ?1", [seq])?;
            }
            Ok(removals)
        })
    }

    /// Removes the tombstone once the file itself is deleted.
    pub(crate) fn end_file_delete(&self, owner: &str, file_id: &str) -> Result<()> {
        self.transaction(|tx| {
            tx.execute(
                "DELETE FROM file_deletes WHERE owner = ?1 AND file_id = ?2",
                params![owner, file_id],
            )
            .map(drop)
        })
    }

    /// Tombstones a crash left: `(owner, file_id)`.
    pub(crate) fn file_deletes(&self) -> Result<Vec<(String, String)>> {
        self.transaction(|tx| {
            let mut stmt = tx.prepare("SELECT owner, file_id FROM file_deletes")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// Every attached uploaded file, as `(owner, file_id)`, once.
    pub(crate) fn attached_files(&self) -> Result<Vec<(String, String)>> {
        self.transaction(|tx| {
            let mut stmt = tx.prepare("SELECT DISTINCT owner, file_id FROM store_files")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// Removals queued and not yet carried out, oldest first.
    pub(crate) fn removals(&self) -> Result<Vec<Removal>> {
        self.transaction(|tx| {
            let mut stmt = tx.prepare(
                "SELECT seq, owner, store_id, file_seq, chunks FROM removals ORDER BY seq",
            )?;
            let rows = stmt
                .query_map([], |r| {
                    let (file, chunks): (Option<i64>, i64) = (r.get(3)?, r.get(4)?);
                    Ok(Removal {
                        seq: r.get(0)?,
                        owner: r.get(1)?,
                        store_id: r.get(2)?,
                        file: file.map(|f| (f, chunks)),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn dequeue(&self, seq: i64) -> Result<()> {
        self.transaction(|tx| {
            tx.execute("DELETE FROM removals WHERE seq = ?1", [seq])
                .map(drop)
        })
    }
}

impl Shared {
    /// Removes a queued removal's vectors from the index (an index already gone has
    /// none), then dequeues it. Needs no lock: nothing writes vectors of a file or store
    /// whose row is gone or no longer in progress.
    pub(crate) fn carry_out(&self, r: &Removal) -> Result<()> {
        let (owner, name) = (index_owner(&r.owner), index_name(&r.store_id));
        let ignore_gone = |done: std::result::Result<(), VectorError>| match done {
            Ok(()) | Err(VectorError::NoIndex(_)) => Ok(()),
            Err(e) => Err(e),
        };
        match r.file {
            None => ignore_gone(self.vectors.delete_index(&owner, &name))?,
            Some((seq, chunks)) => {
                let ids: Vec<String> = (0..chunks).map(|n| chunk_id(seq, n)).collect();
                for part in ids.chunks(self.vectors.limits().max_batch.max(1)) {
                    ignore_gone(self.vectors.delete_by_ids(&owner, &name, part).map(drop))?;
                }
            }
        }
        self.db.dequeue(r.seq)
    }

    /// Carries out each removal in turn.
    pub(crate) fn carry_out_all(&self, removals: &[Removal]) -> Result<()> {
        removals.iter().try_for_each(|r| self.carry_out(r))
    }

    /// Deletes `owner`'s uploaded file `file_id` and everything retrieval kept of it
    /// (see the module's doc); true if the file existed. Blocks.
    pub(crate) fn delete_uploaded(&self, owner: &str, file_id: &str) -> Result<bool> {
        if !kiln_files::is_valid_id(file_id) {
            return Ok(false);
        }
        let (existed, removals) = {
            let _w = self.lock_writes();
            let removals = self.db.begin_file_delete(owner, file_id)?;
            let existed = self.files.delete(owner, file_id)?;
            self.db.end_file_delete(owner, file_id)?;
            (existed, removals)
        };
        self.carry_out_all(&removals)?;
        Ok(existed)
    }

    /// Finishes at open what a crash cut short: file deletes with a tombstone, then
    /// attachments of files deleted by a kiln that left them behind, then every queued
    /// removal.
    pub(crate) fn recover(&self) -> Result<()> {
        for (owner, file_id) in self.db.file_deletes()? {
            tracing::info!(
                file = file_id,
                "vector stores: finishing a file delete cut short"
            );
            self.delete_uploaded(&owner, &file_id)?;
        }
        for (owner, file_id) in self.db.attached_files()? {
            if self.files.get(&owner, &file_id)?.is_none() {
                tracing::info!(file = file_id, "vector stores: detaching a deleted file");
                self.delete_uploaded(&owner, &file_id)?;
            }
        }
        let pending = self.db.removals()?;
        if !pending.is_empty() {
            tracing::info!(
                removals = pending.len(),
                "vector stores: removing vectors a restart left behind"
            );
        }
        self.carry_out_all(&pending)
    }
}
