//! The store: its directory, its database, and every read and delete.
//!
//! Rows and contents are kept in step by order alone: contents are in place before a
//! row names them (see [`crate::Upload::finish`]), and a delete removes the row before
//! the contents. One lock (the connection's mutex) covers a row change together with its
//! file change, so no caller in this process sees one without the other, and the
//! directory is locked against other processes, whose uploads the sweep at open would
//! otherwise remove.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::params;

use crate::error::FileError;
use crate::id::{clean_filename, is_valid_id, new_id};
use crate::inner::{
    check_caps, check_owner, Inner, Limits, StoredFile, CONTENT_DIR, DB_FILE, INCOMING_DIR, SCHEMA,
};
use crate::list::{self, ListQuery, Page};
use crate::sweep;
use crate::upload::Upload;

/// The files of every owner, in one directory.
pub struct FileStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("db_path", &self.inner.db_path)
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl FileStore {
    /// Opens (creating if needed) the store in `dir`, locks it for this process, empties
    /// `files/incoming/` and removes contents that no row names.
    pub fn open(dir: &Path, limits: Limits) -> Result<Self, FileError> {
        let content_dir = dir.join(CONTENT_DIR);
        let incoming_dir = content_dir.join(INCOMING_DIR);
        std::fs::create_dir_all(&incoming_dir)
            .map_err(|e| FileError::io("create the upload directory", &incoming_dir, e))?;
        let lock = kiln_db::lock_dir(&content_dir)?;
        let db_path = dir.join(DB_FILE);
        let conn = kiln_db::open(&db_path, &SCHEMA)?;
        let inner = Inner {
            conn: Mutex::new(conn),
            db_path,
            content_dir,
            incoming_dir,
            limits,
            _lock: lock,
        };
        sweep::at_open(&inner)?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The caps this store enforces.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Starts a streamed upload of `owner`'s `filename` with a new id; nothing is
    /// visible until [`Upload::finish`]. Fails early when the owner already stores as
    /// many files as allowed.
    pub fn upload(&self, owner: &str, filename: &str, purpose: &str) -> Result<Upload, FileError> {
        self.start(new_id(), owner, filename, purpose, false)
    }

    /// Like [`FileStore::upload`] but with a caller-chosen id (Kiln writes batch output
    /// files with ids derived from the batch id, so finalizing twice after a crash
    /// replaces rather than duplicates): finishing replaces `owner`'s file with that
    /// id, if any. An id that is not a file id is [`FileError::InvalidId`]; one that
    /// names another owner's file is [`FileError::IdTaken`].
    pub fn upload_as(
        &self,
        id: &str,
        owner: &str,
        filename: &str,
        purpose: &str,
    ) -> Result<Upload, FileError> {
        if !is_valid_id(id) {
            return Err(FileError::InvalidId(id.to_string()));
        }
        self.start(id.to_string(), owner, filename, purpose, true)
    }

    fn start(
        &self,
        id: String,
        owner: &str,
        filename: &str,
        purpose: &str,
        replace: bool,
    ) -> Result<Upload, FileError> {
        let filename = clean_filename(filename)?;
        {
            let conn = self.inner.conn();
            check_owner(&self.inner, &conn, &id, owner)?;
            check_caps(&self.inner, &conn, &id, owner, 0)?;
        }
        Upload::start(
            Arc::clone(&self.inner),
            id,
            owner.to_string(),
            filename,
            purpose.to_string(),
            replace,
        )
    }

    /// `owner`'s file `id`, if it has one.
    pub fn get(&self, owner: &str, id: &str) -> Result<Option<StoredFile>, FileError> {
        let conn = self.inner.conn();
        self.inner.get(&conn, owner, id)
    }

    /// A page of `owner`'s files, in `query`'s order.
    pub fn list(&self, owner: &str, query: &ListQuery) -> Result<Page, FileError> {
        let conn = self.inner.conn();
        list::page(&conn, owner, query).map_err(|e| self.inner.sql(e))
    }

    /// `owner`'s file `id` with its contents opened for reading; `None` if it has no such
    /// file. The contents are opened under the store's lock, so they are the ones the
    /// metadata describes even if the file is replaced or deleted while being read.
    pub fn open_content(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<(StoredFile, File)>, FileError> {
        let conn = self.inner.conn();
        let Some(file) = self.inner.get(&conn, owner, id)? else {
            return Ok(None);
        };
        let path = self.inner.content_path(&file.id);
        let handle =
            File::open(&path).map_err(|e| FileError::io("open the stored file", &path, e))?;
        Ok(Some((file, handle)))
    }

    /// `owner`'s file `id` and the path of its contents (for a reader that streams it);
    /// `None` if it has no such file. A delete or replace may come before the reader
    /// opens the path; [`FileStore::open_content`] has no such gap.
    pub fn content_path(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<(StoredFile, PathBuf)>, FileError> {
        let Some(file) = self.get(owner, id)? else {
            return Ok(None);
        };
        let path = self.inner.content_path(&file.id);
        Ok(Some((file, path)))
    }

    /// Deletes `owner`'s file `id`: its row in a transaction, then its contents. False
    /// when it had no such file.
    pub fn delete(&self, owner: &str, id: &str) -> Result<bool, FileError> {
        if !is_valid_id(id) {
            return Ok(false);
        }
        let conn = self.inner.conn();
        let n = conn
            .execute(
                "DELETE FROM files WHERE id = ?1 AND owner = ?2",
                params![id, owner],
            )
            .map_err(|e| self.inner.sql(e))?;
        if n == 0 {
            return Ok(false);
        }
        // Still under the lock, so an upload of the same id cannot land in between.
        let path = self.inner.content_path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // The row is gone, so the file is unreachable; the next open sweeps it.
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a deleted file's contents")
            }
        }
        Ok(true)
    }
}
