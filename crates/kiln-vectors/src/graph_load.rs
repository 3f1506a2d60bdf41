//! How a graph comes back when its index is first used after a start: from its graph
//! file as a read-only view with the log after the file replayed (`load`), or, when
//! there is no usable file, rebuilt from SQLite (`rebuild`). Either way the graph is
//! searchable at once; the worker makes a view writable once a write is pending, and
//! inserts the tail.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

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
///
/// The replay reads SQLite on a thread of its own while this one verifies the file and
/// opens the view: on a 1M × 384 index the two are 85–240 and 280–450 ms, and a first
/// query after a restart waits for both.
pub(crate) fn load(store: &Store, shape: &Shape) -> std::result::Result<(Graph, usize), Unusable> {
    let (h, unverified) = graph_file::open(&store.dir, shape.index_id)?;
    if h.dimensions as usize != shape.dimensions
        || h.metric != shape.metric.code()
        || h.connectivity as usize != store.params.connectivity
    {
        return Err(Unusable::Stale(
            "its dimensions, metric or connectivity differ from the index's".into(),
        ));
    }
    let started = Instant::now();
    // The graph's bytes are read only after `verify`; then the view: (view, verified at).
    let view = || -> std::result::Result<(Usearch, Duration), Unusable> {
        let mapped = unverified.verify()?;
        let verified = started.elapsed();
        let ann = Usearch::view(shape.dimensions, shape.metric, &store.params, mapped)?;
        Ok((ann, verified))
    };
    let replay = || (replay_after(store, shape, h.seq), started.elapsed());
    let (viewed, (replayed, replayed_at)) = std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("kiln-vector-replay".into())
            .spawn_scoped(s, replay);
        let viewed = view().map(|v| (v, started.elapsed()));
        let replayed = match thread {
            Ok(t) => t.join().unwrap_or_else(|_| {
                let e = Unusable::Stale("the log's replay panicked".into());
                (Err(e), started.elapsed())
            }),
            Err(_) => replay(), // no thread to be had: one after the other
        };
        (viewed, replayed)
    });
    let ((ann, verified), viewed) = viewed?;
    let Replay { keys, tail, count } = replayed?;
    tracing::debug!(
        index = shape.index_id,
        verified_ms = verified.as_millis() as u64,
        viewed_ms = viewed.as_millis() as u64,
        replayed_ms = replayed_at.as_millis() as u64,
        "vector graph load phases"
    );
    if ann.len() as u64 != h.vectors {
        return Err(Unusable::Stale(format!(
            "the file says {} vectors, its graph holds {}",
            h.vectors,
            ann.len()
        )));
    }
    let masked = keys.iter().copied().filter(|k| ann.contains(*k)).collect();
    let graph = Graph {
        ann: Box::new(ann),
        tail,
        masked,
        shape: *shape,
    };
    if graph.len() != count {
        return Err(Unusable::Stale(format!(
            "after replaying the log the graph has {} vectors, the database {count}",
            graph.len()
        )));
    }
    Ok((graph, keys.len()))
}

/// What the log holds after a graph file's sequence.
struct Replay {
    /// The keys logged after it.
    keys: Vec<u64>,
    /// The stored vectors among those keys.
    tail: HashMap<u64, Vec<f32>>,
    /// How many vectors the index stores.
    count: usize,
}

/// The log after sequence `seq`; refuses a file whose sequence the log cannot replay
/// from.
fn replay_after(store: &Store, shape: &Shape, seq: i64) -> std::result::Result<Replay, Unusable> {
    let conn = store.conn();
    let recorded = graph_log::checkpointed(&conn, shape.index_id)?;
    let issued = graph_log::issued(&conn)?;
    // Older than the log's checkpoint: the rows after it were dropped. Newer than any
    // row issued: the database is older than the file (restored from a copy).
    if seq < recorded || seq > issued {
        return Err(Unusable::Stale(format!(
            "generation mismatch: the file covers the log to {seq}, the database \
             checkpointed {recorded} and issued {issued}"
        )));
    }
    let keys = graph_log::keys_after(&conn, shape.index_id, seq)?;
    let tail = rows_by_key(&conn, shape.index_id, &keys)?;
    let count = count_vectors(&conn, shape.index_id)?;
    Ok(Replay { keys, tail, count })
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
