//! Writes: insert, upsert and deletes. Each is one SQLite transaction, which also logs
//! the keys it touched for the graph (`graph_log.rs`), applied to the graph after it
//! commits; the call returns only then, so an acknowledged write survives a crash (the
//! next start loads the saved graph and replays the log after it).

use rusqlite::{params, params_from_iter, OptionalExtension};

use crate::db::{new_mutation_id, slot_value, sql_err, still_there, touch, IndexRow, VectorDb};
use crate::error::{Result, VectorError};
use crate::filter::Filter;
use crate::graph_log;
use crate::metric::has_length;
use crate::query::check_ids;
use crate::record::{Mutation, VectorRecord, WriteMode};
use crate::schema::{encode, SLOTS};

impl VectorDb {
    /// Writes `records` to index `name`. Insert keeps a vector whose id is stored
    /// already; upsert replaces it (values, namespace and metadata). Within one call a
    /// later record with the same id wins under upsert, the first under insert.
    pub fn write(
        &self,
        owner: &str,
        name: &str,
        records: &[VectorRecord],
        mode: WriteMode,
    ) -> Result<Mutation> {
        let inner = &self.inner;
        let row = inner.row(&inner.conn(), owner, name)?;
        self.check_records(&row, records)?;
        if let Some(remote) = inner.remote_of(&row)? {
            return self.write_remote(remote, &row, owner, records, mode);
        }
        let live = inner.live(&row);
        let writer = live.lock_writer();
        live.open(&writer, &inner.store, &row.shape())?;
        let mutation = new_mutation_id();
        let mut removed = Vec::new();
        let mut added: Vec<(u64, &[f32])> = Vec::with_capacity(records.len());
        {
            let mut conn = inner.conn();
            let tx = conn.transaction().map_err(sql_err)?;
            still_there(&tx, &row)?;
            {
                let mut find = tx
                    .prepare_cached("SELECT key FROM vectors WHERE index_id = ?1 AND id = ?2")
                    .map_err(sql_err)?;
                let mut delete = tx
                    .prepare_cached("DELETE FROM vectors WHERE key = ?1")
                    .map_err(sql_err)?;
                let cols: String = (0..SLOTS).map(|s| format!(", m{s}")).collect();
                let marks: String = (0..SLOTS).map(|s| format!(", ?{}", s + 7)).collect();
                let mut insert = tx
                    .prepare_cached(&format!(
                        "INSERT INTO vectors (index_id, id, namespace, vals, metadata, key{cols})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6{marks})"
                    ))
                    .map_err(sql_err)?;
                for r in records {
                    let existing: Option<i64> = find
                        .query_row(params![row.id, r.id], |x| x.get(0))
                        .optional()
                        .map_err(sql_err)?;
                    if let Some(key) = existing {
                        if mode == WriteMode::Insert {
                            continue;
                        }
                        delete.execute([key]).map_err(sql_err)?;
                        removed.push(key as u64);
                        added.retain(|(k, _)| *k != key as u64);
                    }
                    let meta = r.metadata.clone().unwrap_or_default();
                    let mut slots = vec![rusqlite::types::Value::Null; SLOTS];
                    for (m, slot) in &row.slots {
                        slots[*slot] = slot_value(&meta, &m.property, m.index_type);
                    }
                    let metadata = r
                        .metadata
                        .as_ref()
                        .map(|m| serde_json::Value::Object(m.clone()).to_string());
                    let mut values: Vec<rusqlite::types::Value> = vec![
                        row.id.into(),
                        r.id.clone().into(),
                        r.namespace.clone().into(),
                        encode(&r.values).into(),
                        metadata.into(),
                        rusqlite::types::Value::Null,
                    ];
                    values.extend(slots);
                    insert.execute(params_from_iter(values)).map_err(sql_err)?;
                    added.push((tx.last_insert_rowid() as u64, &r.values));
                }
                let count: i64 = tx
                    .query_row(
                        "SELECT COUNT(*) FROM vectors WHERE index_id = ?1",
                        [row.id],
                        |x| x.get(0),
                    )
                    .map_err(sql_err)?;
                let cap = inner.limits.max_vectors_per_index;
                if count as u64 > cap {
                    return Err(VectorError::invalid(
                        "vectors",
                        format!("index '{name}' would hold {count} vectors, more than its limit of {cap}"),
                    ));
                }
            }
            let logged: Vec<u64> = removed
                .iter()
                .copied()
                .chain(added.iter().map(|(k, _)| *k))
                .collect();
            graph_log::log_keys(&tx, row.id, &logged)?;
            touch(&tx, row.id, &mutation)?;
            tx.commit().map_err(sql_err)?;
        }
        live.apply(&inner.store, &removed, &added);
        live.maybe_checkpoint(writer, &inner.store);
        Ok(Mutation {
            mutation_id: mutation,
            count: added.len(),
        })
    }

    /// Deletes the vectors with these ids (ids not stored are ignored).
    pub fn delete_by_ids(&self, owner: &str, name: &str, ids: &[String]) -> Result<Mutation> {
        check_ids(&self.inner.limits, ids)?;
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        if let Some(remote) = self.inner.remote_of(&row)? {
            return self.delete_remote(remote, &row, owner, Some(ids), None);
        }
        self.delete_keys(&row, |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT key FROM vectors WHERE index_id = ?1 AND id = ?2")
                .map_err(sql_err)?;
            let mut keys = Vec::new();
            for id in ids {
                if let Some(k) = stmt
                    .query_row(params![row.id, id], |r| r.get::<_, i64>(0))
                    .optional()
                    .map_err(sql_err)?
                {
                    keys.push(k);
                }
            }
            Ok(keys)
        })
    }

    /// Deletes every vector of the index that `filter` matches.
    pub fn delete_where(&self, owner: &str, name: &str, filter: &Filter) -> Result<Mutation> {
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        if let Some(remote) = self.inner.remote_of(&row)? {
            return self.delete_remote(remote, &row, owner, None, Some(filter));
        }
        self.delete_keys(&row, |conn| {
            let mut params = vec![rusqlite::types::Value::Integer(row.id)];
            let cond = filter.to_sql(&|p| row.column(p), &mut params);
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT key FROM vectors WHERE index_id = ? AND {cond}"
                ))
                .map_err(sql_err)?;
            let keys = stmt
                .query_map(params_from_iter(params), |r| r.get::<_, i64>(0))
                .map_err(sql_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err)?;
            Ok(keys)
        })
    }

    fn delete_keys(
        &self,
        row: &IndexRow,
        find: impl FnOnce(&rusqlite::Connection) -> Result<Vec<i64>>,
    ) -> Result<Mutation> {
        let inner = &self.inner;
        let live = inner.live(row);
        let writer = live.lock_writer();
        live.open(&writer, &inner.store, &row.shape())?;
        let mutation = new_mutation_id();
        let keys = {
            let mut conn = inner.conn();
            let tx = conn.transaction().map_err(sql_err)?;
            still_there(&tx, row)?;
            let keys = find(&tx)?;
            {
                let mut delete = tx
                    .prepare_cached("DELETE FROM vectors WHERE key = ?1")
                    .map_err(sql_err)?;
                for k in &keys {
                    delete.execute([k]).map_err(sql_err)?;
                }
            }
            let logged: Vec<u64> = keys.iter().map(|k| *k as u64).collect();
            graph_log::log_keys(&tx, row.id, &logged)?;
            touch(&tx, row.id, &mutation)?;
            tx.commit().map_err(sql_err)?;
            keys
        };
        let removed: Vec<u64> = keys.iter().map(|k| *k as u64).collect();
        live.apply(&inner.store, &removed, &[]);
        live.maybe_checkpoint(writer, &inner.store);
        Ok(Mutation {
            mutation_id: mutation,
            count: removed.len(),
        })
    }

    /// Checks a write's records against the index and the limits before anything is
    /// written; the error names the record.
    fn check_records(&self, row: &IndexRow, records: &[VectorRecord]) -> Result<()> {
        let limits = &self.inner.limits;
        if records.is_empty() {
            return Err(VectorError::invalid("vectors", "the body holds no vectors"));
        }
        if records.len() > limits.max_batch {
            return Err(VectorError::invalid(
                "vectors",
                format!(
                    "{} vectors in one write; at most {} are allowed",
                    records.len(),
                    limits.max_batch
                ),
            ));
        }
        for (i, r) in records.iter().enumerate() {
            let at = |field: &str| format!("vectors[{i}].{field}");
            if r.id.is_empty() || r.id.len() > limits.max_id_bytes {
                return Err(VectorError::invalid(
                    at("id"),
                    format!("a vector id must be 1 to {} bytes", limits.max_id_bytes),
                ));
            }
            if r.namespace
                .as_ref()
                .is_some_and(|n| n.is_empty() || n.len() > limits.max_id_bytes)
            {
                return Err(VectorError::invalid(
                    at("namespace"),
                    format!("a namespace must be 1 to {} bytes", limits.max_id_bytes),
                ));
            }
            let dims = row.desc.dimensions;
            if r.values.len() != dims {
                return Err(VectorError::invalid(
                    at("values"),
                    format!(
                        "vector '{}' has {} dimensions; index '{}' has {dims}",
                        r.id,
                        r.values.len(),
                        row.desc.name
                    ),
                ));
            }
            if r.values.iter().any(|v| !v.is_finite()) {
                return Err(VectorError::invalid(
                    at("values"),
                    format!("vector '{}' has a value that is not a finite number", r.id),
                ));
            }
            if row.desc.metric.needs_length() && !has_length(&r.values) {
                return Err(VectorError::invalid(
                    at("values"),
                    format!(
                        "vector '{}' is all zeros; index '{}' uses cosine similarity, which \
                         has no value for a vector without length",
                        r.id, row.desc.name
                    ),
                ));
            }
            if let Some(m) = &r.metadata {
                let bytes = serde_json::Value::Object(m.clone()).to_string().len();
                if bytes > limits.max_metadata_bytes {
                    return Err(VectorError::invalid(
                        at("metadata"),
                        format!(
                            "vector '{}' has {bytes} bytes of metadata, more than the limit of {}",
                            r.id, limits.max_metadata_bytes
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
