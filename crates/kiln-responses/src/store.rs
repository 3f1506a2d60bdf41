//! Stored responses in SQLite: one row per response (the request it answered, the
//! response object with its output) and its input items, under the key that made it.
//!
//! A response is written in one transaction, whole: a failed or cancelled one is stored
//! with what it produced and why it ended, never half. Another key's rows are invisible
//! (every query filters on the key), and a delete removes the rows and, with
//! `secure_delete`, overwrites their bytes. A response's recorded stream events (see
//! [`crate::replay`]) are kept beside it as one JSON array and count to its bytes.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use kiln_api::responses::{CreateResponse, Item, Response, StreamEvent};
use kiln_api::Caller;
use kiln_db::{DbError, Schema};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{ResponsesError, Result};

/// The tables, also created in each agent's own file.
pub const TABLES: &str = "
CREATE TABLE IF NOT EXISTS responses (
    id          TEXT PRIMARY KEY,
    key_id      TEXT NOT NULL,
    key_label   TEXT,
    previous_id TEXT,
    created_at  INTEGER NOT NULL,
    status      TEXT NOT NULL,
    request     TEXT NOT NULL,
    response    TEXT NOT NULL,
    bytes       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_by_key ON responses (key_id, created_at);
CREATE TABLE IF NOT EXISTS input_items (
    response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    item        TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
);
CREATE TABLE IF NOT EXISTS response_events (
    response_id TEXT PRIMARY KEY REFERENCES responses (id) ON DELETE CASCADE,
    events      TEXT NOT NULL
);
-- No foreign key: `put` rewrites a response's row (INSERT OR REPLACE), and a cascade
-- would reset the count whenever a running response is written back; `delete` removes it.
CREATE TABLE IF NOT EXISTS response_reruns (
    response_id TEXT PRIMARY KEY,
    reruns      INTEGER NOT NULL
);";

const SCHEMA: Schema = Schema {
    what: "response store",
    sql: &[TABLES],
    version: 1,
};

/// One stored response: what was asked, what came back, and its input items.
#[derive(Debug, Clone)]
pub struct Stored {
    pub caller: Caller,
    pub request: CreateResponse,
    pub response: Response,
    pub input: Vec<Item>,
}

/// The response database.
pub struct ResponseStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl ResponseStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self::open_as(path, &SCHEMA)?)
    }

    /// Opens `path` with `schema`, whose batches must include [`TABLES`] (an agent's file).
    pub fn open_as(path: &Path, schema: &Schema) -> Result<Self, DbError> {
        Ok(Self {
            conn: Mutex::new(kiln_db::open(path, schema)?),
            path: path.to_path_buf(),
        })
    }

    /// A store in memory (tests).
    pub fn open_in_memory() -> Result<Self> {
        Ok(Self {
            conn: Mutex::new(kiln_db::open_in_memory(&SCHEMA)?),
            path: PathBuf::from(":memory:"),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll
        // back on drop), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sql(&self, source: rusqlite::Error) -> ResponsesError {
        DbError::sql(SCHEMA.what, &self.path, source).into()
    }

    /// Writes `s` (replacing a row with its id), input items included, in one transaction.
    pub fn put(&self, s: &Stored) -> Result<()> {
        self.put_with_events(s, None)
    }

    /// Writes `s` with its recorded stream events (replacing any it had).
    pub fn put_with_events(&self, s: &Stored, events: Option<&[StreamEvent]>) -> Result<()> {
        let request = to_json(&s.request)?;
        let response = to_json(&s.response)?;
        let input: Vec<String> = s.input.iter().map(to_json).collect::<Result<_>>()?;
        let events = events.map(to_json).transpose()?;
        let bytes = request.len()
            + response.len()
            + input.iter().map(String::len).sum::<usize>()
            + events.as_ref().map_or(0, String::len);
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.sql(e))?;
        tx.execute(
            "INSERT OR REPLACE INTO responses (id, key_id, key_label, previous_id, created_at,
                 status, request, response, bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                s.response.id,
                s.caller.key_id,
                s.caller.label,
                s.response.previous_response_id,
                kiln_db::to_i64(s.response.created_at),
                s.response.status,
                request,
                response,
                kiln_db::to_i64(bytes as u64),
            ],
        )
        .map_err(|e| self.sql(e))?;
        tx.execute(
            "DELETE FROM input_items WHERE response_id = ?1",
            params![s.response.id],
        )
        .map_err(|e| self.sql(e))?;
        for (seq, item) in input.iter().enumerate() {
            tx.execute(
                "INSERT INTO input_items (response_id, seq, item) VALUES (?1, ?2, ?3)",
                params![s.response.id, seq as i64, item],
            )
            .map_err(|e| self.sql(e))?;
        }
        tx.execute(
            "DELETE FROM response_events WHERE response_id = ?1",
            params![s.response.id],
        )
        .map_err(|e| self.sql(e))?;
        if let Some(events) = events {
            tx.execute(
                "INSERT INTO response_events (response_id, events) VALUES (?1, ?2)",
                params![s.response.id, events],
            )
            .map_err(|e| self.sql(e))?;
        }
        tx.commit().map_err(|e| self.sql(e))
    }

    /// The recorded stream events of `key_id`'s response `id`, if it has them.
    pub fn events(&self, key_id: &str, id: &str) -> Result<Option<Vec<StreamEvent>>> {
        let events: Option<String> = self
            .conn()
            .query_row(
                "SELECT e.events FROM response_events e JOIN responses r ON r.id = e.response_id
                 WHERE e.response_id = ?1 AND r.key_id = ?2",
                params![id, key_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        events.map(|e| from_json(&e)).transpose()
    }

    /// `key_id`'s response `id`, if it has one.
    pub fn get(&self, key_id: &str, id: &str) -> Result<Option<Stored>> {
        let conn = self.conn();
        let row: Option<(String, Option<String>, String, String)> = conn
            .query_row(
                "SELECT key_id, key_label, request, response FROM responses
                 WHERE id = ?1 AND key_id = ?2",
                params![id, key_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some((key_id, label, request, response)) = row else {
            return Ok(None);
        };
        let input = self.items(&conn, id)?;
        Ok(Some(Stored {
            caller: Caller { key_id, label },
            request: from_json(&request)?,
            response: from_json(&response)?,
            input,
        }))
    }

    fn items(&self, conn: &Connection, id: &str) -> Result<Vec<Item>> {
        let mut stmt = conn
            .prepare_cached("SELECT item FROM input_items WHERE response_id = ?1 ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![id], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        rows.iter().map(|s| from_json(s)).collect()
    }

    /// Deletes `key_id`'s response `id` and its items; false when there was none.
    pub fn delete(&self, key_id: &str, id: &str) -> Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.sql(e))?;
        let n = tx
            .execute(
                "DELETE FROM responses WHERE id = ?1 AND key_id = ?2",
                params![id, key_id],
            )
            .map_err(|e| self.sql(e))?;
        if n > 0 {
            tx.execute(
                "DELETE FROM response_reruns WHERE response_id = ?1",
                params![id],
            )
            .map_err(|e| self.sql(e))?;
        }
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(n > 0)
    }

    /// How many responses `key_id` has stored, and their bytes.
    pub fn footprint(&self, key_id: &str) -> Result<(u64, u64)> {
        let (n, bytes): (i64, Option<i64>) = self
            .conn()
            .query_row(
                "SELECT COUNT(*), SUM(bytes) FROM responses WHERE key_id = ?1",
                params![key_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(|e| self.sql(e))?;
        Ok((kiln_db::to_u64(n), kiln_db::to_u64(bytes.unwrap_or(0))))
    }

    /// Counts one more run of response `id`, started again after a crash cut it, and
    /// returns how many such runs there have been, this one included.
    pub fn count_rerun(&self, id: &str) -> Result<u64> {
        let n: i64 = self
            .conn()
            .query_row(
                "INSERT INTO response_reruns (response_id, reruns) VALUES (?1, 1)
                 ON CONFLICT (response_id) DO UPDATE SET reruns = reruns + 1
                 RETURNING reruns",
                params![id],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every response still `queued` or `in_progress` (background runs a restart cut).
    pub fn unfinished(&self) -> Result<Vec<Stored>> {
        let ids: Vec<(String, String)> = {
            let conn = self.conn();
            let mut stmt = conn
                .prepare(
                    "SELECT id, key_id FROM responses
                     WHERE status IN ('queued', 'in_progress') ORDER BY created_at, rowid",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(|e| self.sql(e))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| self.sql(e))?;
            rows
        };
        let mut out = Vec::with_capacity(ids.len());
        for (id, key) in ids {
            out.extend(self.get(&key, &id)?);
        }
        Ok(out)
    }

    /// The id of `key_id`'s newest response (an agent's conversation head).
    pub fn latest(&self, key_id: &str) -> Result<Option<String>> {
        self.conn()
            .query_row(
                "SELECT id FROM responses WHERE key_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
                params![key_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Every stored response of `key_id`, oldest first (an agent's history).
    pub fn all(&self, key_id: &str) -> Result<Vec<Response>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT response FROM responses WHERE key_id = ?1 ORDER BY created_at, rowid",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![key_id], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        rows.iter().map(|s| from_json(s)).collect()
    }
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| ResponsesError::Corrupt(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| ResponsesError::Corrupt(e.to_string()))
}
