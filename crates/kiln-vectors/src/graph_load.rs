//! How a graph comes back when its index is first used after a start: from its graph
//! file as a read-only view with the log after the file replayed (`load`), or, when
//! there is no usable file, rebuilt from SQLite (`rebuild`). Either way the graph is
//! searchable at once; the worker then makes a view writable and inserts the tail.

use std::collections::{HashMap, HashSet};

use rusqlite::{params, params_from_iter, Connection};

use crate::error::{Result, VectorError};
use crate::graph::{AnnGraph, Usearch};
use crate::graph_file::{self, FileError};
use crate::graph_log;
use crate::live::{Graph, Shape, Store};
use crate::schema::{decode, sql_err};

/// Why a graph file was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unusable {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{0}")]
    Stale(String),
    #[error(transparent)]
    Vector(#[from] VectorError),
}

/// The graph from its file, as a view, with the keys logged after it replayed: masked
/// in the graph, and those still stored put in the tail. Returns the graph and how
/// many keys were replayed.
pub(crate) fn load(store: &Store, shape: &Shape) -> std::result::Result<(Graph, usize), Unusable> {
    let (h, mapped) = graph_file::read(&store.dir, shape.index_id)?;
    let stale = |why: String| Err(Unusable::Stale(why));
    if h.dimensions as usize != shape.dimensions
        || h.metric != shape.metric.code()
        || h.connectivity as usize != store.params.connectivity
    {
        return stale("its dimensions, metric or connectivity differ from the index's".into());
    }
    let (keys, tail, count) = {
        let conn = store.conn();
        let recorded = graph_log::checkpointed(&conn, shape.index_id)?;
        let issued = graph_log::issued(&conn)?;
        // Older than the log's checkpoint: the rows after it were dropped. Newer than
        // any row issued: the database is older than the file (restored from a copy).
        if h.seq < recorded || h.seq > issued {
            return stale(format!(
                "generation mismatch: the file covers the log to {}, the database \
                 checkpointed {recorded} and issued {issued}",
                h.seq
            ));
        }
        let keys = graph_log::keys_after(&conn, shape.index_id, h.seq)?;
        let tail = rows_by_key(&conn, shape.index_id, &keys)?;
        (keys, tail, count_vectors(&conn, shape.index_id)?)
    };
    let ann = Usearch::view(shape.dimensions, shape.metric, &store.params, mapped)?;
    if ann.len() as u64 != h.vectors {
        return stale(format!(
            "the file says {} vectors, its graph holds {}",
            h.vectors,
            ann.len()
        ));
    }
    let masked = keys.iter().copied().filter(|k| ann.contains(*k)).collect();
    let graph = Graph {
        ann: Box::new(ann),
        tail,
        masked,
        shape: *shape,
    };
    if graph.len() != count {
        return stale(format!(
            "after replaying the log the graph has {} vectors, the database {count}",
            graph.len()
        ));
    }
    Ok((graph, keys.len()))
}

/// An empty graph with every stored vector in its tail (the worker inserts them).
pub(crate) fn rebuild(store: &Store, shape: &Shape) -> Result<Graph> {
    let tail = {
        let conn = store.conn();
        let mut stmt = conn
            .prepare("SELECT key, vals FROM vectors WHERE index_id = ?1")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map(params![shape.index_id], |r| {
                Ok((r.get::<_, i64>(0)? as u64, decode(&r.get::<_, Vec<u8>>(1)?)))
            })
            .map_err(sql_err)?;
        rows.collect::<rusqlite::Result<HashMap<_, _>>>()
            .map_err(sql_err)?
    };
    let ann = Usearch::new(shape.dimensions, shape.metric, &store.params)?;
    ann.reserve(tail.len())?;
    Ok(Graph {
        ann: Box::new(ann),
        tail,
        masked: HashSet::new(),
        shape: *shape,
    })
}

/// The stored vectors of `index_id` among `keys`.
fn rows_by_key(conn: &Connection, index_id: i64, keys: &[u64]) -> Result<HashMap<u64, Vec<f32>>> {
    let mut out = HashMap::new();
    for part in keys.chunks(500) {
        let marks = vec!["?"; part.len()].join(",");
        let mut stmt = conn
            .prepare(&format!(
                "SELECT key, vals FROM vectors WHERE key IN ({marks}) AND +index_id = {index_id}"
            ))
            .map_err(sql_err)?;
        let rows = stmt
            .query_map(params_from_iter(part.iter().map(|k| *k as i64)), |r| {
                Ok((r.get::<_, i64>(0)? as u64, decode(&r.get::<_, Vec<u8>>(1)?)))
            })
            .map_err(sql_err)?;
        for r in rows {
            let (k, v) = r.map_err(sql_err)?;
            out.insert(k, v);
        }
    }
    Ok(out)
}

fn count_vectors(conn: &Connection, index_id: i64) -> Result<usize> {
    let n: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM vectors WHERE index_id = ?1",
            [index_id],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

pub(crate) fn index_exists(conn: &Connection, index_id: i64) -> Result<bool> {
    conn.query_row(
        "SELECT COUNT(*) FROM indexes WHERE id = ?1",
        [index_id],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err)
}
