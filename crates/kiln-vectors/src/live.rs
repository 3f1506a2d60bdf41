//! Each index's graph in memory: built from SQLite the first time the index is used,
//! then kept in step with every committed write.
//!
//! Writes to one index are serialized by its `writer` lock, which the build also
//! holds, so no committed write can slip between the build's read of the table and
//! the graph going live. A graph that failed to take a committed write is dropped and
//! rebuilt from SQLite on next use: SQLite is the truth.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use rusqlite::{params, Connection};

use crate::error::Result;
use crate::graph::{AnnGraph, Usearch};
use crate::limits::GraphParams;
use crate::metric::Metric;
use crate::schema::decode;

/// The in-memory side of one index.
#[derive(Default)]
pub(crate) struct LiveIndex {
    writer: Mutex<()>,
    graph: RwLock<Option<Box<dyn AnnGraph>>>,
}

/// What building a graph needs to know about its index.
pub(crate) struct Shape {
    pub index_id: i64,
    pub dimensions: usize,
    pub metric: Metric,
}

pub(crate) type GraphGuard<'a> = RwLockReadGuard<'a, Option<Box<dyn AnnGraph>>>;

impl LiveIndex {
    /// The graph for reading, built first if needed.
    pub(crate) fn read(
        &self,
        conn: &Mutex<Connection>,
        shape: &Shape,
        params: &GraphParams,
    ) -> Result<GraphGuard<'_>> {
        loop {
            let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
            if g.is_some() {
                return Ok(g);
            }
            drop(g);
            let w = self.lock_writer();
            self.build(&w, conn, shape, params)?;
        }
    }

    /// Serializes writes to this index.
    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Builds the graph (if it isn't) while the caller holds the writer lock.
    pub(crate) fn build(
        &self,
        _writer: &MutexGuard<'_, ()>,
        conn: &Mutex<Connection>,
        shape: &Shape,
        params: &GraphParams,
    ) -> Result<()> {
        if self
            .graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return Ok(());
        }
        let rows: Vec<(u64, Vec<f32>)> = {
            let conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut stmt = conn
                .prepare("SELECT key, vals FROM vectors WHERE index_id = ?1")
                .map_err(crate::db::sql_err)?;
            let rows = stmt
                .query_map(params![shape.index_id], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(crate::db::sql_err)?;
            rows.map(|r| r.map(|(k, v)| (k as u64, decode(&v))))
                .collect::<rusqlite::Result<_>>()
                .map_err(crate::db::sql_err)?
        };
        let started = std::time::Instant::now();
        let graph = Usearch::new(shape.dimensions, shape.metric, params)?;
        graph.reserve(rows.len())?;
        let items: Vec<(u64, &[f32])> = rows.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        add_parallel(&graph, &items)?;
        tracing::info!(
            index = shape.index_id,
            vectors = rows.len(),
            ms = started.elapsed().as_millis() as u64,
            "vector graph built"
        );
        *self.graph.write().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(graph));
        Ok(())
    }

    /// Applies a committed write to the graph (caller holds the writer lock); on
    /// failure the graph is dropped, to be rebuilt from SQLite.
    pub(crate) fn apply(&self, removed: &[u64], added: &[(u64, &[f32])]) {
        let mut g = self.graph.write().unwrap_or_else(|e| e.into_inner());
        let Some(graph) = g.as_ref() else { return };
        let result = removed
            .iter()
            .try_for_each(|k| graph.remove(*k))
            .and_then(|()| graph.reserve(graph.len() + added.len()))
            .and_then(|()| add_parallel(graph.as_ref(), added));
        if let Err(e) = result {
            tracing::warn!(error = %e, "vector graph dropped after a failed update; it will be rebuilt");
            *g = None;
        }
    }
}

/// Adds `items` to `graph` from one thread per core (usearch inserts concurrently).
fn add_parallel(graph: &dyn AnnGraph, items: &[(u64, &[f32])]) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads == 1 || items.len() < 64 {
        return items.iter().try_for_each(|(k, v)| graph.add(*k, v));
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().try_for_each(|(k, v)| graph.add(*k, v))))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join().unwrap_or_else(|_| {
                Err(crate::VectorError::Graph(
                    "an insert thread panicked".into(),
                ))
            })
        })
    })
}

/// The live indexes by their row id.
#[derive(Default)]
pub(crate) struct LiveSet(Mutex<std::collections::HashMap<i64, Arc<LiveIndex>>>);

impl LiveSet {
    pub(crate) fn get(&self, index_id: i64) -> Arc<LiveIndex> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(index_id).or_default().clone()
    }

    pub(crate) fn forget(&self, index_id: i64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&index_id);
    }
}
