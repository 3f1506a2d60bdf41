//! What can go wrong keeping events: the database.

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    #[error(transparent)]
    Db(#[from] kiln_db::DbError),
    #[error("the observability database {path}: {source}")]
    Sql {
        path: std::path::PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot start the flush thread: {0}")]
    Thread(String),
}
