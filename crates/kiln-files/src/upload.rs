//! A streamed upload: chunks go to a partial file in `files/incoming/`, and only
//! [`Upload::finish`] makes the file visible.
//!
//! Finishing follows one order, so that a crash at any point leaves either no visible
//! file or a complete one: fsync the partial file, rename it to `files/<id>`, fsync the
//! directory, and only then commit the row that names it. Contents a crash strands
//! without a row are swept at the next open. Replacing a file first deletes its old row
//! (committed), so a crash mid-replace leaves no file rather than old metadata over new
//! contents. Dropping an unfinished upload removes its partial file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, Connection, TransactionBehavior};

use crate::error::FileError;
use crate::id::new_id;
use crate::inner::{check_caps, check_owner, insert, Inner, StoredFile};

/// Buffer between the caller's chunks and the partial file.
const WRITE_BUFFER: usize = 64 << 10;

/// An upload in progress; see [`crate::FileStore::upload`].
pub struct Upload {
    inner: Arc<Inner>,
    id: String,
    owner: String,
    filename: String,
    purpose: String,
    /// Whether finishing may replace the owner's file with this id (`upload_as`).
    replace: bool,
    /// The partial file, while it is this upload's to remove.
    partial: Option<PathBuf>,
    /// Open while chunks may still be written.
    file: Option<BufWriter<File>>,
    bytes: u64,
    /// Set once a chunk went past the size limit.
    too_large: bool,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("filename", &self.filename)
            .field("purpose", &self.purpose)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// Creates the partial file for `id`; `filename` is already cleaned.
    pub(crate) fn start(
        inner: Arc<Inner>,
        id: String,
        owner: String,
        filename: String,
        purpose: String,
        replace: bool,
    ) -> Result<Self, FileError> {
        // Its own random name: two uploads of one id (`upload_as`) never share it.
        let partial = inner.incoming_dir.join(format!("{}.part", new_id()));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&partial)
            .map_err(|e| FileError::io("create the upload file", &partial, e))?;
        Ok(Self {
            inner,
            id,
            owner,
            filename,
            purpose,
            replace,
            partial: Some(partial),
            file: Some(BufWriter::with_capacity(WRITE_BUFFER, file)),
            bytes: 0,
            too_large: false,
        })
    }

    /// The id the file will have.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Sets the purpose the file will be stored with. A form may send the purpose after
    /// the contents; it is only written with the row, at [`Upload::finish`].
    pub fn set_purpose(&mut self, purpose: &str) {
        self.purpose = purpose.to_string();
    }

    /// Appends `chunk`. Past the store's `max_file_bytes` it fails with
    /// [`FileError::TooLarge`] and removes the partial file; after any failure the upload
    /// is dead and every later call fails.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), FileError> {
        let limit = self.inner.limits.max_file_bytes;
        let Some(file) = self.file.as_mut() else {
            return Err(self.dead());
        };
        let len = chunk.len() as u64;
        if self.bytes.saturating_add(len) > limit {
            self.too_large = true;
            self.abandon();
            return Err(FileError::TooLarge { limit });
        }
        if let Err(e) = file.write_all(chunk) {
            let err = FileError::io("write the upload", self.partial_path(), e);
            self.abandon();
            return Err(err);
        }
        self.bytes += len;
        Ok(())
    }

    /// Makes the file visible: fsyncs the partial file, checks the owner's caps (count
    /// and total bytes, in the transaction that inserts the row; a file this one
    /// replaces is not counted), renames it to `files/<id>`, inserts the row and
    /// commits. An empty file is allowed.
    pub fn finish(mut self) -> Result<StoredFile, FileError> {
        let Some(writer) = self.file.take() else {
            return Err(self.dead());
        };
        let partial = self.partial_path();
        let file = writer
            .into_inner()
            .map_err(|e| FileError::io("write the upload", &partial, e.into_error()))?;
        file.sync_all()
            .map_err(|e| FileError::io("sync the upload", &partial, e))?;
        drop(file);

        let inner = Arc::clone(&self.inner);
        let mut conn = inner.conn();
        check_owner(&inner, &conn, &self.id, &self.owner)?;
        let exists = inner.get(&conn, &self.owner, &self.id)?.is_some();
        if exists && !self.replace {
            return Err(FileError::IdTaken(self.id.clone()));
        }
        if exists {
            // The old row goes first, on its own: from here until the new row commits,
            // a crash leaves contents with no row (swept at open), never a row over
            // contents it does not describe.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| inner.sql(e))?;
            check_caps(&inner, &tx, &self.id, &self.owner, self.bytes)?;
            tx.execute(
                "DELETE FROM files WHERE id = ?1 AND owner = ?2",
                params![self.id, self.owner],
            )
            .map_err(|e| inner.sql(e))?;
            tx.commit().map_err(|e| inner.sql(e))?;
        }
        let dest = inner.content_path(&self.id);
        match self.place(&mut conn, &partial, &dest) {
            Ok(stored) => Ok(stored),
            Err(e) => {
                // No row names this id now (another owner's was refused above, ours is
                // gone), so whatever is at `dest` is unreachable.
                if let Err(rm) = std::fs::remove_file(&dest) {
                    if rm.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = %dest.display(), error = %rm, "cannot remove contents after a failed upload");
                    }
                }
                Err(e)
            }
        }
    }

    /// Checks the caps, moves the contents into place and commits their row.
    fn place(
        &mut self,
        conn: &mut Connection,
        partial: &Path,
        dest: &Path,
    ) -> Result<StoredFile, FileError> {
        let inner = Arc::clone(&self.inner);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| inner.sql(e))?;
        check_caps(&inner, &tx, &self.id, &self.owner, self.bytes)?;
        std::fs::rename(partial, dest)
            .map_err(|e| FileError::io("move the upload into place", dest, e))?;
        self.partial = None;
        sync_dir(&inner.content_dir);
        let stored = StoredFile {
            id: self.id.clone(),
            owner: self.owner.clone(),
            filename: self.filename.clone(),
            purpose: self.purpose.clone(),
            bytes: self.bytes,
            created_at: kiln_db::unix_now(),
        };
        insert(&tx, &stored).map_err(|e| inner.sql(e))?;
        tx.commit().map_err(|e| inner.sql(e))?;
        Ok(stored)
    }

    fn partial_path(&self) -> PathBuf {
        self.partial.clone().unwrap_or_default()
    }

    /// The error for a call on an upload that already failed.
    fn dead(&self) -> FileError {
        if self.too_large {
            return FileError::TooLarge {
                limit: self.inner.limits.max_file_bytes,
            };
        }
        FileError::io(
            "write the upload",
            self.partial_path(),
            std::io::Error::other("the upload already failed"),
        )
    }

    /// Closes and removes the partial file.
    fn abandon(&mut self) {
        self.file = None;
        if let Some(path) = self.partial.take() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Swept at the next open.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove an unfinished upload")
                }
            }
        }
    }
}

impl Drop for Upload {
    /// An unfinished upload removes its partial file.
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Makes a rename in `dir` durable, where the platform allows (best effort: the
/// contents themselves are already synced).
fn sync_dir(dir: &Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot sync the directory");
    }
}
