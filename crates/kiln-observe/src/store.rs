//! Events and rollups in SQLite (`observe.sqlite3` under the router's data dir).
//!
//! The router's hot path never touches the file: the [`crate::Observer`] flushes what
//! accumulated once a second in one transaction, so a crash loses at most that second.
//! Rows older than the retention (a day) are pruned as it goes.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};

use crate::error::ObserveError;
use crate::event::Event;
use crate::rollup::Rollup;

const SCHEMA: kiln_db::Schema = kiln_db::Schema {
    what: "observability database",
    sql: &["CREATE TABLE IF NOT EXISTS events (
            seq INTEGER PRIMARY KEY,
            time_ms INTEGER NOT NULL,
            body TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS events_time ON events(time_ms);
        CREATE TABLE IF NOT EXISTS rollups (
            minute INTEGER NOT NULL,
            colo TEXT NOT NULL,
            model TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (minute, colo, model)
        );"],
    version: 1,
};

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, ObserveError> {
        let path = dir.join("observe.sqlite3");
        let conn = kiln_db::open(&path, &SCHEMA)?;
        Ok(Self { conn, path })
    }

    fn sql(&self, source: rusqlite::Error) -> ObserveError {
        ObserveError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes `events` and replaces `rollups`' rows, then prunes rows from before
    /// `keep_from_ms`, in one transaction.
    pub fn flush(
        &mut self,
        events: &[Event],
        rollups: &[Rollup],
        keep_from_ms: u64,
        max_events: u64,
    ) -> Result<(), ObserveError> {
        let path = self.path.clone();
        let err = |source| ObserveError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO events (seq, time_ms, body) VALUES (?1, ?2, ?3)",
                )
                .map_err(err)?;
            for e in events {
                let body = serde_json::to_string(e).unwrap_or_default();
                ins.execute(params![e.seq as i64, e.time_ms as i64, body])
                    .map_err(err)?;
            }
            let mut up = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO rollups (minute, colo, model, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(err)?;
            for r in rollups {
                let body = serde_json::to_string(r).unwrap_or_default();
                up.execute(params![r.minute, r.colo, r.model, body])
                    .map_err(err)?;
            }
            tx.execute(
                "DELETE FROM events WHERE time_ms < ?1 OR seq <= (SELECT MAX(seq) FROM events) - ?2",
                params![keep_from_ms as i64, max_events as i64],
            )
            .map_err(err)?;
            tx.execute(
                "DELETE FROM rollups WHERE minute < ?1",
                params![(keep_from_ms / 60_000) as i64],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// The latest `limit` events, oldest first.
    pub fn latest_events(&self, limit: usize) -> Result<Vec<Event>, ObserveError> {
        let mut st = self
            .conn
            .prepare("SELECT body FROM (SELECT seq, body FROM events ORDER BY seq DESC LIMIT ?1) ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![limit as i64], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for body in rows {
            let body = body.map_err(|e| self.sql(e))?;
            // A row this version cannot read is skipped, not fatal.
            if let Ok(e) = serde_json::from_str(&body) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Rollups of minutes `from..=to`, in minute order.
    pub fn rollups(&self, from: i64, to: i64) -> Result<Vec<Rollup>, ObserveError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT body FROM rollups WHERE minute BETWEEN ?1 AND ?2 ORDER BY minute, colo, model",
            )
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![from, to], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for body in rows {
            let body = body.map_err(|e| self.sql(e))?;
            if let Ok(r) = serde_json::from_str(&body) {
                out.push(r);
            }
        }
        Ok(out)
    }
}
