//! [`VectorDb`]: the database of indexes, their creation, listing and deletion, and
//! their declared metadata indexes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use kiln_db::{to_u64, unix_now};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{Map, Value};

use crate::error::{Result, VectorError};
use crate::filter::Filter;
use crate::limits::{GraphParams, Limits};
use crate::live::{GraphStats, LiveIndex, LiveSet, Shape, Store};
use crate::metric::Metric;
use crate::record::{IndexDesc, IndexInfo, MetaType, MetadataIndex, Mutation, EMBEDDED};
use crate::remote::{collection, RemoteIndexes};
use crate::schema::{DB_FILE, SCHEMA, SLOTS};
use crate::worker::Worker;

/// An index's row.
#[derive(Debug, Clone)]
pub(crate) struct IndexRow {
    pub id: i64,
    pub desc: IndexDesc,
    /// Declared metadata indexes and their columns.
    pub slots: Vec<(MetadataIndex, usize)>,
}

impl IndexRow {
    pub(crate) fn shape(&self) -> Shape {
        Shape {
            index_id: self.id,
            dimensions: self.desc.dimensions,
            metric: self.desc.metric,
        }
    }

    /// The column and type of `property`'s metadata index.
    pub(crate) fn column(&self, property: &str) -> Option<(usize, MetaType)> {
        self.slots
            .iter()
            .find(|(m, _)| m.property == property)
            .map(|(m, slot)| (*slot, m.index_type))
    }
}

/// Every index of every owner, in one SQLite file under a directory this process owns.
#[derive(Clone)]
pub struct VectorDb {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The connection, graphs and their parameters, shared with the graph worker.
    pub(crate) store: Arc<Store>,
    pub(crate) limits: Limits,
    /// The engine of remote indexes, when the server has one.
    pub(crate) remote: Option<Arc<dyn RemoteIndexes>>,
    /// Stopped and joined before the directory lock is released.
    _worker: Worker,
    _lock: File,
}

pub(crate) use crate::schema::sql_err;

impl VectorDb {
    /// Opens (creating) the database in `dir`, locking the directory.
    pub fn open(dir: &Path, limits: Limits, params: GraphParams) -> Result<Self> {
        Self::open_with_remote(dir, limits, params, None)
    }

    /// Like [`VectorDb::open`], with `remote` for indexes created on it.
    pub fn open_with_remote(
        dir: &Path,
        limits: Limits,
        params: GraphParams,
        remote: Option<Arc<dyn RemoteIndexes>>,
    ) -> Result<Self> {
        let lock = kiln_db::lock_dir(dir).map_err(|e| VectorError::Graph(e.to_string()))?;
        let path: PathBuf = dir.join(DB_FILE);
        let conn = kiln_db::open(&path, &SCHEMA)?;
        conn.execute_batch("PRAGMA foreign_keys = ON")
            .map_err(sql_err)?;
        let shapes = embedded_shapes(&conn)?;
        let ids: std::collections::HashSet<i64> = all_index_ids(&conn)?;
        crate::graph_file::sweep(dir, |id| ids.contains(&id));
        let store = Arc::new(Store {
            conn: Mutex::new(conn),
            dir: dir.to_path_buf(),
            params,
            live: LiveSet::default(),
            drain: Mutex::new(None),
        });
        let worker = Worker::start(store.clone(), shapes);
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                limits,
                remote,
                _worker: worker,
                _lock: lock,
            }),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// How the graph of `owner`'s index `name` came to be and what it holds; `None`
    /// while it is not in memory (or the index is remote).
    pub fn graph_stats(&self, owner: &str, name: &str) -> Result<Option<GraphStats>> {
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        Ok(self
            .inner
            .store
            .live
            .existing(row.id)
            .map(|live| live.stats())
            .filter(|s| s.loads + s.builds > 0))
    }

    pub fn create_index(
        &self,
        owner: &str,
        name: &str,
        dimensions: usize,
        metric: Metric,
        description: Option<&str>,
    ) -> Result<IndexDesc> {
        self.create_index_on(owner, name, dimensions, metric, description, EMBEDDED)
    }

    /// Creates an index on `backend`: [`EMBEDDED`] or the remote engine's name.
    pub fn create_index_on(
        &self,
        owner: &str,
        name: &str,
        dimensions: usize,
        metric: Metric,
        description: Option<&str>,
        backend: &str,
    ) -> Result<IndexDesc> {
        check_name(name)?;
        let remote = self.inner.remote_named(backend)?;
        let max = self.inner.limits.max_dimensions;
        if dimensions == 0 || dimensions > max {
            return Err(VectorError::invalid(
                "config.dimensions",
                format!("`dimensions` must be between 1 and {max}, not {dimensions}"),
            ));
        }
        let conn = self.inner.conn();
        let count: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM indexes WHERE owner = ?1",
                [owner],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        let cap = self.inner.limits.max_indexes_per_owner;
        if to_u64(count) >= cap as u64 {
            return Err(VectorError::invalid(
                "name",
                format!("this key already has {count} indexes, the most allowed ({cap}); delete one first"),
            ));
        }
        let now = unix_now();
        let inserted = conn
            .execute(
                "INSERT INTO indexes (owner, name, description, dimensions, metric, created_at, modified_at, backend)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7) ON CONFLICT (owner, name) DO NOTHING",
                params![owner, name, description, dimensions as i64, metric.as_str(), now as i64, backend],
            )
            .map_err(sql_err)?;
        if inserted == 0 {
            return Err(VectorError::IndexExists(name.to_string()));
        }
        if let Some(remote) = remote {
            // The row first, so a collection is never made for an index that isn't.
            if let Err(e) = remote.create(&collection(owner, name), dimensions, metric) {
                conn.execute(
                    "DELETE FROM indexes WHERE owner = ?1 AND name = ?2",
                    params![owner, name],
                )
                .map_err(sql_err)?;
                return Err(e);
            }
        }
        Ok(IndexDesc {
            name: name.to_string(),
            description: description.map(str::to_string),
            dimensions,
            metric,
            created_at: now,
            modified_at: now,
            backend: backend.to_string(),
        })
    }

    pub fn get_index(&self, owner: &str, name: &str) -> Result<IndexDesc> {
        Ok(self.inner.row(&self.inner.conn(), owner, name)?.desc)
    }

    /// `owner`'s indexes by name.
    pub fn list_indexes(&self, owner: &str) -> Result<Vec<IndexDesc>> {
        let conn = self.inner.conn();
        let mut stmt = conn
            .prepare(
                "SELECT name, description, dimensions, metric, created_at, modified_at, backend
                 FROM indexes WHERE owner = ?1 ORDER BY name",
            )
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([owner], desc_from_row)
            .map_err(sql_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql_err)?;
        Ok(rows)
    }

    /// Deletes the index and every vector in it.
    pub fn delete_index(&self, owner: &str, name: &str) -> Result<()> {
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        let live = self.inner.live(&row);
        let _w = live.lock_writer();
        let _saving = live.lock_saving(); // a save in flight would write a file for it
                                          // The collection first: a row left by a failed drop can be deleted again.
        if let Some(remote) = self.inner.remote_of(&row)? {
            remote.drop_collection(&collection(owner, name))?;
        }
        let mut conn = self.inner.conn();
        let tx = conn.transaction().map_err(sql_err)?;
        tx.execute("DELETE FROM vectors WHERE index_id = ?1", [row.id])
            .map_err(sql_err)?;
        tx.execute("DELETE FROM indexes WHERE id = ?1", [row.id])
            .map_err(sql_err)?;
        crate::graph_log::forget(&tx, row.id)?;
        tx.commit().map_err(sql_err)?;
        // After the commit: a file left by a crash here is swept at the next open.
        crate::live::forget_file(&self.inner.store.dir, row.id);
        self.inner.store.live.forget(row.id);
        Ok(())
    }

    /// How many vectors the index holds and its last write.
    pub fn info(&self, owner: &str, name: &str) -> Result<IndexInfo> {
        let conn = self.inner.conn();
        let row = self.inner.row(&conn, owner, name)?;
        let count: i64 = match self.inner.remote_of(&row)? {
            Some(remote) => {
                i64::try_from(remote.count(&collection(owner, name))?).unwrap_or(i64::MAX)
            }
            None => conn
                .query_row(
                    "SELECT COUNT(*) FROM vectors WHERE index_id = ?1",
                    [row.id],
                    |r| r.get(0),
                )
                .map_err(sql_err)?,
        };
        let (mutation, at): (Option<String>, Option<i64>) = conn
            .query_row(
                "SELECT last_mutation, last_mutation_at FROM indexes WHERE id = ?1",
                [row.id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql_err)?;
        Ok(IndexInfo {
            dimensions: row.desc.dimensions,
            vector_count: to_u64(count),
            processed_up_to_mutation: mutation,
            processed_up_to_datetime: at.map(to_u64),
        })
    }

    /// Declares a metadata index on `property` and fills its column from the
    /// vectors already stored.
    pub fn create_metadata_index(
        &self,
        owner: &str,
        name: &str,
        property: &str,
        index_type: MetaType,
    ) -> Result<Mutation> {
        // The filter's own check, so every property a filter can name can be indexed.
        Filter::cmp(property, crate::Op::Eq, vec![crate::Scalar::Null]).map_err(|e| match e {
            VectorError::Invalid { message, .. } => VectorError::invalid("propertyName", message),
            e => e,
        })?;
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        if row.column(property).is_some() {
            return Err(VectorError::MetadataIndexExists {
                index: name.into(),
                property: property.into(),
            });
        }
        let max = self.inner.limits.max_metadata_indexes.min(SLOTS);
        let Some(slot) = (0..max).find(|s| row.slots.iter().all(|(_, used)| used != s)) else {
            return Err(VectorError::invalid(
                "propertyName",
                format!("index '{name}' already has {max} metadata indexes, the most allowed"),
            ));
        };
        let live = self.inner.live(&row);
        let _w = live.lock_writer();
        let mutation = new_mutation_id();
        let mut conn = self.inner.conn();
        let tx = conn.transaction().map_err(sql_err)?;
        still_there(&tx, &row)?;
        tx.execute(
            "INSERT INTO metadata_indexes (index_id, property, type, slot) VALUES (?1, ?2, ?3, ?4)",
            params![row.id, property, index_type.as_str(), slot as i64],
        )
        .map_err(sql_err)?;
        {
            let mut read = tx
                .prepare("SELECT key, metadata FROM vectors WHERE index_id = ?1 AND metadata IS NOT NULL")
                .map_err(sql_err)?;
            let mut write = tx
                .prepare(&format!("UPDATE vectors SET m{slot} = ?1 WHERE key = ?2"))
                .map_err(sql_err)?;
            let rows = read
                .query_map([row.id], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(sql_err)?;
            for r in rows {
                let (key, text) = r.map_err(sql_err)?;
                let meta: Map<String, Value> = serde_json::from_str(&text).unwrap_or_default();
                let v = slot_value(&meta, property, index_type);
                if v != rusqlite::types::Value::Null {
                    write.execute(params![v, key]).map_err(sql_err)?;
                }
            }
        }
        if let Some(remote) = self.inner.remote_of(&row)? {
            remote.index_property(&collection(owner, name), property, index_type)?;
        }
        touch(&tx, row.id, &mutation)?;
        tx.commit().map_err(sql_err)?;
        Ok(Mutation {
            mutation_id: mutation,
            count: 0,
        })
    }

    pub fn list_metadata_indexes(&self, owner: &str, name: &str) -> Result<Vec<MetadataIndex>> {
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        Ok(row.slots.into_iter().map(|(m, _)| m).collect())
    }

    pub fn delete_metadata_index(
        &self,
        owner: &str,
        name: &str,
        property: &str,
    ) -> Result<Mutation> {
        let row = self.inner.row(&self.inner.conn(), owner, name)?;
        let Some((slot, _)) = row.column(property) else {
            return Err(VectorError::NoMetadataIndex {
                index: name.into(),
                property: property.into(),
            });
        };
        let live = self.inner.live(&row);
        let _w = live.lock_writer();
        let mutation = new_mutation_id();
        let mut conn = self.inner.conn();
        let tx = conn.transaction().map_err(sql_err)?;
        still_there(&tx, &row)?;
        tx.execute(
            &format!("UPDATE vectors SET m{slot} = NULL WHERE index_id = ?1"),
            [row.id],
        )
        .map_err(sql_err)?;
        tx.execute(
            "DELETE FROM metadata_indexes WHERE index_id = ?1 AND property = ?2",
            params![row.id, property],
        )
        .map_err(sql_err)?;
        if let Some(remote) = self.inner.remote_of(&row)? {
            remote.unindex_property(&collection(owner, name), property)?;
        }
        touch(&tx, row.id, &mutation)?;
        tx.commit().map_err(sql_err)?;
        Ok(Mutation {
            mutation_id: mutation,
            count: 0,
        })
    }
}

impl Inner {
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.store.conn()
    }

    pub(crate) fn params(&self) -> &GraphParams {
        &self.store.params
    }

    /// `owner`'s index `name`, with its metadata indexes.
    pub(crate) fn row(&self, conn: &Connection, owner: &str, name: &str) -> Result<IndexRow> {
        let found = conn
            .query_row(
                "SELECT id, name, description, dimensions, metric, created_at, modified_at, backend
                 FROM indexes WHERE owner = ?1 AND name = ?2",
                params![owner, name],
                |r| Ok((r.get::<_, i64>(0)?, desc_from_row_at(r, 1)?)),
            )
            .optional()
            .map_err(sql_err)?;
        let Some((id, desc)) = found else {
            return Err(VectorError::NoIndex(name.to_string()));
        };
        let mut stmt = conn
            .prepare_cached("SELECT property, type, slot FROM metadata_indexes WHERE index_id = ?1 ORDER BY slot")
            .map_err(sql_err)?;
        let slots = stmt
            .query_map([id], |r| {
                let ty: String = r.get(1)?;
                Ok((
                    MetadataIndex {
                        property: r.get(0)?,
                        index_type: MetaType::parse(&ty).unwrap_or(MetaType::String),
                    },
                    r.get::<_, i64>(2)? as usize,
                ))
            })
            .map_err(sql_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql_err)?;
        Ok(IndexRow { id, desc, slots })
    }

    pub(crate) fn live(&self, row: &IndexRow) -> Arc<LiveIndex> {
        self.store.live.get(row.id)
    }
}

/// The shapes of the embedded indexes, whose graphs the worker loads at open.
fn embedded_shapes(conn: &Connection) -> Result<Vec<Shape>> {
    let mut stmt = conn
        .prepare("SELECT id, dimensions, metric FROM indexes WHERE backend = ?1 ORDER BY id")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([EMBEDDED], |r| {
            let metric: String = r.get(2)?;
            Ok(Shape {
                index_id: r.get(0)?,
                dimensions: r.get::<_, i64>(1)? as usize,
                metric: Metric::parse(&metric).unwrap_or(Metric::Cosine),
            })
        })
        .map_err(sql_err)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql_err)?;
    Ok(rows)
}

fn all_index_ids(conn: &Connection) -> Result<std::collections::HashSet<i64>> {
    let mut stmt = conn.prepare("SELECT id FROM indexes").map_err(sql_err)?;
    let ids = stmt
        .query_map([], |r| r.get(0))
        .map_err(sql_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sql_err)?;
    Ok(ids)
}

fn desc_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<IndexDesc> {
    desc_from_row_at(r, 0)
}

fn desc_from_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<IndexDesc> {
    let metric: String = r.get(at + 3)?;
    Ok(IndexDesc {
        name: r.get(at)?,
        description: r.get(at + 1)?,
        dimensions: r.get::<_, i64>(at + 2)? as usize,
        metric: Metric::parse(&metric).unwrap_or(Metric::Cosine),
        created_at: to_u64(r.get(at + 4)?),
        modified_at: to_u64(r.get(at + 5)?),
        backend: r.get(at + 6)?,
    })
}

/// Index names: a lowercase letter, then lowercase letters, digits and dashes, at most
/// 64 bytes.
fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(VectorError::invalid(
            "name",
            format!(
                "'{name}' is not a valid index name: a lowercase letter, then lowercase letters, \
                 digits and dashes, at most 64 characters"
            ),
        ))
    }
}

/// Fails with [`VectorError::NoIndex`] if the index was deleted since `row` was read
/// (call under its writer lock, inside the write's transaction, so a write racing a
/// delete never leaves rows behind).
pub(crate) fn still_there(conn: &Connection, row: &IndexRow) -> Result<()> {
    let found: Option<i64> = conn
        .query_row("SELECT 1 FROM indexes WHERE id = ?1", [row.id], |r| {
            r.get(0)
        })
        .optional()
        .map_err(sql_err)?;
    found
        .map(drop)
        .ok_or_else(|| VectorError::NoIndex(row.desc.name.clone()))
}

/// Records `mutation` as the index's last write.
pub(crate) fn touch(conn: &Connection, index_id: i64, mutation: &str) -> Result<()> {
    let now = unix_now() as i64;
    conn.execute(
        "UPDATE indexes SET last_mutation = ?1, last_mutation_at = ?2, modified_at = ?2 WHERE id = ?3",
        params![mutation, now, index_id],
    )
    .map_err(sql_err)?;
    Ok(())
}

/// A fresh mutation id (a random UUID, as Vectorize's are).
pub(crate) fn new_mutation_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The value of `property` (dotted path) in `meta` as its metadata-index column holds
/// it: only values of the declared type, else NULL.
pub(crate) fn slot_value(
    meta: &Map<String, Value>,
    property: &str,
    ty: MetaType,
) -> rusqlite::types::Value {
    use rusqlite::types::Value as S;
    match (crate::filter::property(meta, property), ty) {
        (Some(Value::String(s)), MetaType::String) => S::Text(s.clone()),
        (Some(Value::Number(n)), MetaType::Number) => n.as_f64().map_or(S::Null, S::Real),
        (Some(Value::Bool(b)), MetaType::Boolean) => S::Integer(i64::from(*b)),
        _ => S::Null,
    }
}
