//! A Vectorize index on Qdrant, through `kiln-vectors` and this adapter, against a
//! gRPC server that answers each Qdrant method with a recorded response in Qdrant's
//! protobuf (the shapes of Qdrant 1.x's API reference examples) and keeps what it was
//! sent. No Qdrant server can run on this machine (no package ships one), so this is
//! what checks the adapter: the requests it makes, and how it reads the answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::StreamBody;
use kiln_qdrant::QdrantIndexes;
use kiln_vectors::{
    collection, Filter, GraphParams, Limits, MetaType, Metric, Query, ReturnMetadata, VectorDb,
    VectorError, VectorRecord, WriteMode,
};
use prost::Message;
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::vector_output::Vector;
use qdrant_client::qdrant::vectors_output::VectorsOptions;
use qdrant_client::qdrant::{
    CollectionExists, CollectionExistsResponse, CollectionOperationResponse, CountPoints,
    CountResponse, CountResult, CreateCollection, CreateFieldIndexCollection, DeletePoints,
    DenseVector, GetPoints, GetResponse, PointId, PointsOperationResponse, QueryPoints,
    QueryResponse, RetrievedPoint, ScoredPoint, UpdateResult, UpsertPoints, Value, VectorOutput,
    VectorsOutput,
};
use serde_json::json;

/// Requests received (method path, protobuf bytes) and the answer per method.
#[derive(Default)]
struct Recorded {
    calls: Mutex<Vec<(String, Vec<u8>)>>,
    answers: Mutex<HashMap<&'static str, Vec<u8>>>,
    /// The distinct `api-key` headers seen.
    keys: Mutex<Vec<String>>,
}

impl Recorded {
    fn answer(&self, path: &'static str, msg: impl Message) {
        self.lock_answers().insert(path, msg.encode_to_vec());
    }

    fn lock_answers(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Vec<u8>>> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last request to `path`, decoded.
    fn last<M: Message + Default>(&self, path: &str) -> M {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let (_, bytes) = calls
            .iter()
            .rev()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| {
                panic!(
                    "no call to {path}: {:?}",
                    calls.iter().map(|c| &c.0).collect::<Vec<_>>()
                )
            });
        M::decode(bytes.as_slice()).expect("a request message")
    }

    fn api_keys(&self) -> Vec<String> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn paths(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| c.0.clone())
            .collect()
    }
}

/// One gRPC call: the request's message after its 5-byte frame header is kept; the
/// answer is the recorded message, framed, then `grpc-status: 0` (or `5`, not found,
/// when nothing was recorded for the method).
async fn grpc(State(rec): State<Arc<Recorded>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let key = req
        .headers()
        .get("api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    {
        let mut keys = rec.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    rec.calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((path.clone(), body.get(5..).unwrap_or_default().to_vec()));
    let answer = rec.lock_answers().get(path.as_str()).cloned();
    let mut trailers = HeaderMap::new();
    let mut frames: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = Vec::new();
    match answer {
        Some(msg) => {
            let mut framed = vec![0u8];
            framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            framed.extend_from_slice(&msg);
            frames.push(Ok(http_body::Frame::data(Bytes::from(framed))));
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
        }
        None => {
            trailers.insert("grpc-status", HeaderValue::from_static("5"));
            trailers.insert(
                "grpc-message",
                HeaderValue::from_static("Not found: no recorded answer"),
            );
        }
    }
    frames.push(Ok(http_body::Frame::trailers(trailers)));
    Response::builder()
        .header("content-type", "application/grpc")
        .body(Body::new(StreamBody::new(futures_util::stream::iter(
            frames,
        ))))
        .unwrap_or_default()
}

/// The fake server on its own runtime; its `http://` URL.
fn serve(rec: Arc<Recorded>) -> (String, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(grpc).with_state(rec);
    rt.spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), rt)
}

fn json_value(v: serde_json::Value) -> Value {
    Value::from(v)
}

fn payload(id: &str, ns: Option<&str>, meta: serde_json::Value) -> HashMap<String, Value> {
    HashMap::from([
        ("id".to_string(), json_value(json!(id))),
        ("namespace".to_string(), json_value(json!(ns))),
        ("metadata".to_string(), json_value(meta)),
    ])
}

/// A point id as Qdrant echoes one back (the adapter reads the vector's id from the
/// payload, not from this).
fn uuid(n: u64) -> PointId {
    PointId {
        point_id_options: Some(PointIdOptions::Uuid(format!(
            "00000000-0000-5000-8000-{n:012x}"
        ))),
    }
}

fn ok_op() -> PointsOperationResponse {
    PointsOperationResponse {
        result: Some(UpdateResult {
            operation_id: Some(7),
            status: 2, // Completed
        }),
        time: 0.002,
        usage: None,
    }
}

#[test]
fn a_vectorize_index_on_qdrant_speaks_qdrants_api() {
    let rec = Arc::new(Recorded::default());
    let (url, _server) = serve(rec.clone());
    let remote = QdrantIndexes::connect(&url, Some("secret".into()), Duration::from_secs(5))
        .expect("client");
    let dir = std::env::temp_dir().join(format!("kiln-qdrant-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = VectorDb::open_with_remote(
        &dir,
        Limits::default(),
        GraphParams::default(),
        Some(Arc::new(remote)),
    )
    .expect("db");
    let c = collection("key_1", "docs");

    // Create: the collection with its size and distance.
    rec.answer(
        "/qdrant.Collections/Create",
        CollectionOperationResponse {
            result: true,
            time: 0.01,
        },
    );
    let desc = db
        .create_index_on("key_1", "docs", 3, Metric::Cosine, None, "qdrant")
        .expect("create");
    assert_eq!(desc.backend, "qdrant");
    let create: CreateCollection = rec.last("/qdrant.Collections/Create");
    assert_eq!(create.collection_name, c);
    let text = format!("{:?}", create.vectors_config);
    assert!(
        text.contains("size: 3") && text.contains("distance: Cosine"),
        "{text}"
    );

    // A metadata index is a payload index under `metadata.`.
    rec.answer("/qdrant.Points/CreateFieldIndex", ok_op());
    db.create_metadata_index("key_1", "docs", "genre", MetaType::String)
        .expect("meta index");
    let fi: CreateFieldIndexCollection = rec.last("/qdrant.Points/CreateFieldIndex");
    assert_eq!(
        (fi.field_name.as_str(), fi.field_type, fi.wait),
        ("metadata.genre", Some(0), Some(true))
    );

    // Upsert: points with the vector, and id, namespace and metadata in the payload,
    // acknowledged (`wait`) before the write returns.
    rec.answer("/qdrant.Points/Upsert", ok_op());
    let records = vec![
        VectorRecord {
            id: "a".into(),
            values: vec![1.0, 0.0, 0.0],
            namespace: Some("books".into()),
            metadata: json!({"genre": "drama", "year": 2001}).as_object().cloned(),
        },
        VectorRecord {
            id: "b".into(),
            values: vec![0.0, 1.0, 0.0],
            namespace: None,
            metadata: None,
        },
    ];
    let m = db
        .write("key_1", "docs", &records, WriteMode::Upsert)
        .expect("upsert");
    assert_eq!(m.count, 2);
    let up: UpsertPoints = rec.last("/qdrant.Points/Upsert");
    assert_eq!(
        (up.collection_name.as_str(), up.wait, up.points.len()),
        (c.as_str(), Some(true), 2)
    );
    let p0 = serde_json::to_value(
        up.points[0]
            .payload
            .clone()
            .into_iter()
            .map(|(k, v)| (k, v.into_json()))
            .collect::<serde_json::Map<_, _>>(),
    )
    .expect("json");
    assert_eq!(
        p0,
        json!({"id": "a", "namespace": "books", "metadata": {"genre": "drama", "year": 2001}})
    );
    assert!(format!("{:?}", up.points[0].vectors).contains("1.0"));
    // Checked before Qdrant is asked: a wrong size never reaches it.
    let bad = vec![VectorRecord {
        values: vec![1.0],
        ..records[1].clone()
    }];
    assert!(matches!(
        db.write("key_1", "docs", &bad, WriteMode::Upsert),
        Err(VectorError::Invalid { .. })
    ));

    // Query: the filter on `metadata.*` and the namespace, the limit, and the answer
    // read back (score, id, namespace, metadata as asked).
    rec.answer(
        "/qdrant.Points/Query",
        QueryResponse {
            result: vec![ScoredPoint {
                id: Some(uuid(1)),
                payload: payload("a", Some("books"), json!({"genre": "drama", "year": 2001})),
                score: 0.93,
                version: 3,
                vectors: None,
                shard_key: None,
                order_value: None,
            }],
            time: 0.003,
            usage: None,
        },
    );
    let q = Query {
        vector: vec![0.9, 0.1, 0.0],
        top_k: 5,
        namespace: Some("books".into()),
        filter: Some(
            Filter::from_vectorize(&json!({"genre": "drama", "year": {"$gte": 2000}}))
                .expect("filter"),
        ),
        return_values: false,
        return_metadata: ReturnMetadata::Indexed,
    };
    let found = db.query("key_1", "docs", &q).expect("query");
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].id.as_str(), found[0].score), ("a", 0.93));
    assert_eq!(found[0].namespace.as_deref(), Some("books"));
    // Only the indexed property comes back when `indexed` is asked.
    assert_eq!(
        found[0].metadata.clone().map(serde_json::Value::Object),
        Some(json!({"genre": "drama"}))
    );
    let qp: QueryPoints = rec.last("/qdrant.Points/Query");
    assert_eq!(
        (qp.collection_name.as_str(), qp.limit),
        (c.as_str(), Some(5))
    );
    let f = format!("{:?}", qp.filter);
    for expected in [
        "\"namespace\"",
        "metadata.genre",
        "metadata.year",
        "gte: Some(2000.0)",
    ] {
        assert!(f.contains(expected), "{expected} in {f}");
    }

    // Get by ids, with values.
    rec.answer(
        "/qdrant.Points/Get",
        GetResponse {
            result: vec![RetrievedPoint {
                id: Some(uuid(2)),
                payload: payload("b", None, serde_json::Value::Null),
                vectors: Some(VectorsOutput {
                    vectors_options: Some(VectorsOptions::Vector(VectorOutput {
                        vector: Some(Vector::Dense(DenseVector {
                            data: vec![0.0, 1.0, 0.0],
                        })),
                        ..VectorOutput::default()
                    })),
                }),
                shard_key: None,
                order_value: None,
            }],
            time: 0.001,
            usage: None,
        },
    );
    let got = db
        .get_by_ids("key_1", "docs", &["b".into(), "zz".into()])
        .expect("get");
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id.as_str(), got[0].values.clone()),
        ("b", vec![0.0, 1.0, 0.0])
    );
    let gp: GetPoints = rec.last("/qdrant.Points/Get");
    assert_eq!(gp.ids.len(), 2);

    // Insert keeps what is stored: "b" exists (the Get above answers so), only "c" goes.
    let c_rec = VectorRecord {
        id: "c".into(),
        ..records[1].clone()
    };
    let m = db
        .write(
            "key_1",
            "docs",
            &[records[1].clone(), c_rec],
            WriteMode::Insert,
        )
        .expect("insert");
    assert_eq!(m.count, 1);
    let up: UpsertPoints = rec.last("/qdrant.Points/Upsert");
    assert_eq!(up.points.len(), 1);

    // Count and delete by id.
    rec.answer(
        "/qdrant.Points/Count",
        CountResponse {
            result: Some(CountResult { count: 2 }),
            time: 0.001,
            usage: None,
        },
    );
    assert_eq!(db.info("key_1", "docs").expect("info").vector_count, 2);
    let cp: CountPoints = rec.last("/qdrant.Points/Count");
    assert_eq!(cp.exact, Some(true));
    rec.answer("/qdrant.Points/Delete", ok_op());
    db.delete_by_ids("key_1", "docs", &["a".into()])
        .expect("delete");
    let dp: DeletePoints = rec.last("/qdrant.Points/Delete");
    assert_eq!(
        (dp.collection_name.as_str(), dp.wait),
        (c.as_str(), Some(true))
    );

    // A Qdrant error is the index's error, named as Qdrant's.
    rec.lock_answers().remove("/qdrant.Points/Query");
    match db.query("key_1", "docs", &q) {
        Err(VectorError::Remote { backend, message }) => {
            assert_eq!(backend, "qdrant");
            assert!(message.contains("no recorded answer"), "{message}");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }

    // Delete: the collection goes (when it exists), then the row.
    rec.answer(
        "/qdrant.Collections/CollectionExists",
        CollectionExistsResponse {
            result: Some(CollectionExists { exists: true }),
            time: 0.0,
        },
    );
    rec.answer(
        "/qdrant.Collections/Delete",
        CollectionOperationResponse {
            result: true,
            time: 0.01,
        },
    );
    db.delete_index("key_1", "docs").expect("drop");
    assert!(rec
        .paths()
        .contains(&"/qdrant.Collections/Delete".to_string()));
    assert!(matches!(
        db.get_index("key_1", "docs"),
        Err(VectorError::NoIndex(_))
    ));

    // A failed create leaves no index behind.
    rec.lock_answers().remove("/qdrant.Collections/Create");
    assert!(db
        .create_index_on("key_1", "other", 3, Metric::Cosine, None, "qdrant")
        .is_err());
    assert!(matches!(
        db.get_index("key_1", "other"),
        Err(VectorError::NoIndex(_))
    ));
    // And an unknown backend is a 400 naming the field.
    match db.create_index_on("key_1", "x", 3, Metric::Cosine, None, "pinecone") {
        Err(VectorError::Invalid { param, .. }) => assert_eq!(param, "config.backend"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rec.api_keys(),
        vec!["secret".to_string()],
        "every call carries the key"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
