//! The vector database's tables.
//!
//! Every index shares one `vectors` table; each row carries `SLOTS` typed columns
//! `m0..m9`, and a declared metadata index takes one of them, so declaring an index is
//! a backfill of one column, not a schema change. Each column has a partial SQL index
//! on `(index_id, column)`.
//!
//! `graph_log` names every vector key a committed write added or removed, in the
//! write's own transaction; `graph_checkpoints` records the last log row each saved
//! graph file includes (see `graph_log.rs`).

use kiln_db::Schema;

/// Metadata-index columns per row (Vectorize allows 10 metadata indexes per index).
pub const SLOTS: usize = 10;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS indexes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    owner         TEXT NOT NULL,
    name          TEXT NOT NULL,
    description   TEXT,
    dimensions    INTEGER NOT NULL,
    metric        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    modified_at   INTEGER NOT NULL,
    last_mutation TEXT,
    last_mutation_at INTEGER,
    backend       TEXT NOT NULL DEFAULT 'embedded',
    UNIQUE (owner, name)
);
CREATE TABLE IF NOT EXISTS metadata_indexes (
    index_id   INTEGER NOT NULL REFERENCES indexes(id) ON DELETE CASCADE,
    property   TEXT NOT NULL,
    type       TEXT NOT NULL,
    slot       INTEGER NOT NULL,
    PRIMARY KEY (index_id, property),
    UNIQUE (index_id, slot)
);
CREATE TABLE IF NOT EXISTS vectors (
    key       INTEGER PRIMARY KEY,
    index_id  INTEGER NOT NULL,
    id        TEXT NOT NULL,
    namespace TEXT,
    vals      BLOB NOT NULL,
    metadata  TEXT,
    m0, m1, m2, m3, m4, m5, m6, m7, m8, m9,
    UNIQUE (index_id, id)
);
CREATE INDEX IF NOT EXISTS vectors_by_namespace ON vectors (index_id, namespace)
    WHERE namespace IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m0 ON vectors (index_id, m0) WHERE m0 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m1 ON vectors (index_id, m1) WHERE m1 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m2 ON vectors (index_id, m2) WHERE m2 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m3 ON vectors (index_id, m3) WHERE m3 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m4 ON vectors (index_id, m4) WHERE m4 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m5 ON vectors (index_id, m5) WHERE m5 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m6 ON vectors (index_id, m6) WHERE m6 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m7 ON vectors (index_id, m7) WHERE m7 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m8 ON vectors (index_id, m8) WHERE m8 IS NOT NULL;
CREATE INDEX IF NOT EXISTS vectors_m9 ON vectors (index_id, m9) WHERE m9 IS NOT NULL;
CREATE TABLE IF NOT EXISTS graph_log (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    index_id INTEGER NOT NULL,
    key      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_log_by_index ON graph_log (index_id, seq);
CREATE TABLE IF NOT EXISTS graph_checkpoints (
    index_id INTEGER PRIMARY KEY,
    seq      INTEGER NOT NULL
);";

pub(crate) const SCHEMA: Schema = Schema {
    what: "vector database",
    sql: &[TABLES],
    // 2: the graph log; an older build would write without logging, so it must refuse.
    version: 2,
};

/// The database file inside the index directory.
pub(crate) const DB_FILE: &str = "vectors.sqlite3";

/// A vector's values as stored: little-endian f32s.
pub(crate) fn encode(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(crate) fn decode(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A SQLite failure on the vector database, naming the file.
pub(crate) fn sql_err(e: rusqlite::Error) -> crate::VectorError {
    kiln_db::DbError::sql(SCHEMA.what, std::path::Path::new(DB_FILE), e).into()
}
