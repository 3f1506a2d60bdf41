//! What opening, writing or reading the usage database can fail with.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Db(#[from] kiln_db::DbError),
    #[error("the usage meter's writer thread has stopped")]
    Stopped,
    #[error("cannot start the usage writer thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("usage not yet written to {path} (kept in memory and retried): {reason}")]
    Unflushed { path: PathBuf, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;
