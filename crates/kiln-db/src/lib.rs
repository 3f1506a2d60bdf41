//! How every Kiln SQLite file is opened: its directory created, WAL with
//! `synchronous = NORMAL` (a committed transaction survives a crash of the process, and a
//! commit costs no fsync), a wait for other writers instead of an instant "busy", and a
//! schema version that refuses files written by a newer Kiln.
//!
//! Usage totals, stored responses and each agent's file all open through [`open`], so
//! they share one set of durability rules and one set of error messages. A directory
//! of databases one process owns is taken with [`lock_dir`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension};

/// How long to wait for another connection's lock.
pub const BUSY_WAIT: Duration = Duration::from_secs(10);

/// What a database file holds: its name in messages, its tables and their version.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    /// What the file is, for messages ("usage database", "response store").
    pub what: &'static str,
    /// `CREATE TABLE IF NOT EXISTS ...` batches, run in order at every open (a file
    /// may hold several components' tables).
    pub sql: &'static [&'static str],
    /// `PRAGMA user_version` this code writes.
    pub version: i64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    #[error("cannot create the directory {path} for the {what}: {source}")]
    CreateDir {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the {what} {path}: {source}")]
    Open {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the {what} {path} has schema version {found}, newer than the {supported} this kiln \
         understands; use a newer kiln or another file"
    )]
    SchemaTooNew {
        what: &'static str,
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("{what} {path}: {source}")]
    Sql {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
}

impl DbError {
    /// The error for `source` raised by the database `what` at `path`.
    pub fn sql(what: &'static str, path: &Path, source: rusqlite::Error) -> Self {
        Self::Sql {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Opens (creating if needed) the database at `path` with `schema`, and its parent
/// directory.
pub fn open(path: &Path, schema: &Schema) -> Result<Connection, DbError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| DbError::CreateDir {
            what: schema.what,
            path: dir.to_path_buf(),
            source,
        })?;
    }
    // Processes started together may create the file together; switching a new file to
    // WAL can then report "busy" without waiting, so that is retried for a while.
    let started = Instant::now();
    loop {
        let conn = Connection::open(path).map_err(|source| DbError::Open {
            what: schema.what,
            path: path.to_path_buf(),
            source,
        })?;
        match init(&conn, path, schema) {
            Err(DbError::Sql { source, .. })
                if is_busy(&source) && started.elapsed() < BUSY_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
            Ok(()) => return Ok(conn),
        }
    }
}

/// A database in memory with `schema` (tests, or state that need not persist).
pub fn open_in_memory(schema: &Schema) -> Result<Connection, DbError> {
    let path = Path::new(":memory:");
    let conn = Connection::open_in_memory().map_err(|source| DbError::Open {
        what: schema.what,
        path: path.to_path_buf(),
        source,
    })?;
    init(&conn, path, schema)?;
    Ok(conn)
}

fn init(conn: &Connection, path: &Path, schema: &Schema) -> Result<(), DbError> {
    let sql = |source| DbError::sql(schema.what, path, source);
    conn.busy_timeout(BUSY_WAIT).map_err(sql)?;
    // `journal_mode` answers with the mode it set, so it is read as a query.
    let _mode: Option<String> = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    // Deleted rows are overwritten, not just unlinked: a deleted conversation is gone.
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA secure_delete = ON;",
    )
    .map_err(sql)?;
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql)?;
    if found > schema.version {
        return Err(DbError::SchemaTooNew {
            what: schema.what,
            path: path.to_path_buf(),
            found,
            supported: schema.version,
        });
    }
    for batch in schema.sql {
        conn.execute_batch(batch).map_err(sql)?;
    }
    conn.execute_batch(&format!("PRAGMA user_version = {};", schema.version))
        .map_err(sql)
}

/// The lock file of a directory of databases.
pub const LOCK_FILE: &str = "kiln.lock";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{} is in use by another process", .dir.display())]
    InUse { dir: PathBuf },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Locks `dir` (created if needed) for this process, so no other process uses the
/// databases in it at the same time; the lock lasts while the returned file is open,
/// and the OS drops it if the process dies.
pub fn lock_dir(dir: &Path) -> Result<std::fs::File, LockError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(LockError::InUse {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

/// Seconds since the Unix epoch, as rows record time (0 if the clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `e` is another connection holding the lock past the busy wait.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// SQLite integers are signed; counts past `i64::MAX` (never reached) saturate.
pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored count back; a negative one (never written) reads as 0.
pub fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: Schema = Schema {
        what: "test database",
        sql: &["CREATE TABLE IF NOT EXISTS t (x INTEGER);"],
        version: 2,
    };

    #[test]
    fn opens_in_wal_and_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/t.sqlite3");
        let conn = open(&path, &SCHEMA).expect("open");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, "wal");
        conn.execute_batch("PRAGMA user_version = 3").expect("bump");
        drop(conn);
        let err = open(&path, &SCHEMA).expect_err("newer schema");
        assert!(
            matches!(err, DbError::SchemaTooNew { found: 3, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("test database"), "{err}");
    }

    #[test]
    fn a_locked_directory_is_refused_until_its_lock_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = lock_dir(dir.path()).expect("first lock");
        let err = lock_dir(dir.path()).expect_err("second lock");
        assert!(matches!(err, LockError::InUse { .. }), "{err}");
        drop(held);
        lock_dir(dir.path()).expect("free again");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.sqlite3");
        std::fs::write(
            &path,
            b"this is not a database, just some bytes long enough",
        )
        .expect("write");
        let err = open(&path, &SCHEMA).expect_err("garbage");
        assert!(err.to_string().contains("bad.sqlite3"), "{err}");
    }
}
