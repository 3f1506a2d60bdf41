//! [`QdrantIndexes`]: the calls of `RemoteIndexes`, each run to Qdrant's answer on the
//! client's own runtime (callers are blocking threads, not async tasks).

use std::future::Future;
use std::time::Duration;

use kiln_vectors::{
    Filter, Match, MetaType, Metric, Query, RemoteIndexes, VectorError, VectorRecord,
};
use qdrant_client::qdrant::points_selector::PointsSelectorOneOf;
use qdrant_client::qdrant::{
    CountPointsBuilder, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder,
    DeleteFieldIndexCollectionBuilder, DeletePointsBuilder, FieldType, GetPointsBuilder,
    PointsIdsList, QueryPointsBuilder, UpsertPointsBuilder, VectorParamsBuilder,
};
use qdrant_client::Qdrant;

use crate::convert::{self, METADATA};

/// Why Qdrant could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QdrantError {
    #[error("cannot start the Qdrant client's runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("cannot connect to Qdrant at {url}: {message}")]
    Connect { url: String, message: String },
}

/// Indexes as collections of one Qdrant deployment.
pub struct QdrantIndexes {
    client: Qdrant,
    url: String,
    /// The client's runtime; `None` only while dropping.
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for QdrantIndexes {
    /// Without waiting: the last handle may go on an async task (the server's state),
    /// where blocking on the runtime's shutdown is not allowed.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for QdrantIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantIndexes")
            .field("url", &self.url)
            .finish()
    }
}

impl QdrantIndexes {
    /// A client of the Qdrant at `url` (its gRPC port, `http://host:6334`), with
    /// `api_key` if it needs one, giving each call `timeout`. Nothing is sent yet: an
    /// unreachable server fails the first index call, not the start.
    pub fn connect(
        url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, QdrantError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kiln-qdrant")
            .enable_all()
            .build()?;
        let client = {
            let _in_rt = rt.enter();
            Qdrant::from_url(url)
                .api_key(api_key)
                .timeout(timeout)
                .connect_timeout(timeout)
                .skip_compatibility_check()
                .build()
                .map_err(|e| QdrantError::Connect {
                    url: url.to_string(),
                    message: e.to_string(),
                })?
        };
        Ok(Self {
            client,
            url: url.to_string(),
            rt: Some(rt),
        })
    }

    /// Runs `f` on the client's runtime to its end.
    fn run<T>(
        &self,
        f: impl Future<Output = Result<T, qdrant_client::QdrantError>>,
    ) -> Result<T, VectorError> {
        let fail = |message: String| VectorError::Remote {
            backend: "qdrant".into(),
            message,
        };
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| fail("the client is shutting down".into()))?;
        rt.block_on(f).map_err(|e| fail(e.to_string()))
    }
}

impl RemoteIndexes for QdrantIndexes {
    fn name(&self) -> &str {
        "qdrant"
    }

    fn create(
        &self,
        collection: &str,
        dimensions: usize,
        metric: Metric,
    ) -> Result<(), VectorError> {
        let params = VectorParamsBuilder::new(dimensions as u64, convert::distance(metric));
        self.run(
            self.client
                .create_collection(CreateCollectionBuilder::new(collection).vectors_config(params)),
        )
        .map(drop)
    }

    fn drop_collection(&self, collection: &str) -> Result<(), VectorError> {
        let exists = self.run(self.client.collection_exists(collection))?;
        if exists {
            self.run(self.client.delete_collection(collection))?;
        }
        Ok(())
    }

    fn index_property(
        &self,
        collection: &str,
        property: &str,
        ty: MetaType,
    ) -> Result<(), VectorError> {
        let field = match ty {
            MetaType::String => FieldType::Keyword,
            MetaType::Number => FieldType::Float,
            MetaType::Boolean => FieldType::Bool,
        };
        let key = format!("{METADATA}.{property}");
        let req = CreateFieldIndexCollectionBuilder::new(collection, key, field).wait(true);
        self.run(self.client.create_field_index(req)).map(drop)
    }

    fn unindex_property(&self, collection: &str, property: &str) -> Result<(), VectorError> {
        let key = format!("{METADATA}.{property}");
        let req = DeleteFieldIndexCollectionBuilder::new(collection, key).wait(true);
        self.run(self.client.delete_field_index(req)).map(drop)
    }

    fn upsert(&self, collection: &str, records: &[VectorRecord]) -> Result<(), VectorError> {
        let points = records
            .iter()
            .map(convert::point)
            .collect::<Result<Vec<_>, _>>()?;
        let req = UpsertPointsBuilder::new(collection, points).wait(true);
        self.run(self.client.upsert_points(req)).map(drop)
    }

    fn get(&self, collection: &str, ids: &[String]) -> Result<Vec<VectorRecord>, VectorError> {
        let ids: Vec<_> = ids.iter().map(|i| convert::point_id(i)).collect();
        let req = GetPointsBuilder::new(collection, ids)
            .with_payload(true)
            .with_vectors(true);
        let got = self.run(self.client.get_points(req))?;
        Ok(got.result.into_iter().map(convert::record).collect())
    }

    fn delete(&self, collection: &str, ids: &[String]) -> Result<(), VectorError> {
        let ids = PointsIdsList {
            ids: ids.iter().map(|i| convert::point_id(i)).collect(),
        };
        let req = DeletePointsBuilder::new(collection)
            .points(PointsSelectorOneOf::Points(ids))
            .wait(true);
        self.run(self.client.delete_points(req)).map(drop)
    }

    fn delete_where(&self, collection: &str, filter: &Filter) -> Result<(), VectorError> {
        let Some(f) = convert::query_filter(None, Some(filter))? else {
            return Ok(());
        };
        let req = DeletePointsBuilder::new(collection)
            .points(PointsSelectorOneOf::Filter(f))
            .wait(true);
        self.run(self.client.delete_points(req)).map(drop)
    }

    fn query(
        &self,
        collection: &str,
        q: &Query,
        _metric: Metric,
    ) -> Result<Vec<Match>, VectorError> {
        let mut req = QueryPointsBuilder::new(collection)
            .query(qdrant_client::qdrant::Query::new_nearest(q.vector.clone()))
            .limit(q.top_k as u64)
            .with_payload(true)
            .with_vectors(q.return_values);
        if let Some(f) = convert::query_filter(q.namespace.as_deref(), q.filter.as_ref())? {
            req = req.filter(f);
        }
        let found = self.run(self.client.query(req))?;
        Ok(found.result.into_iter().map(convert::matched).collect())
    }

    fn count(&self, collection: &str) -> Result<u64, VectorError> {
        let got = self.run(
            self.client
                .count(CountPointsBuilder::new(collection).exact(true)),
        )?;
        Ok(got.result.map_or(0, |r| r.count))
    }
}
