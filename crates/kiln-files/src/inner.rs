//! What the store, its uploads, listings and sweep share: the schema, a file's row,
//! the caps, the open database and directory, and the row-level checks and writes.

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use kiln_db::{to_i64, to_u64, DbError, Schema};
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::FileError;
use crate::id::is_valid_id;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS files (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    filename   TEXT NOT NULL,
    purpose    TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_owner ON files (owner, created_at);";

pub(crate) const SCHEMA: Schema = Schema {
    what: "file store",
    sql: &[TABLES],
    version: 1,
};

/// The database file inside the store's directory.
pub(crate) const DB_FILE: &str = "files.sqlite3";
/// The contents directory inside the store's directory.
pub(crate) const CONTENT_DIR: &str = "files";
/// Uploads in progress, inside the contents directory.
pub(crate) const INCOMING_DIR: &str = "incoming";

/// Columns read into a [`StoredFile`], in [`row_to_file`]'s order.
pub(crate) const COLUMNS: &str = "id, owner, filename, purpose, bytes, created_at";

/// One stored file's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub id: String,
    /// The key id that uploaded it; only that owner sees it.
    pub owner: String,
    /// The name the client sent (its last path component).
    pub filename: String,
    /// What it is for (`batch`, `batch_output`, ...), as given.
    pub purpose: String,
    /// Size of the contents.
    pub bytes: u64,
    /// Unix seconds when the upload finished.
    pub created_at: u64,
}

/// Caps on what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single file.
    pub max_file_bytes: u64,
    /// Most bytes one owner's files may total.
    pub max_bytes_per_owner: u64,
    /// Most files one owner may store.
    pub max_files_per_owner: u64,
}

impl Default for Limits {
    /// 512 MiB per file; 10 GiB and 10,000 files per owner.
    fn default() -> Self {
        Self {
            max_file_bytes: 512 << 20,
            max_bytes_per_owner: 10 << 30,
            max_files_per_owner: 10_000,
        }
    }
}

/// What the store and its uploads share.
pub(crate) struct Inner {
    pub(crate) conn: Mutex<Connection>,
    pub(crate) db_path: PathBuf,
    pub(crate) content_dir: PathBuf,
    pub(crate) incoming_dir: PathBuf,
    pub(crate) limits: Limits,
    /// Held while the store is open: this process owns the directory.
    pub(crate) _lock: File,
}

impl Inner {
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll
        // back on drop), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn sql(&self, source: rusqlite::Error) -> FileError {
        DbError::sql(SCHEMA.what, &self.db_path, source).into()
    }

    /// Where the contents of `id` live; `id` must have passed [`is_valid_id`].
    pub(crate) fn content_path(&self, id: &str) -> PathBuf {
        self.content_dir.join(id)
    }

    /// `owner`'s file `id`, read under `conn`'s lock.
    pub(crate) fn get(
        &self,
        conn: &Connection,
        owner: &str,
        id: &str,
    ) -> Result<Option<StoredFile>, FileError> {
        if !is_valid_id(id) {
            return Ok(None);
        }
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM files WHERE id = ?1 AND owner = ?2"
        ))
        .and_then(|mut stmt| stmt.query_row(params![id, owner], row_to_file).optional())
        .map_err(|e| self.sql(e))
    }
}

/// Refuses `id` when another owner's file has it.
pub(crate) fn check_owner(
    inner: &Inner,
    conn: &Connection,
    id: &str,
    owner: &str,
) -> Result<(), FileError> {
    let holder: Option<String> = conn
        .query_row("SELECT owner FROM files WHERE id = ?1", params![id], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|e| inner.sql(e))?;
    match holder {
        Some(h) if h != owner => Err(FileError::IdTaken(id.to_string())),
        _ => Ok(()),
    }
}

/// Refuses a file of `bytes` for `owner` past its caps; a file it replaces (`id`) is
/// not counted.
pub(crate) fn check_caps(
    inner: &Inner,
    conn: &Connection,
    id: &str,
    owner: &str,
    bytes: u64,
) -> Result<(), FileError> {
    let (count, total): (i64, Option<i64>) = conn
        .query_row(
            "SELECT COUNT(*), SUM(bytes) FROM files WHERE owner = ?1 AND id != ?2",
            params![owner, id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(|e| inner.sql(e))?;
    let limits = &inner.limits;
    if to_u64(count).saturating_add(1) > limits.max_files_per_owner {
        return Err(FileError::OwnerFull {
            what: "files",
            limit: limits.max_files_per_owner,
        });
    }
    if to_u64(total.unwrap_or(0)).saturating_add(bytes) > limits.max_bytes_per_owner {
        return Err(FileError::OwnerFull {
            what: "bytes",
            limit: limits.max_bytes_per_owner,
        });
    }
    Ok(())
}

/// Inserts `f`'s row (the id must be free).
pub(crate) fn insert(conn: &Connection, f: &StoredFile) -> rusqlite::Result<()> {
    conn.execute(
        &format!("INSERT INTO files ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            f.id,
            f.owner,
            f.filename,
            f.purpose,
            to_i64(f.bytes),
            to_i64(f.created_at)
        ],
    )
    .map(|_| ())
}

/// A row selected with [`COLUMNS`].
pub(crate) fn row_to_file(r: &Row<'_>) -> rusqlite::Result<StoredFile> {
    Ok(StoredFile {
        id: r.get(0)?,
        owner: r.get(1)?,
        filename: r.get(2)?,
        purpose: r.get(3)?,
        bytes: to_u64(r.get(4)?),
        created_at: to_u64(r.get(5)?),
    })
}
