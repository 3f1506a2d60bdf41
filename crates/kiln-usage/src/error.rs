//! What opening, writing or reading the usage database can fail with.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot create the directory {path} for the usage database: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the usage database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the usage database {path} has schema version {found}, newer than the {supported} \
         this kiln understands; use a newer kiln or another --usage-db"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("usage database {path}: {source}")]
    Sql {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the usage meter's writer thread has stopped")]
    Stopped,
    #[error("cannot start the usage writer thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("usage not yet written to {path} (kept in memory and retried): {reason}")]
    Unflushed { path: PathBuf, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;
