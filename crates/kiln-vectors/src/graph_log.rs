//! The graph's log in SQLite: which vector keys each committed write touched, so a
//! graph saved at a checkpoint can be brought up to date at the next start.
//!
//! Checkpoints, not incremental saves: usearch serializes a graph whole, and an HNSW
//! insert rewrites the neighbour lists of dozens of nodes scattered across the file,
//! so saving per write would rewrite most pages anyway. Instead each write logs its
//! keys in its own transaction (a few bytes a vector), a graph is saved after enough
//! keys were logged to make replay costly (`LiveIndex::maybe_checkpoint`), and at the
//! next start the keys logged after the file's sequence number are replayed: removed
//! from the loaded graph, and those still stored searched exactly until the graph
//! worker has inserted them.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;
use crate::schema::sql_err;

/// Logs `keys` (added or removed) for `index_id`; call inside the write's transaction.
pub(crate) fn log_keys(conn: &Connection, index_id: i64, keys: &[u64]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("INSERT INTO graph_log (index_id, key) VALUES (?1, ?2)")
        .map_err(sql_err)?;
    for k in keys {
        stmt.execute(params![index_id, *k as i64])
            .map_err(sql_err)?;
    }
    Ok(())
}

/// The sequence number of `index_id`'s last recorded checkpoint (0 if none).
pub(crate) fn checkpointed(conn: &Connection, index_id: i64) -> Result<i64> {
    Ok(conn
        .query_row(
            "SELECT seq FROM graph_checkpoints WHERE index_id = ?1",
            [index_id],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?
        .unwrap_or(0))
}

/// The sequence number a checkpoint of `index_id` taken now covers: its last logged
/// row, or its last checkpoint when nothing was logged since.
pub(crate) fn latest(conn: &Connection, index_id: i64) -> Result<i64> {
    let last: Option<i64> = conn
        .query_row(
            "SELECT MAX(seq) FROM graph_log WHERE index_id = ?1",
            [index_id],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    Ok(last.unwrap_or(0).max(checkpointed(conn, index_id)?))
}

/// The highest sequence number ever issued (AUTOINCREMENT never reuses one).
pub(crate) fn issued(conn: &Connection) -> Result<i64> {
    Ok(conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'graph_log'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?
        .unwrap_or(0))
}

/// The distinct keys `index_id` logged after `seq`.
pub(crate) fn keys_after(conn: &Connection, index_id: i64, seq: i64) -> Result<Vec<u64>> {
    let mut stmt = conn
        .prepare("SELECT DISTINCT key FROM graph_log WHERE index_id = ?1 AND seq > ?2")
        .map_err(sql_err)?;
    let keys = stmt
        .query_map(params![index_id, seq], |r| r.get::<_, i64>(0))
        .map_err(sql_err)?
        .map(|k| k.map(|k| k as u64))
        .collect::<rusqlite::Result<_>>()
        .map_err(sql_err)?;
    Ok(keys)
}

/// Records that the graph file of `index_id` now covers the log up to `seq` (call
/// after the file is durable), and drops the rows it covers.
pub(crate) fn record(conn: &mut Connection, index_id: i64, seq: i64) -> Result<()> {
    let tx = conn.transaction().map_err(sql_err)?;
    tx.execute(
        "INSERT INTO graph_checkpoints (index_id, seq) VALUES (?1, ?2)
         ON CONFLICT (index_id) DO UPDATE SET seq = excluded.seq",
        params![index_id, seq],
    )
    .map_err(sql_err)?;
    tx.execute(
        "DELETE FROM graph_log WHERE index_id = ?1 AND seq <= ?2",
        params![index_id, seq],
    )
    .map_err(sql_err)?;
    tx.commit().map_err(sql_err)
}

/// Drops `index_id`'s log and checkpoint; call inside the index's deletion.
pub(crate) fn forget(conn: &Connection, index_id: i64) -> Result<()> {
    conn.execute("DELETE FROM graph_log WHERE index_id = ?1", [index_id])
        .map_err(sql_err)?;
    conn.execute(
        "DELETE FROM graph_checkpoints WHERE index_id = ?1",
        [index_id],
    )
    .map_err(sql_err)?;
    Ok(())
}
