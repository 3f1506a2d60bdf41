//! The SQLite tables of totals, one row per (caller, model): `usage` for interactive
//! requests, `batch_usage` (same columns) for the lines of batches, so batch work is
//! billed and reported apart.
//!
//! Rows hold running sums, so the file stays small whatever the traffic; a batch of
//! records is added in one transaction. The database runs in WAL mode with
//! `synchronous = NORMAL`: a committed batch survives a crash of the process (not
//! necessarily a power cut), and a commit costs no fsync.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kiln_db::{to_i64, to_u64, DbError, Schema};
use rusqlite::{params, Connection};

use crate::error::{Error, Result};

/// The columns of both tables.
macro_rules! usage_table {
    ($name:literal) => {
        concat!(
            "CREATE TABLE IF NOT EXISTS ",
            $name,
            " (
    key_id            TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    label             TEXT,
    requests          INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    neurons           REAL    NOT NULL DEFAULT 0,
    first_at          INTEGER NOT NULL,
    last_at           INTEGER NOT NULL,
    PRIMARY KEY (key_id, model)
);"
        )
    };
}

/// Neurons per key per UTC day (days since 1970), interactive and batch together: what
/// daily quotas are checked against.
const DAILY: &str = "CREATE TABLE IF NOT EXISTS daily_neurons (
    key_id  TEXT    NOT NULL,
    day     INTEGER NOT NULL,
    neurons REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);";

const SCHEMA: Schema = Schema {
    what: "usage database",
    sql: &[usage_table!("usage"), usage_table!("batch_usage"), DAILY],
    version: 3,
};

/// Seconds in a UTC day.
const DAY: i64 = 86_400;

/// What one request (or several, summed) consumed.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRecord {
    /// [`crate::key_id`] of the caller's key, or [`crate::ANONYMOUS`].
    pub key_id: String,
    /// The key's configured label, if any.
    pub label: Option<String>,
    /// The model's catalogue name.
    pub model: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    pub neurons: f64,
    /// Run as a line of a batch (low priority), not an interactive request.
    pub batch: bool,
}

impl UsageRecord {
    /// Adds `other`'s counts (same caller and model) to this one.
    pub fn merge(&mut self, other: &UsageRecord) {
        self.requests += other.requests;
        self.prompt_tokens += other.prompt_tokens;
        self.cached_tokens += other.cached_tokens;
        self.completion_tokens += other.completion_tokens;
        self.neurons += other.neurons;
        if other.label.is_some() {
            self.label.clone_from(&other.label);
        }
    }
}

/// One stored row: totals since `first_at` (unix seconds) up to `last_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub totals: UsageRecord,
    pub first_at: i64,
    pub last_at: i64,
}

/// The usage database.
pub struct UsageStore {
    conn: Connection,
    path: PathBuf,
}

impl UsageStore {
    /// Opens (creating if needed) the database at `path`, and its parent directory.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = kiln_db::open(path, &SCHEMA)?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// A database in memory (tests, or metering that need not persist).
    pub fn open_in_memory() -> Result<Self> {
        let conn = kiln_db::open_in_memory(&SCHEMA)?;
        Ok(Self {
            conn,
            path: PathBuf::from(":memory:"),
        })
    }

    /// Where the database lives (`:memory:` for an in-memory one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds `records` to the totals in one transaction: all or none.
    pub fn add(&mut self, records: &[UsageRecord]) -> Result<()> {
        let now = to_i64(kiln_db::unix_now());
        let path = self.path.clone();
        let sql = |source| Error::from(DbError::sql(SCHEMA.what, &path, source));
        let tx = self.conn.transaction().map_err(sql)?;
        for table in ["usage", "batch_usage"] {
            let mut upsert = tx
                .prepare_cached(&format!(
                    "INSERT INTO {table} (key_id, model, label, requests, prompt_tokens,
                         cached_tokens, completion_tokens, neurons, first_at, last_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)
                     ON CONFLICT (key_id, model) DO UPDATE SET
                         label = COALESCE(excluded.label, label),
                         requests = requests + excluded.requests,
                         prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                         cached_tokens = cached_tokens + excluded.cached_tokens,
                         completion_tokens = completion_tokens + excluded.completion_tokens,
                         neurons = neurons + excluded.neurons,
                         last_at = excluded.last_at"
                ))
                .map_err(sql)?;
            for r in records
                .iter()
                .filter(|r| r.batch == (table == "batch_usage"))
            {
                upsert
                    .execute(params![
                        r.key_id,
                        r.model,
                        r.label,
                        to_i64(r.requests),
                        to_i64(r.prompt_tokens),
                        to_i64(r.cached_tokens),
                        to_i64(r.completion_tokens),
                        r.neurons,
                        now,
                    ])
                    .map_err(sql)?;
            }
        }
        {
            let mut daily = tx
                .prepare_cached(
                    "INSERT INTO daily_neurons (key_id, day, neurons) VALUES (?1, ?2, ?3)
                     ON CONFLICT (key_id, day) DO UPDATE SET neurons = neurons + excluded.neurons",
                )
                .map_err(sql)?;
            for r in records.iter().filter(|r| r.neurons > 0.0) {
                daily
                    .execute(params![r.key_id, now / DAY, r.neurons])
                    .map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)
    }

    /// Neurons `key_id` used on UTC day `day` (days since 1970).
    pub fn neurons_on(&self, key_id: &str, day: u64) -> Result<f64> {
        let sql = |source| Error::from(DbError::sql(SCHEMA.what, &self.path, source));
        let mut stmt = self
            .conn
            .prepare_cached("SELECT neurons FROM daily_neurons WHERE key_id = ?1 AND day = ?2")
            .map_err(sql)?;
        let mut rows = stmt.query(params![key_id, to_i64(day)]).map_err(sql)?;
        match rows.next().map_err(sql)? {
            Some(r) => r.get(0).map_err(sql),
            None => Ok(0.0),
        }
    }

    /// Every row, ordered by caller, then model, interactive before batch.
    pub fn rows(&self) -> Result<Vec<UsageRow>> {
        let sql = |source| Error::from(DbError::sql(SCHEMA.what, &self.path, source));
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT key_id, model, label, requests, prompt_tokens, cached_tokens,
                        completion_tokens, neurons, first_at, last_at, 0 AS batch FROM usage
                 UNION ALL
                 SELECT key_id, model, label, requests, prompt_tokens, cached_tokens,
                        completion_tokens, neurons, first_at, last_at, 1 FROM batch_usage
                 ORDER BY key_id, model, batch",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(UsageRow {
                    totals: UsageRecord {
                        key_id: r.get(0)?,
                        model: r.get(1)?,
                        label: r.get(2)?,
                        requests: to_u64(r.get(3)?),
                        prompt_tokens: to_u64(r.get(4)?),
                        cached_tokens: to_u64(r.get(5)?),
                        completion_tokens: to_u64(r.get(6)?),
                        neurons: r.get(7)?,
                        batch: r.get::<_, i64>(10)? != 0,
                    },
                    first_at: r.get(8)?,
                    last_at: r.get(9)?,
                })
            })
            .map_err(sql)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql)
    }
}

/// Sums records per (caller, model, batch or not), keeping the first-seen order.
pub(crate) fn aggregate(
    into: &mut Vec<UsageRecord>,
    index: &mut HashMap<(String, String, bool), usize>,
    r: UsageRecord,
) {
    let key = (r.key_id.clone(), r.model.clone(), r.batch);
    match index.get(&key) {
        Some(&i) => into[i].merge(&r),
        None => {
            index.insert(key, into.len());
            into.push(r);
        }
    }
}
