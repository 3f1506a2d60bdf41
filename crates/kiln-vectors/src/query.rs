//! Reads: nearest-neighbour queries (filter first, then top-K) and reads by id.

use std::collections::{HashMap, HashSet};

use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;
use serde_json::{Map, Value};

use crate::db::{sql_err, IndexRow, VectorDb};
use crate::error::{Result, VectorError};
use crate::metric::has_length;
use crate::record::{Match, Query, ReturnMetadata, VectorRecord};
use crate::remote::collection;
use crate::schema::decode;
use crate::search;

impl VectorDb {
    /// The `top_k` vectors closest to `q.vector` among those in `q.namespace` that
    /// `q.filter` admits, closest first.
    pub fn query(&self, owner: &str, name: &str, q: &Query) -> Result<Vec<Match>> {
        let inner = &self.inner;
        let limits = &inner.limits;
        let row = inner.row(&inner.conn(), owner, name)?;
        let payload = q.return_values || q.return_metadata == ReturnMetadata::All;
        let max = if payload {
            limits.max_top_k_with_payload
        } else {
            limits.max_top_k
        };
        if q.top_k == 0 || q.top_k > max {
            return Err(VectorError::invalid(
                "topK",
                format!(
                    "`topK` must be between 1 and {max}{}, not {}",
                    if payload {
                        " when values or all metadata are returned"
                    } else {
                        ""
                    },
                    q.top_k
                ),
            ));
        }
        let dims = row.desc.dimensions;
        if q.vector.len() != dims {
            return Err(VectorError::invalid(
                "vector",
                format!(
                    "the query vector has {} dimensions; index '{name}' has {dims}",
                    q.vector.len()
                ),
            ));
        }
        if q.vector.iter().any(|v| !v.is_finite()) {
            return Err(VectorError::invalid(
                "vector",
                "the query vector has a value that is not a finite number",
            ));
        }
        if row.desc.metric.needs_length() && !has_length(&q.vector) {
            return Err(VectorError::invalid(
                "vector",
                format!(
                    "the query vector is all zeros; index '{name}' uses cosine similarity, \
                     which has no value for a vector without length"
                ),
            ));
        }
        if let Some(remote) = inner.remote_of(&row)? {
            let found = remote.query(&collection(owner, name), q, row.desc.metric)?;
            return Ok(found
                .into_iter()
                .map(|m| Match {
                    values: m.values.filter(|_| q.return_values),
                    metadata: metadata_view(&row, m.metadata, q.return_metadata),
                    ..m
                })
                .collect());
        }
        let live = inner.live(&row);
        let guard = live.read(&inner.store, &row.shape())?;
        let Some(graph) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let metric = row.desc.metric;
        let params = inner.params();
        let scored: Vec<(u64, f32)> = match self.candidates(&row, q)? {
            Candidates::All => search::nearest(graph, params, metric, &q.vector, q.top_k, None)?,
            Candidates::Few(keys) => search::scan(graph, metric, &q.vector, q.top_k, keys),
            Candidates::Many(keys) => {
                let ef = search::ef(params, graph.in_graph(), q.top_k);
                if search::exact_is_cheaper(params, keys.len(), dims, ef) {
                    search::scan(graph, metric, &q.vector, q.top_k, keys)
                } else {
                    search::nearest(graph, params, metric, &q.vector, q.top_k, Some(&keys))?
                }
            }
        };
        drop(guard);
        let mut rows = self.rows_by_key(&row, scored.iter().map(|s| s.0), q.return_values)?;
        Ok(scored
            .into_iter()
            .filter_map(|(key, score)| {
                let (rec, _) = rows.remove(&key)?;
                Some(Match {
                    id: rec.id,
                    score,
                    namespace: rec.namespace,
                    values: q.return_values.then_some(rec.values),
                    metadata: metadata_view(&row, rec.metadata, q.return_metadata),
                })
            })
            .collect())
    }

    /// The stored vectors with these ids, in the order asked (missing ids left out).
    pub fn get_by_ids(&self, owner: &str, name: &str, ids: &[String]) -> Result<Vec<VectorRecord>> {
        check_ids(&self.inner.limits, ids)?;
        let conn = self.inner.conn();
        let row = self.inner.row(&conn, owner, name)?;
        if let Some(remote) = self.inner.remote_of(&row)? {
            drop(conn);
            let mut found: std::collections::HashMap<String, VectorRecord> = remote
                .get(&collection(owner, name), ids)?
                .into_iter()
                .map(|r| (r.id.clone(), r))
                .collect();
            return Ok(ids.iter().filter_map(|id| found.remove(id)).collect());
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, namespace, vals, metadata FROM vectors WHERE index_id = ?1 AND id = ?2",
            )
            .map_err(sql_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let mut rows = stmt.query(rusqlite::params![row.id, id]).map_err(sql_err)?;
            if let Some(r) = rows.next().map_err(sql_err)? {
                out.push(record(r, true).map_err(sql_err)?);
            }
        }
        Ok(out)
    }

    /// Which vectors a query may return: all (no namespace or filter), a few to score
    /// exactly, or many to admit during the graph search.
    fn candidates(&self, row: &IndexRow, q: &Query) -> Result<Candidates> {
        if q.namespace.is_none() && q.filter.is_none() {
            return Ok(Candidates::All);
        }
        let mut params = vec![SqlValue::Integer(row.id)];
        let mut cond = String::from("index_id = ?");
        if let Some(ns) = &q.namespace {
            cond.push_str(" AND namespace = ?");
            params.push(SqlValue::Text(ns.clone()));
        }
        if let Some(f) = &q.filter {
            cond.push_str(" AND ");
            cond.push_str(&f.to_sql(&|p| row.column(p), &mut params));
        }
        let few = self.inner.params().exact_scan_max;
        let conn = self.inner.conn();
        let mut stmt = conn
            .prepare(&format!("SELECT key FROM vectors WHERE {cond}"))
            .map_err(sql_err)?;
        let mut rows = stmt.query(params_from_iter(params)).map_err(sql_err)?;
        let mut keys = Vec::new();
        while let Some(r) = rows.next().map_err(sql_err)? {
            keys.push(r.get::<_, i64>(0).map_err(sql_err)? as u64);
        }
        Ok(if keys.len() <= few {
            Candidates::Few(keys)
        } else {
            Candidates::Many(keys.into_iter().collect())
        })
    }

    /// Rows by graph key: the record and its key.
    fn rows_by_key(
        &self,
        row: &IndexRow,
        keys: impl Iterator<Item = u64>,
        values: bool,
    ) -> Result<HashMap<u64, (VectorRecord, u64)>> {
        let keys: Vec<i64> = keys.map(|k| k as i64).collect();
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let conn = self.inner.conn();
        let marks = vec!["?"; keys.len()].join(",");
        let mut stmt = conn
            .prepare(&format!(
                // `+index_id`: look rows up by key; an index on `index_id` would scan them all.
                "SELECT id, namespace, {}, metadata, key FROM vectors WHERE key IN ({marks}) AND +index_id = {}",
                if values { "vals" } else { "NULL" },
                row.id
            ))
            .map_err(sql_err)?;
        let mut rows = stmt.query(params_from_iter(keys)).map_err(sql_err)?;
        let mut out = HashMap::new();
        while let Some(r) = rows.next().map_err(sql_err)? {
            let key = r.get::<_, i64>(4).map_err(sql_err)? as u64;
            out.insert(key, (record(r, values).map_err(sql_err)?, key));
        }
        Ok(out)
    }
}

enum Candidates {
    All,
    Few(Vec<u64>),
    Many(HashSet<u64>),
}

fn record(r: &rusqlite::Row<'_>, values: bool) -> rusqlite::Result<VectorRecord> {
    let vals: Option<Vec<u8>> = if values { r.get(2)? } else { None };
    let meta: Option<String> = r.get(3)?;
    Ok(VectorRecord {
        id: r.get(0)?,
        namespace: r.get(1)?,
        values: vals.map(|v| decode(&v)).unwrap_or_default(),
        metadata: meta.and_then(|m| serde_json::from_str(&m).ok()),
    })
}

/// The metadata a match returns: none, only indexed properties, or all.
fn metadata_view(
    row: &IndexRow,
    meta: Option<Map<String, Value>>,
    which: ReturnMetadata,
) -> Option<Map<String, Value>> {
    match which {
        ReturnMetadata::None => None,
        ReturnMetadata::All => Some(meta.unwrap_or_default()),
        ReturnMetadata::Indexed => {
            let meta = meta.unwrap_or_default();
            let mut out = Map::new();
            for (m, _) in &row.slots {
                if let Some(v) = crate::filter::property(&meta, &m.property) {
                    out.insert(m.property.clone(), v.clone());
                }
            }
            Some(out)
        }
    }
}

/// The ids of a read or delete by id: at most a write's worth, each as long as a stored
/// id may be (a longer one could never match, so it is a mistake worth naming).
pub(crate) fn check_ids(limits: &crate::Limits, ids: &[String]) -> Result<()> {
    if ids.len() > limits.max_batch {
        return Err(VectorError::invalid(
            "ids",
            format!(
                "{} ids in one request; at most {} are allowed",
                ids.len(),
                limits.max_batch
            ),
        ));
    }
    match ids
        .iter()
        .position(|id| id.is_empty() || id.len() > limits.max_id_bytes)
    {
        Some(i) => Err(VectorError::invalid(
            format!("ids[{i}]"),
            format!("a vector id must be 1 to {} bytes", limits.max_id_bytes),
        )),
        None => Ok(()),
    }
}
