//! Indexes kept by a remote vector engine (Qdrant, through `kiln-qdrant`) behind the
//! same API, for when one node's index is not enough.
//!
//! SQLite still holds such an index's row and its declared metadata indexes; its
//! vectors, their metadata and the search live in the remote collection. Every field
//! is checked here before the remote is asked, so a request means the same thing on
//! either backend. The engine sits behind [`RemoteIndexes`], so `kiln-vectors` never
//! links its client.

use std::collections::HashSet;

use crate::db::{new_mutation_id, still_there, touch, IndexRow, Inner, VectorDb};
use crate::error::{Result, VectorError};
use crate::filter::Filter;
use crate::metric::Metric;
use crate::record::{Match, MetaType, Mutation, Query, VectorRecord, WriteMode, EMBEDDED};

/// A remote engine's collections. Calls block (servers call the index from blocking
/// threads); each returns once the engine has acknowledged the change.
pub trait RemoteIndexes: Send + Sync + std::fmt::Debug + 'static {
    /// The backend's name in requests and descriptions (`qdrant`).
    fn name(&self) -> &str;
    fn create(&self, collection: &str, dimensions: usize, metric: Metric) -> Result<()>;
    /// Drops the collection; one that is not there is not an error.
    fn drop_collection(&self, collection: &str) -> Result<()>;
    fn index_property(&self, collection: &str, property: &str, ty: MetaType) -> Result<()>;
    fn unindex_property(&self, collection: &str, property: &str) -> Result<()>;
    /// Writes `records`, replacing those with the same ids.
    fn upsert(&self, collection: &str, records: &[VectorRecord]) -> Result<()>;
    /// The stored vectors with these ids, in any order, with their values.
    fn get(&self, collection: &str, ids: &[String]) -> Result<Vec<VectorRecord>>;
    fn delete(&self, collection: &str, ids: &[String]) -> Result<()>;
    fn delete_where(&self, collection: &str, filter: &Filter) -> Result<()>;
    /// The `q.top_k` best matches in `q.namespace` that `q.filter` admits, closest first,
    /// scored as Vectorize reports `metric`; with values when `q.return_values`, and
    /// all their metadata.
    fn query(&self, collection: &str, q: &Query, metric: Metric) -> Result<Vec<Match>>;
    fn count(&self, collection: &str) -> Result<u64>;
}

/// The remote collection of `owner`'s index `name`: one per index, named by its key
/// and its name (both `[a-z0-9_-]`; anything else in an owner is replaced).
pub fn collection(owner: &str, name: &str) -> String {
    let owner: String = owner
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("kiln__{owner}__{name}")
}

impl Inner {
    /// The engine for `backend`: `None` for [`EMBEDDED`], the remote when it has that
    /// name, else a 400 naming what this server has.
    pub(crate) fn remote_named(&self, backend: &str) -> Result<Option<&dyn RemoteIndexes>> {
        if backend == EMBEDDED {
            return Ok(None);
        }
        match &self.remote {
            Some(r) if r.name() == backend => Ok(Some(r.as_ref())),
            Some(r) => Err(VectorError::invalid(
                "config.backend",
                format!(
                    "unknown backend '{backend}'; this server has {EMBEDDED} and {}",
                    r.name()
                ),
            )),
            None => Err(VectorError::invalid(
                "config.backend",
                format!(
                    "unknown backend '{backend}'; this server keeps indexes itself ({EMBEDDED}); \
                     start it with --qdrant-url for qdrant"
                ),
            )),
        }
    }

    /// The engine holding `row`'s vectors: `None` when they are here.
    pub(crate) fn remote_of(&self, row: &IndexRow) -> Result<Option<&dyn RemoteIndexes>> {
        if row.desc.backend == EMBEDDED {
            return Ok(None);
        }
        match &self.remote {
            Some(r) if r.name() == row.desc.backend => Ok(Some(r.as_ref())),
            _ => Err(VectorError::Remote {
                backend: row.desc.backend.clone(),
                message: format!(
                    "index '{}' lives on {}, which this server is not connected to",
                    row.desc.name, row.desc.backend
                ),
            }),
        }
    }
}

impl VectorDb {
    /// A checked write to a remote index: within the call a later record wins under
    /// upsert and the first under insert, which also keeps the ids stored already.
    pub(crate) fn write_remote(
        &self,
        remote: &dyn RemoteIndexes,
        row: &IndexRow,
        owner: &str,
        records: &[VectorRecord],
        mode: WriteMode,
    ) -> Result<Mutation> {
        let c = collection(owner, &row.desc.name);
        let mut chosen: Vec<VectorRecord> = Vec::with_capacity(records.len());
        for r in records {
            match chosen.iter().position(|c| c.id == r.id) {
                Some(i) if mode == WriteMode::Upsert => chosen[i] = r.clone(),
                Some(_) => {}
                None => chosen.push(r.clone()),
            }
        }
        if mode == WriteMode::Insert {
            let ids: Vec<String> = chosen.iter().map(|r| r.id.clone()).collect();
            let stored: HashSet<String> = remote.get(&c, &ids)?.into_iter().map(|r| r.id).collect();
            chosen.retain(|r| !stored.contains(&r.id));
        }
        if !chosen.is_empty() {
            remote.upsert(&c, &chosen)?;
        }
        self.record_mutation(row, chosen.len())
    }

    /// Deletes from a remote index by ids or by filter.
    pub(crate) fn delete_remote(
        &self,
        remote: &dyn RemoteIndexes,
        row: &IndexRow,
        owner: &str,
        ids: Option<&[String]>,
        filter: Option<&Filter>,
    ) -> Result<Mutation> {
        let c = collection(owner, &row.desc.name);
        let before = remote.count(&c)?;
        if let Some(ids) = ids {
            remote.delete(&c, ids)?;
        }
        if let Some(f) = filter {
            remote.delete_where(&c, f)?;
        }
        let after = remote.count(&c)?;
        self.record_mutation(
            row,
            usize::try_from(before.saturating_sub(after)).unwrap_or(usize::MAX),
        )
    }

    /// Records an acknowledged remote write as the index's last mutation.
    fn record_mutation(&self, row: &IndexRow, count: usize) -> Result<Mutation> {
        let mutation = new_mutation_id();
        let conn = self.inner.conn();
        still_there(&conn, row)?;
        touch(&conn, row.id, &mutation)?;
        Ok(Mutation {
            mutation_id: mutation,
            count,
        })
    }
}
