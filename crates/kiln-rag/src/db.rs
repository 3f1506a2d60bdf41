//! The vector-store database: stores, attached files (with their chunks' text), and
//! file batches. Every query a client causes filters by the owner's key (directly, or
//! through a store the caller was found to own), so another key's rows are not found.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use kiln_api::vector_stores::{FileCounts, LastError};
use kiln_db::{to_i64, to_u64, DbError};
use rusqlite::types::Value as Sql;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};
use serde_json::{Map, Value};

use crate::error::{RagError, Result};
use crate::page::{ListQuery, Order};
use crate::schema::{DB_FILE, SCHEMA};

/// A store's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoreRow {
    pub id: String,
    pub owner: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub metadata: Map<String, Value>,
    pub created_at: u64,
    pub last_active_at: u64,
    pub expires_days: Option<u64>,
    /// The embedding model its vectors came from, and their size.
    pub embedder: String,
    pub dimensions: usize,
}

/// An attached file's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileRow {
    pub seq: i64,
    pub store_id: String,
    pub file_id: String,
    pub filename: String,
    pub owner: String,
    pub owner_label: Option<String>,
    pub batch_id: Option<String>,
    pub created_at: u64,
    /// `in_progress`, `completed`, `failed` or `cancelled`.
    pub status: String,
    pub error: Option<LastError>,
    pub chunk_size: u64,
    pub chunk_overlap: u64,
    pub attributes: Map<String, Value>,
    /// Set before the first vector is written.
    pub chunks: Option<i64>,
    pub usage_bytes: u64,
}

pub(crate) struct RagDb {
    conn: Mutex<Connection>,
    path: PathBuf,
}

const STORE_COLUMNS: &str = "id, owner, name, description, metadata, created_at, \
    last_active_at, expires_days, embedder, dimensions";
const FILE_COLUMNS: &str = "seq, store_id, file_id, filename, owner, owner_label, batch_id, \
    created_at, status, error_code, error_message, chunk_size, chunk_overlap, attributes, \
    chunks, usage_bytes";

fn json_map(text: &str) -> Map<String, Value> {
    serde_json::from_str(text).unwrap_or_default()
}

fn store_row(r: &Row<'_>) -> rusqlite::Result<StoreRow> {
    Ok(StoreRow {
        id: r.get(0)?,
        owner: r.get(1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        metadata: json_map(&r.get::<_, String>(4)?),
        created_at: to_u64(r.get(5)?),
        last_active_at: to_u64(r.get(6)?),
        expires_days: r.get::<_, Option<i64>>(7)?.map(to_u64),
        embedder: r.get(8)?,
        dimensions: to_u64(r.get(9)?) as usize,
    })
}

fn file_row(r: &Row<'_>) -> rusqlite::Result<FileRow> {
    let code: Option<String> = r.get(9)?;
    let message: Option<String> = r.get(10)?;
    Ok(FileRow {
        seq: r.get(0)?,
        store_id: r.get(1)?,
        file_id: r.get(2)?,
        filename: r.get(3)?,
        owner: r.get(4)?,
        owner_label: r.get(5)?,
        batch_id: r.get(6)?,
        created_at: to_u64(r.get(7)?),
        status: r.get(8)?,
        error: code.map(|code| LastError {
            code,
            message: message.unwrap_or_default(),
        }),
        chunk_size: to_u64(r.get(11)?),
        chunk_overlap: to_u64(r.get(12)?),
        attributes: json_map(&r.get::<_, String>(13)?),
        chunks: r.get(14)?,
        usage_bytes: to_u64(r.get(15)?),
    })
}

impl RagDb {
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(DB_FILE);
        let conn = kiln_db::open(&path, &SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // SQLite rolls back an unfinished transaction on drop, so a poisoned lock is
        // still consistent.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, e: rusqlite::Error) -> RagError {
        DbError::sql(SCHEMA.what, &self.path, e).into()
    }

    /// Runs `f` in one transaction, committed if it succeeds.
    pub(crate) fn transaction<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn();
        let run = |conn: &mut Connection| {
            let tx = conn.transaction()?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        };
        run(&mut conn).map_err(|e| self.err(e))
    }

    pub(crate) fn insert_store(&self, s: &StoreRow) -> Result<()> {
        self.conn()
            .execute(
                &format!("INSERT INTO stores ({STORE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
                params![
                    s.id,
                    s.owner,
                    s.name,
                    s.description,
                    Value::Object(s.metadata.clone()).to_string(),
                    to_i64(s.created_at),
                    to_i64(s.last_active_at),
                    s.expires_days.map(to_i64),
                    s.embedder,
                    s.dimensions as i64,
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub(crate) fn store(&self, owner: &str, id: &str) -> Result<Option<StoreRow>> {
        self.conn()
            .query_row(
                &format!("SELECT {STORE_COLUMNS} FROM stores WHERE id = ?1 AND owner = ?2"),
                params![id, owner],
                store_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub(crate) fn count_stores(&self, owner: &str) -> Result<u64> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM stores WHERE owner = ?1",
                [owner],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok(to_u64(n))
    }

    pub(crate) fn list_stores(&self, owner: &str, q: &ListQuery) -> Result<(Vec<StoreRow>, bool)> {
        let conn = self.conn();
        let cursor = |id: &str| {
            conn.query_row(
                "SELECT seq FROM stores WHERE id = ?1 AND owner = ?2",
                params![id, owner],
                |r| r.get::<_, i64>(0),
            )
            .optional()
        };
        let Some(bounds) = q.bounds(cursor).map_err(|e| self.err(e))? else {
            return Ok((Vec::new(), false));
        };
        let mut args = vec![Sql::Text(owner.into())];
        let cond = bounds.sql(&mut args);
        page(
            &conn,
            &format!("SELECT {STORE_COLUMNS} FROM stores WHERE owner = ? {cond}"),
            q,
            args,
            store_row,
        )
        .map_err(|e| self.err(e))
    }

    /// Changes what is given; `expires_days: Some(None)` removes the expiry.
    pub(crate) fn update_store(
        &self,
        id: &str,
        name: Option<&str>,
        expires_days: Option<Option<u64>>,
        metadata: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let conn = self.conn();
        let run = |sql: &str, v: Sql| conn.execute(sql, params![v, id]).map(drop);
        let result = (|| {
            if let Some(n) = name {
                run(
                    "UPDATE stores SET name = ?1 WHERE id = ?2",
                    Sql::Text(n.into()),
                )?;
            }
            if let Some(days) = expires_days {
                let v = days.map_or(Sql::Null, |d| Sql::Integer(to_i64(d)));
                run("UPDATE stores SET expires_days = ?1 WHERE id = ?2", v)?;
            }
            if let Some(m) = metadata {
                let v = Sql::Text(Value::Object(m.clone()).to_string());
                run("UPDATE stores SET metadata = ?1 WHERE id = ?2", v)?;
            }
            Ok(())
        })();
        result.map_err(|e| self.err(e))
    }

    /// Marks the store as used now (its expiry counts from here).
    pub(crate) fn touch_store(&self, id: &str, now: u64) -> Result<()> {
        self.conn()
            .execute(
                "UPDATE stores SET last_active_at = ?1 WHERE id = ?2",
                params![to_i64(now), id],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Counts of the store's files by status (of `batch` only, when given), and the
    /// bytes they use.
    pub(crate) fn file_counts(
        &self,
        store_id: &str,
        batch: Option<&str>,
    ) -> Result<(FileCounts, u64)> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT status, COUNT(*), SUM(usage_bytes) FROM store_files
                 WHERE store_id = ?1 AND (?2 IS NULL OR batch_id = ?2) GROUP BY status",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![store_id, batch], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    to_u64(r.get(1)?),
                    to_u64(r.get::<_, Option<i64>>(2)?.unwrap_or(0)),
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut c = FileCounts::default();
        let mut bytes = 0;
        for row in rows {
            let (status, n, b) = row.map_err(|e| self.err(e))?;
            bytes += b;
            c.total += n;
            match status.as_str() {
                "in_progress" => c.in_progress += n,
                "completed" => c.completed += n,
                "failed" => c.failed += n,
                _ => c.cancelled += n,
            }
        }
        Ok((c, bytes))
    }

    /// Attaches a file; `None` if it is attached already.
    pub(crate) fn insert_file(&self, f: &FileRow) -> Result<Option<i64>> {
        let conn = self.conn();
        let n = conn
            .execute(
                "INSERT INTO store_files (store_id, file_id, filename, owner, owner_label, batch_id,
                    created_at, status, chunk_size, chunk_overlap, attributes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'in_progress', ?8, ?9, ?10)
                 ON CONFLICT (store_id, file_id) DO NOTHING",
                params![
                    f.store_id,
                    f.file_id,
                    f.filename,
                    f.owner,
                    f.owner_label,
                    f.batch_id,
                    to_i64(f.created_at),
                    to_i64(f.chunk_size),
                    to_i64(f.chunk_overlap),
                    Value::Object(f.attributes.clone()).to_string(),
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok((n == 1).then(|| conn.last_insert_rowid()))
    }

    pub(crate) fn file(&self, store_id: &str, file_id: &str) -> Result<Option<FileRow>> {
        self.conn()
            .query_row(
                &format!(
                    "SELECT {FILE_COLUMNS} FROM store_files WHERE store_id = ?1 AND file_id = ?2"
                ),
                params![store_id, file_id],
                file_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub(crate) fn file_by_seq(&self, seq: i64) -> Result<Option<FileRow>> {
        self.conn()
            .query_row(
                &format!("SELECT {FILE_COLUMNS} FROM store_files WHERE seq = ?1"),
                [seq],
                file_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// A page of the store's files, of one status and one batch when given.
    pub(crate) fn list_files(
        &self,
        store_id: &str,
        status: Option<&str>,
        batch: Option<&str>,
        q: &ListQuery,
    ) -> Result<(Vec<FileRow>, bool)> {
        let conn = self.conn();
        let cursor = |id: &str| {
            conn.query_row(
                "SELECT seq FROM store_files WHERE store_id = ?1 AND file_id = ?2",
                params![store_id, id],
                |r| r.get::<_, i64>(0),
            )
            .optional()
        };
        let Some(bounds) = q.bounds(cursor).map_err(|e| self.err(e))? else {
            return Ok((Vec::new(), false));
        };
        let mut args = vec![Sql::Text(store_id.into())];
        let mut cond = String::new();
        if let Some(s) = status {
            cond.push_str(" AND status = ?");
            args.push(Sql::Text(s.into()));
        }
        if let Some(b) = batch {
            cond.push_str(" AND batch_id = ?");
            args.push(Sql::Text(b.into()));
        }
        cond.push_str(&bounds.sql(&mut args));
        page(
            &conn,
            &format!("SELECT {FILE_COLUMNS} FROM store_files WHERE store_id = ? {cond}"),
            q,
            args,
            file_row,
        )
        .map_err(|e| self.err(e))
    }

    pub(crate) fn set_attributes(&self, seq: i64, attributes: &Map<String, Value>) -> Result<()> {
        self.conn()
            .execute(
                "UPDATE store_files SET attributes = ?1 WHERE seq = ?2",
                params![Value::Object(attributes.clone()).to_string(), seq],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The first file waiting for ingestion (oldest first) after `after`.
    pub(crate) fn next_pending(&self, after: i64) -> Result<Option<FileRow>> {
        self.conn()
            .query_row(
                &format!(
                    "SELECT {FILE_COLUMNS} FROM store_files WHERE status = 'in_progress' AND seq > ?1
                     ORDER BY seq LIMIT 1"
                ),
                [after],
                file_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Records a file's text and chunks (replacing any from an interrupted run) while it
    /// is still in progress; false if it is not.
    pub(crate) fn save_chunks(
        &self,
        seq: i64,
        text: &str,
        chunks: &[&str],
        usage_bytes: u64,
    ) -> Result<bool> {
        let mut conn = self.conn();
        let run = |conn: &mut Connection| -> rusqlite::Result<bool> {
            let tx = conn.transaction()?;
            let n = tx.execute(
                "UPDATE store_files SET chunks = ?1, usage_bytes = ?2 WHERE seq = ?3 AND status = 'in_progress'",
                params![chunks.len() as i64, to_i64(usage_bytes), seq],
            )?;
            if n == 0 {
                return Ok(false);
            }
            tx.execute("DELETE FROM chunks WHERE file_seq = ?1", [seq])?;
            tx.execute(
                "INSERT OR REPLACE INTO file_texts (file_seq, text) VALUES (?1, ?2)",
                params![seq, text],
            )?;
            {
                let mut insert =
                    tx.prepare("INSERT INTO chunks (file_seq, n, text) VALUES (?1, ?2, ?3)")?;
                for (n, c) in chunks.iter().enumerate() {
                    insert.execute(params![seq, n as i64, c])?;
                }
            }
            tx.commit()?;
            Ok(true)
        };
        run(&mut conn).map_err(|e| self.err(e))
    }

    /// Ends an in-progress file as `status` (with `error`); false if it was not in
    /// progress any more (deleted or cancelled meanwhile).
    pub(crate) fn finish(&self, seq: i64, status: &str, error: Option<&LastError>) -> Result<bool> {
        let n = self
            .conn()
            .execute(
                "UPDATE store_files SET status = ?1, error_code = ?2, error_message = ?3
                 WHERE seq = ?4 AND status = 'in_progress'",
                params![
                    status,
                    error.map(|e| e.code.as_str()),
                    error.map(|e| e.message.as_str()),
                    seq
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    /// The text of chunks by `(file_seq, n)`; missing ones left out.
    pub(crate) fn chunk_texts(&self, keys: &[(i64, i64)]) -> Result<Vec<Option<String>>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT text FROM chunks WHERE file_seq = ?1 AND n = ?2")
            .map_err(|e| self.err(e))?;
        keys.iter()
            .map(|(s, n)| {
                stmt.query_row(params![s, n], |r| r.get::<_, String>(0))
                    .optional()
                    .map_err(|e| self.err(e))
            })
            .collect()
    }

    pub(crate) fn file_text(&self, seq: i64) -> Result<Option<String>> {
        self.conn()
            .query_row(
                "SELECT text FROM file_texts WHERE file_seq = ?1",
                [seq],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub(crate) fn insert_batch(&self, id: &str, store_id: &str, now: u64) -> Result<()> {
        self.conn()
            .execute(
                "INSERT INTO file_batches (id, store_id, created_at) VALUES (?1, ?2, ?3)",
                params![id, store_id, to_i64(now)],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A batch of the store: its creation time and whether it was cancelled.
    pub(crate) fn batch(&self, store_id: &str, id: &str) -> Result<Option<(u64, bool)>> {
        self.conn()
            .query_row(
                "SELECT created_at, cancelled FROM file_batches WHERE id = ?1 AND store_id = ?2",
                params![id, store_id],
                |r| Ok((to_u64(r.get(0)?), r.get::<_, i64>(1)? != 0)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }
}

/// Runs a page query: `sql` (with its `WHERE`) ordered by `seq` as `q` asks, one row
/// more than the limit to tell whether more follow.
fn page<T>(
    conn: &Connection,
    sql: &str,
    q: &ListQuery,
    mut args: Vec<Sql>,
    read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<(Vec<T>, bool)> {
    // A page before a cursor is the rows nearest it: read backwards, then turn round.
    let backwards = q.before.is_some() && q.after.is_none();
    let dir = match (q.order, backwards) {
        (Order::Asc, false) | (Order::Desc, true) => "ASC",
        _ => "DESC",
    };
    args.push(Sql::Integer(q.limit as i64 + 1));
    let mut stmt = conn.prepare(&format!("{sql} ORDER BY seq {dir} LIMIT ?"))?;
    let mut rows = stmt
        .query_map(params_from_iter(args), read)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let more = rows.len() > q.limit;
    rows.truncate(q.limit);
    if backwards {
        rows.reverse();
    }
    Ok((rows, more))
}
