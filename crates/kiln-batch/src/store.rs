//! Batches in SQLite: one row per batch (its settings, status, times, counts and token
//! sums) and one row per input line (the request to run, then its result).
//!
//! A line's result, the batch's counts and its token sums change in one transaction,
//! and only while the line is still pending: a line run twice (a crash between running
//! it and storing it) is stored once. Every client query filters by the key; another
//! key's batches are not found.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use kiln_api::batches::BatchErrors;
use kiln_db::{to_i64, to_u64, DbError, Schema};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{BatchError, Result};
use crate::row::{read_row, BatchRow, Kind, LineResult, LineRow, NewLine, Status};

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS batches (
    id                TEXT PRIMARY KEY,
    key_id            TEXT NOT NULL,
    key_label         TEXT,
    kind              TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    input_file_id     TEXT,
    completion_window TEXT NOT NULL,
    metadata          TEXT,
    status            TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    in_progress_at    INTEGER,
    finalizing_at     INTEGER,
    completed_at      INTEGER,
    failed_at         INTEGER,
    expired_at        INTEGER,
    cancelling_at     INTEGER,
    cancelled_at      INTEGER,
    errors            TEXT,
    output_file_id    TEXT,
    error_file_id     TEXT,
    total             INTEGER NOT NULL DEFAULT 0,
    completed         INTEGER NOT NULL DEFAULT 0,
    failed            INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_by_key ON batches (key_id, kind, created_at);
CREATE TABLE IF NOT EXISTS lines (
    batch_id    TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line        INTEGER NOT NULL,
    custom_id   TEXT,
    request     TEXT,
    done        INTEGER NOT NULL DEFAULT 0,
    req_id      TEXT,
    status_code INTEGER,
    response    TEXT,
    error_code  TEXT,
    error_msg   TEXT,
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX IF NOT EXISTS lines_pending ON lines (batch_id, done, line);";

const SCHEMA: Schema = Schema {
    what: "batch store",
    sql: &[TABLES],
    version: 1,
};

pub struct BatchStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

const COLUMNS: &str = "id, key_id, key_label, kind, endpoint, input_file_id, completion_window,
    metadata, status, created_at, expires_at, in_progress_at, finalizing_at, completed_at,
    failed_at, expired_at, cancelling_at, cancelled_at, errors, output_file_id,
    error_file_id, total, completed, failed, prompt_tokens, cached_tokens, completion_tokens";

impl BatchStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            conn: Mutex::new(kiln_db::open(path, &SCHEMA)?),
            path: path.to_path_buf(),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sql(&self, source: rusqlite::Error) -> BatchError {
        DbError::sql(SCHEMA.what, &self.path, source).into()
    }

    pub fn insert(&self, b: &BatchRow) -> Result<()> {
        let metadata = b.metadata.as_ref().map(json);
        self.conn()
            .execute(
                "INSERT INTO batches (id, key_id, key_label, kind, endpoint, input_file_id,
                     completion_window, metadata, status, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    b.id,
                    b.caller.key_id,
                    b.caller.label,
                    b.kind.as_str(),
                    b.endpoint,
                    b.input_file_id,
                    b.completion_window,
                    metadata,
                    b.status.as_str(),
                    to_i64(b.times.created_at),
                    to_i64(b.times.expires_at),
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The batch `id` of `key_id` and `kind`.
    pub fn get(&self, key_id: &str, kind: Kind, id: &str) -> Result<Option<BatchRow>> {
        let sql =
            format!("SELECT {COLUMNS} FROM batches WHERE id = ?1 AND key_id = ?2 AND kind = ?3");
        let conn = self.conn();
        let row = conn
            .query_row(&sql, params![id, key_id, kind.as_str()], read_row)
            .optional()
            .map_err(|e| self.sql(e))?;
        row.transpose()
    }

    /// The batch `id` whoever owns it (the drivers).
    pub fn get_any(&self, id: &str) -> Result<Option<BatchRow>> {
        let sql = format!("SELECT {COLUMNS} FROM batches WHERE id = ?1");
        let conn = self.conn();
        let row = conn
            .query_row(&sql, params![id], read_row)
            .optional()
            .map_err(|e| self.sql(e))?;
        row.transpose()
    }

    /// A page of `key_id`'s OpenAI batches, newest first, after the batch `after`.
    pub fn list(
        &self,
        key_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<BatchRow>, bool)> {
        let conn = self.conn();
        let cursor = match after {
            Some(id) => conn
                .query_row(
                    "SELECT created_at, rowid FROM batches WHERE id = ?1 AND key_id = ?2",
                    params![id, key_id],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )
                .optional()
                .map_err(|e| self.sql(e))?
                .ok_or_else(|| BatchError::NotFound {
                    what: "batch",
                    id: id.to_string(),
                })?,
            None => (i64::MAX, i64::MAX),
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM batches WHERE key_id = ?1 AND kind = 'openai'
                 AND (created_at, rowid) < (?2, ?3)
             ORDER BY created_at DESC, rowid DESC LIMIT ?4"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(
                params![key_id, cursor.0, cursor.1, to_i64(limit as u64 + 1)],
                read_row,
            )
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        let mut rows = rows.into_iter().collect::<Result<Vec<_>>>()?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        Ok((rows, more))
    }

    /// Unfinished batches of every key, oldest first (what a start resumes).
    pub fn unfinished(&self) -> Result<Vec<BatchRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM batches
             WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
             ORDER BY created_at, rowid"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], read_row)
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        rows.into_iter().collect()
    }

    /// Unfinished batches of `key_id`.
    pub fn unfinished_of(&self, key_id: &str) -> Result<usize> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM batches WHERE key_id = ?1
                 AND status IN ('validating', 'in_progress', 'finalizing', 'cancelling')",
                params![key_id],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))?;
        Ok(to_u64(n) as usize)
    }

    /// Moves the batch to `status` at `now`, only from one of `from` (false if it was
    /// elsewhere).
    pub fn set_status(&self, id: &str, from: &[Status], status: Status, now: u64) -> Result<bool> {
        let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        let placeholders = (0..from.len())
            .map(|i| format!("?{}", i + 4))
            .collect::<Vec<_>>();
        let sql = format!(
            "UPDATE batches SET status = ?1, {} = ?2 WHERE id = ?3 AND status IN ({})",
            status.time_column(),
            placeholders.join(", ")
        );
        let mut values: Vec<rusqlite::types::Value> = vec![
            status.as_str().to_string().into(),
            to_i64(now).into(),
            id.to_string().into(),
        ];
        values.extend(
            from.iter()
                .map(|s| rusqlite::types::Value::from(s.to_string())),
        );
        let n = self
            .conn()
            .execute(&sql, rusqlite::params_from_iter(values))
            .map_err(|e| self.sql(e))?;
        Ok(n == 1)
    }

    /// Fails an unfinished batch with `errors`.
    pub fn fail(&self, id: &str, errors: &BatchErrors, now: u64) -> Result<()> {
        self.conn()
            .execute(
                "UPDATE batches SET status = 'failed', failed_at = ?1, errors = ?2
                 WHERE id = ?3 AND status IN ('validating', 'finalizing', 'cancelling')",
                params![to_i64(now), json(errors), id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Drops the lines a validation cut by a crash had written.
    pub fn clear_lines(&self, id: &str) -> Result<()> {
        let conn = self.conn();
        conn.execute("DELETE FROM lines WHERE batch_id = ?1", params![id])
            .map_err(|e| self.sql(e))?;
        conn.execute(
            "UPDATE batches SET total = 0, completed = 0, failed = 0 WHERE id = ?1",
            params![id],
        )
        .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Adds validated lines in one transaction; a line that can't run counts as failed.
    pub fn add_lines(&self, id: &str, lines: &[NewLine]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.sql(e))?;
        let mut failed = 0i64;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO lines (batch_id, line, custom_id, request, done, error_code, error_msg)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(|e| self.sql(e))?;
            for l in lines {
                let (request, done, code, msg) = match &l.request {
                    Ok(r) => (Some(r.as_str()), 0, None, None),
                    Err((c, m)) => {
                        failed += 1;
                        (None, 1, Some(c.as_str()), Some(m.as_str()))
                    }
                };
                stmt.execute(params![
                    id,
                    to_i64(l.line),
                    l.custom_id,
                    request,
                    done,
                    code,
                    msg
                ])
                .map_err(|e| self.sql(e))?;
            }
        }
        tx.execute(
            "UPDATE batches SET total = total + ?1, failed = failed + ?2 WHERE id = ?3",
            params![lines.len() as i64, failed, id],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))
    }

    /// Whether the runner has answered any of the batch's lines yet.
    pub fn any_run(&self, id: &str) -> Result<bool> {
        self.conn()
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM lines
                                WHERE batch_id = ?1 AND status_code IS NOT NULL)",
                params![id],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))
    }

    /// Up to `limit` pending lines after line `after`, in order: (line, request).
    pub fn pending(
        &self,
        id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT line, request FROM lines
                 WHERE batch_id = ?1 AND done = 0 AND line > ?2 ORDER BY line LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        let after = after.map_or(-1, to_i64);
        let rows = stmt
            .query_map(params![id, after, to_i64(limit as u64)], |r| {
                Ok((
                    to_u64(r.get(0)?),
                    r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                ))
            })
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    /// Stores a pending line's result and counts it, in one transaction; false (and
    /// nothing changed) if the line was already done or the batch no longer runs (a
    /// line that finishes after a cancel or expiry is not written past the output).
    pub fn record(&self, id: &str, line: u64, r: &LineResult) -> Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.sql(e))?;
        let n = tx
            .execute(
                "UPDATE lines SET done = 1, req_id = ?1, status_code = ?2, response = ?3
                 WHERE batch_id = ?4 AND line = ?5 AND done = 0 AND EXISTS (
                     SELECT 1 FROM batches WHERE id = ?4 AND status = 'in_progress')",
                params![r.req_id, r.status_code, r.response, id, to_i64(line)],
            )
            .map_err(|e| self.sql(e))?;
        if n == 0 {
            return Ok(false);
        }
        let ok = i64::from(r.status_code == 200);
        tx.execute(
            "UPDATE batches SET completed = completed + ?1, failed = failed + ?2,
                 prompt_tokens = prompt_tokens + ?3, cached_tokens = cached_tokens + ?4,
                 completion_tokens = completion_tokens + ?5
             WHERE id = ?6",
            params![
                ok,
                1 - ok,
                to_i64(r.usage.prompt),
                to_i64(r.usage.cached),
                to_i64(r.usage.completion),
                id
            ],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(true)
    }

    /// Calls `f` on every line of the batch in order, `chunk` rows per query (the
    /// lock is not held across chunks).
    pub fn for_each_line(&self, id: &str, mut f: impl FnMut(LineRow) -> Result<()>) -> Result<()> {
        const CHUNK: i64 = 1000;
        let mut after = -1i64;
        loop {
            let rows = {
                let conn = self.conn();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT line, custom_id, done, req_id, status_code, response,
                                error_code, error_msg
                         FROM lines WHERE batch_id = ?1 AND line > ?2 ORDER BY line LIMIT ?3",
                    )
                    .map_err(|e| self.sql(e))?;
                let rows = stmt
                    .query_map(params![id, after, CHUNK], |r| {
                        let code: Option<String> = r.get(6)?;
                        let msg: Option<String> = r.get(7)?;
                        Ok(LineRow {
                            line: to_u64(r.get(0)?),
                            custom_id: r.get(1)?,
                            done: r.get::<_, i64>(2)? != 0,
                            req_id: r.get(3)?,
                            status_code: r.get::<_, Option<i64>>(4)?.map(|c| c as u16),
                            response: r.get(5)?,
                            error: code.map(|c| (c, msg.unwrap_or_default())),
                        })
                    })
                    .map_err(|e| self.sql(e))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(|e| self.sql(e))?
            };
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = to_i64(last.line);
            for row in rows {
                f(row)?;
            }
        }
    }

    /// Ends the batch: its final status and output files, in one statement.
    pub fn finish(
        &self,
        id: &str,
        status: Status,
        files: (Option<&str>, Option<&str>),
        now: u64,
    ) -> Result<()> {
        // Lines an expiry left unrun are failed (they are in the error file).
        let unrun = if status == Status::Expired {
            "failed = failed + (SELECT COUNT(*) FROM lines WHERE batch_id = ?5 AND done = 0),"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE batches SET {unrun} status = ?1, {} = ?2, output_file_id = ?3,
                 error_file_id = ?4
             WHERE id = ?5",
            status.time_column()
        );
        self.conn()
            .execute(
                &sql,
                params![status.as_str(), to_i64(now), files.0, files.1, id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
