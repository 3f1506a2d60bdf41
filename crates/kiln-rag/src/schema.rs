//! The vector-store database's tables.
//!
//! `seq` columns give stores and files a stable order (list pages, the ingest queue)
//! and give each attached file a small integer that names its chunks in the vector
//! index (`<seq>:<n>`), well inside the index's 64-byte ids. They are never reused
//! (`AUTOINCREMENT`): a worker still holding a deleted file's `seq` must not find
//! another file under it. A file's chunk count is
//! written before its first vector, so whoever removes the file knows every id its
//! vectors can have.
//!
//! `removals` queues vectors to take out of an index (a file's chunks, or a store's
//! whole index), written in the transaction that makes them unreachable and deleted once
//! they are gone; `file_deletes` holds the tombstone of an uploaded file being deleted
//! (see `removal.rs`). Neither references the rows it outlives. Both were added without
//! a version change: older files gain them at open, and an older kiln ignores them.

use kiln_db::Schema;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS stores (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL UNIQUE,
    owner          TEXT NOT NULL,
    name           TEXT,
    description    TEXT,
    metadata       TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    expires_days   INTEGER,
    embedder       TEXT NOT NULL,
    dimensions     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS stores_by_owner ON stores (owner, seq);
CREATE TABLE IF NOT EXISTS store_files (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    store_id      TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
    file_id       TEXT NOT NULL,
    filename      TEXT NOT NULL,
    owner         TEXT NOT NULL,
    owner_label   TEXT,
    batch_id      TEXT,
    created_at    INTEGER NOT NULL,
    status        TEXT NOT NULL,
    error_code    TEXT,
    error_message TEXT,
    chunk_size    INTEGER NOT NULL,
    chunk_overlap INTEGER NOT NULL,
    attributes    TEXT NOT NULL,
    chunks        INTEGER,
    usage_bytes   INTEGER NOT NULL DEFAULT 0,
    UNIQUE (store_id, file_id)
);
CREATE INDEX IF NOT EXISTS store_files_pending ON store_files (seq) WHERE status = 'in_progress';
CREATE INDEX IF NOT EXISTS store_files_by_batch ON store_files (batch_id) WHERE batch_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS chunks (
    file_seq INTEGER NOT NULL REFERENCES store_files(seq) ON DELETE CASCADE,
    n        INTEGER NOT NULL,
    text     TEXT NOT NULL,
    PRIMARY KEY (file_seq, n)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS file_texts (
    file_seq INTEGER PRIMARY KEY REFERENCES store_files(seq) ON DELETE CASCADE,
    text     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS file_batches (
    id         TEXT PRIMARY KEY,
    store_id   TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    cancelled  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS removals (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    owner    TEXT NOT NULL,
    store_id TEXT NOT NULL,
    file_seq INTEGER,
    chunks   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS file_deletes (
    owner   TEXT NOT NULL,
    file_id TEXT NOT NULL,
    PRIMARY KEY (owner, file_id)
) WITHOUT ROWID;";

pub(crate) const SCHEMA: Schema = Schema {
    what: "vector-store database",
    sql: &[TABLES],
    version: 1,
};

/// The database file in the service's directory.
pub const DB_FILE: &str = "vector_stores.sqlite3";

/// The id of chunk `n` of the file attached as `file_seq`, in the vector index.
pub(crate) fn chunk_id(file_seq: i64, n: i64) -> String {
    format!("{file_seq}:{n}")
}

/// The `(file_seq, n)` a chunk id names.
pub(crate) fn parse_chunk_id(id: &str) -> Option<(i64, i64)> {
    let (a, b) = id.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A fresh id with `prefix` (`vs_`, `vsfb_`): 24 random hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    let b: [u8; 12] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}{hex}")
}

/// The vector index holding store `id`'s chunks (index names take no `_`).
pub(crate) fn index_name(store_id: &str) -> String {
    store_id.replace('_', "-")
}

/// The vector-index owner of `owner`'s stores, apart from their Vectorize indexes.
pub(crate) fn index_owner(owner: &str) -> String {
    format!("vector_stores:{owner}")
}

/// Where `owner`'s store `store_id` keeps its vectors in the vector index: the
/// index's owner and name.
pub fn index_of(owner: &str, store_id: &str) -> (String, String) {
    (index_owner(owner), index_name(store_id))
}
