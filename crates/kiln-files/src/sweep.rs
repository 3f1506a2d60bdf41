//! Cleaning up at open what a crash left behind, so it never becomes visible or
//! takes space forever.
//!
//! A crash mid-upload leaves a partial file in `incoming/`; one between renaming the
//! contents into place and committing their row, or between deleting a row and its
//! contents, leaves contents no row names. Both are removed here. The directory is
//! locked by then, so nothing removed belongs to an upload still running. A row whose
//! contents are missing cannot come from a crash (contents always go in first and out
//! last); it is only logged, since removing rows because a disk is missing is worse.

use std::collections::HashSet;
use std::path::Path;

use crate::error::FileError;
use crate::id::is_valid_id;
use crate::inner::Inner;

/// Empties the upload directory and removes contents without a row.
pub(crate) fn at_open(inner: &Inner) -> Result<(), FileError> {
    empty_incoming(&inner.incoming_dir)?;
    let ids: HashSet<String> = {
        let conn = inner.conn();
        let mut stmt = conn
            .prepare("SELECT id FROM files")
            .map_err(|e| inner.sql(e))?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| inner.sql(e))?
            .collect::<rusqlite::Result<HashSet<_>>>()
            .map_err(|e| inner.sql(e))?;
        ids
    };
    let mut present = 0usize;
    for entry in read_dir(&inner.content_dir)? {
        let entry = entry.map_err(|e| FileError::io("list", &inner.content_dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // Only files with names this store writes; the lock file and `incoming/` are not
        // ids.
        if !is_valid_id(&name) || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if ids.contains(&name) {
            present += 1;
            continue;
        }
        let path = entry.path();
        tracing::info!(path = %path.display(), "removing file contents with no metadata (left by a crash)");
        std::fs::remove_file(&path)
            .map_err(|e| FileError::io("remove orphaned file contents", &path, e))?;
    }
    if present < ids.len() {
        tracing::warn!(
            dir = %inner.content_dir.display(),
            missing = ids.len() - present,
            "stored files whose contents are missing; reading them will fail"
        );
    }
    Ok(())
}

/// Removes everything in `dir` (uploads a crash cut short).
fn empty_incoming(dir: &Path) -> Result<(), FileError> {
    for entry in read_dir(dir)? {
        let entry = entry.map_err(|e| FileError::io("list", dir, e))?;
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let removed = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| FileError::io("remove an unfinished upload", &path, e))?;
        tracing::debug!(path = %path.display(), "removed an unfinished upload");
    }
    Ok(())
}

fn read_dir(dir: &Path) -> Result<std::fs::ReadDir, FileError> {
    std::fs::read_dir(dir).map_err(|e| FileError::io("list", dir, e))
}
