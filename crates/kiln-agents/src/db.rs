//! One agent's SQLite file: its settings, its state document, its schedules, the
//! client turns in flight, and (in the same file, through `kiln-responses`' store) its
//! conversation.
//!
//! Each write is one transaction, so a state replaced is replaced whole and a schedule
//! is advanced only once its run's response is stored (delivery at least once).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use kiln_api::agents::{AgentConfig, Schedule};
use kiln_api::responses::CreateResponse;
use kiln_db::{DbError, Schema};
use kiln_responses::ResponseStore;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use crate::error::{AgentError, Result};

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS agent (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    name        TEXT NOT NULL,
    owner       TEXT NOT NULL,
    owner_label TEXT,
    config      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS state (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    doc        TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    input       TEXT NOT NULL,
    cron        TEXT,
    next_run_at INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    id         TEXT PRIMARY KEY,
    request    TEXT NOT NULL,
    started_at INTEGER NOT NULL
);";

const SCHEMA: Schema = Schema {
    what: "agent database",
    sql: &[TABLES, kiln_responses::TABLES],
    version: 1,
};

/// The agent row: who owns it and its settings.
#[derive(Debug, Clone)]
pub struct AgentRow {
    pub name: String,
    pub owner: String,
    pub owner_label: Option<String>,
    pub config: AgentConfig,
    pub created_at: u64,
    pub updated_at: u64,
}

pub struct AgentDb {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The conversation, in the same file.
    pub responses: std::sync::Arc<ResponseStore>,
}

impl AgentDb {
    pub fn open(path: &Path) -> std::result::Result<Self, DbError> {
        let conn = kiln_db::open(path, &SCHEMA)?;
        let responses = ResponseStore::open_as(path, &SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            responses: std::sync::Arc::new(responses),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sql(&self, source: rusqlite::Error) -> AgentError {
        AgentError::Unavailable {
            name: self
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            source: Box::new(DbError::sql(SCHEMA.what, &self.path, source)),
        }
    }

    pub fn agent(&self) -> Result<Option<AgentRow>> {
        let row: Option<(String, String, Option<String>, String, i64, i64)> = self
            .conn()
            .query_row(
                "SELECT name, owner, owner_label, config, created_at, updated_at FROM agent",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        row.map(|(name, owner, owner_label, config, c, u)| {
            Ok(AgentRow {
                name,
                owner,
                owner_label,
                config: serde_json::from_str(&config)
                    .map_err(|e| AgentError::Corrupt(e.to_string()))?,
                created_at: kiln_db::to_u64(c),
                updated_at: kiln_db::to_u64(u),
            })
        })
        .transpose()
    }

    pub fn put_agent(&self, row: &AgentRow) -> Result<()> {
        let config =
            serde_json::to_string(&row.config).map_err(|e| AgentError::Corrupt(e.to_string()))?;
        self.conn()
            .execute(
                "INSERT INTO agent (id, name, owner, owner_label, config, created_at, updated_at)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET config = excluded.config,
                     owner_label = excluded.owner_label, updated_at = excluded.updated_at",
                params![
                    row.name,
                    row.owner,
                    row.owner_label,
                    config,
                    kiln_db::to_i64(row.created_at),
                    kiln_db::to_i64(row.updated_at)
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The state document (`{}` before any is set).
    pub fn state(&self) -> Result<Value> {
        let doc: Option<String> = self
            .conn()
            .query_row("SELECT doc FROM state", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        match doc {
            Some(d) => serde_json::from_str(&d).map_err(|e| AgentError::Corrupt(e.to_string())),
            None => Ok(Value::Object(Default::default())),
        }
    }

    pub fn put_state(&self, doc: &Value, now: u64) -> Result<()> {
        self.conn()
            .execute(
                "INSERT INTO state (id, doc, updated_at) VALUES (1, ?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at",
                params![doc.to_string(), kiln_db::to_i64(now)],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn schedules(&self) -> Result<Vec<Schedule>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, kind, input, cron, next_run_at, attempts, last_error
                 FROM schedules ORDER BY next_run_at, created_at",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        rows.into_iter()
            .map(|(id, kind, input, cron, next, attempts, last_error)| {
                Ok(Schedule {
                    id,
                    object: "agent.schedule".into(),
                    kind,
                    input: serde_json::from_str(&input)
                        .map_err(|e| AgentError::Corrupt(e.to_string()))?,
                    cron,
                    next_run_at: kiln_db::to_u64(next),
                    attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                    last_error,
                })
            })
            .collect()
    }

    pub fn schedule(&self, id: &str) -> Result<Option<Schedule>> {
        Ok(self.schedules()?.into_iter().find(|s| s.id == id))
    }

    pub fn put_schedule(&self, s: &Schedule, now: u64) -> Result<()> {
        self.conn()
            .execute(
                "INSERT INTO schedules (id, kind, input, cron, next_run_at, attempts, last_error,
                     created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (id) DO UPDATE SET next_run_at = excluded.next_run_at,
                     attempts = excluded.attempts, last_error = excluded.last_error",
                params![
                    s.id,
                    s.kind,
                    s.input.to_string(),
                    s.cron,
                    kiln_db::to_i64(s.next_run_at),
                    i64::from(s.attempts),
                    s.last_error,
                    kiln_db::to_i64(now)
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// False when there was no such schedule.
    pub fn delete_schedule(&self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .execute("DELETE FROM schedules WHERE id = ?1", params![id])
            .map_err(|e| self.sql(e))?;
        Ok(n > 0)
    }

    /// Journals a client's turn before it runs (see `turns.rs`).
    pub fn begin_turn(&self, id: &str, req: &CreateResponse, now: u64) -> Result<()> {
        let request = serde_json::to_string(req).map_err(|e| AgentError::Corrupt(e.to_string()))?;
        self.conn()
            .execute(
                "INSERT INTO turns (id, request, started_at) VALUES (?1, ?2, ?3)",
                params![id, request, kiln_db::to_i64(now)],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn end_turn(&self, id: &str) -> Result<()> {
        self.conn()
            .execute("DELETE FROM turns WHERE id = ?1", params![id])
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Turns journaled and never ended (a crash cut them), oldest first.
    pub fn cut_turns(&self) -> Result<Vec<(String, CreateResponse)>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT id, request FROM turns ORDER BY started_at, rowid")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))?;
        rows.into_iter()
            .map(|(id, req)| {
                let req =
                    serde_json::from_str(&req).map_err(|e| AgentError::Corrupt(e.to_string()))?;
                Ok((id, req))
            })
            .collect()
    }
}
