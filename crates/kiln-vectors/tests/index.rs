//! The index end to end on disk: recall against brute force, filters applied before
//! top-K (exact and graph paths), filter semantics per operator, writes that replace
//! and delete, restarts, and bad input named.

mod common;

use std::collections::HashMap;

use common::{clustered, exact_top, open};
use kiln_vectors::{
    Filter, GraphParams, Limits, MetaType, Metric, Query, ReturnMetadata, VectorDb, VectorError,
    VectorRecord, WriteMode,
};
use serde_json::{json, Map, Value};

fn meta(v: Value) -> Option<Map<String, Value>> {
    v.as_object().cloned()
}

fn query(v: &[f32], k: usize) -> Query {
    Query {
        vector: v.to_vec(),
        top_k: k,
        namespace: None,
        filter: None,
        return_values: false,
        return_metadata: ReturnMetadata::None,
    }
}

fn ids(matches: &[kiln_vectors::Match]) -> Vec<String> {
    matches.iter().map(|m| m.id.clone()).collect()
}

/// 20,000 clustered vectors: recall@10 of the graph ≥ 0.95 against brute force;
/// filtered queries return only admitted vectors, exactly the filtered top-10 when
/// the filter is selective, and ≥ 0.95 of it when broad.
#[test]
fn recall_and_filter_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = open(dir.path());
    let dims = 64;
    db.create_index("k", "docs", dims, Metric::Cosine, None)
        .expect("create");
    db.create_metadata_index("k", "docs", "bucket", MetaType::Number)
        .expect("metadata index");
    // Queries from the same clusters, not in the index.
    let mut data = clustered(20_100, dims, 200, 7);
    let queries = data.split_off(20_000);
    let records: Vec<VectorRecord> = data
        .iter()
        .enumerate()
        .map(|(i, v)| VectorRecord {
            id: format!("v{i}"),
            values: v.clone(),
            namespace: Some(if i % 2 == 0 { "even" } else { "odd" }.into()),
            metadata: meta(json!({"bucket": i % 100})),
        })
        .collect();
    for chunk in records.chunks(5000) {
        db.write("k", "docs", chunk, WriteMode::Upsert)
            .expect("write");
    }
    let by_id: HashMap<String, (Vec<f32>, usize)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.clone(), (r.values.clone(), i)))
        .collect();
    let (mut hits, mut broad_hits) = (0, 0);
    for q in &queries {
        let got = ids(&db.query("k", "docs", &query(q, 10)).expect("query"));
        let want = exact_top(q, by_id.iter().map(|(id, (v, _))| (id, v)), 10);
        hits += got.iter().filter(|g| want.contains(g)).count();

        // Selective: 1% of the vectors, scored exactly.
        let mut fq = query(q, 10);
        fq.filter = Some(Filter::from_vectorize(&json!({"bucket": {"$eq": 3}})).expect("filter"));
        let got = ids(&db.query("k", "docs", &fq).expect("selective"));
        let want = exact_top(
            q,
            by_id
                .iter()
                .filter(|(_, (_, i))| i % 100 == 3)
                .map(|(id, (v, _))| (id, v)),
            10,
        );
        assert_eq!(got, want, "a selective filter is exact");

        // Broad: half the vectors, through the graph with a membership predicate.
        let mut bq = query(q, 10);
        bq.namespace = Some("odd".into());
        bq.filter = Some(Filter::from_vectorize(&json!({"bucket": {"$lt": 90}})).expect("filter"));
        let got = ids(&db.query("k", "docs", &bq).expect("broad"));
        assert_eq!(got.len(), 10);
        for g in &got {
            let i = by_id[g].1;
            assert!(i % 2 == 1 && i % 100 < 90, "{g} is outside the filter");
        }
        let want = exact_top(
            q,
            by_id
                .iter()
                .filter(|(_, (_, i))| i % 2 == 1 && i % 100 < 90)
                .map(|(id, (v, _))| (id, v)),
            10,
        );
        broad_hits += got.iter().filter(|g| want.contains(g)).count();
    }
    let recall = hits as f64 / (queries.len() * 10) as f64;
    let broad = broad_hits as f64 / (queries.len() * 10) as f64;
    eprintln!("recall@10 {recall}, filtered {broad}");
    assert!(recall >= 0.95, "recall@10 {recall}");
    assert!(broad >= 0.95, "filtered recall@10 {broad}");
}

fn small(db: &VectorDb) {
    db.create_index("k", "films", 3, Metric::Euclidean, Some("films"))
        .expect("create");
    db.create_metadata_index("k", "films", "year", MetaType::Number)
        .expect("index year");
    let films = [
        (
            "a",
            [0.0, 0.0, 1.0],
            json!({"genre": "drama", "year": 1999, "tv": false, "info": {"lang": "fr"}}),
        ),
        (
            "b",
            [0.0, 1.0, 0.0],
            json!({"genre": "comedy", "year": 2005, "tv": true}),
        ),
        (
            "c",
            [1.0, 0.0, 0.0],
            json!({"genre": "drama", "year": 2015, "info": {"lang": "en"}}),
        ),
        ("d", [1.0, 1.0, 0.0], json!({"genre": 7, "year": "2015"})),
        ("e", [1.0, 1.0, 1.0], json!({})),
    ];
    let records: Vec<VectorRecord> = films
        .iter()
        .map(|(id, v, m)| VectorRecord {
            id: id.to_string(),
            values: v.to_vec(),
            namespace: None,
            metadata: meta(m.clone()),
        })
        .collect();
    db.write("k", "films", &records, WriteMode::Insert)
        .expect("insert");
}

/// Each operator on an indexed and an unindexed property, nested paths, and types that
/// never compare across.
#[test]
fn filter_semantics() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = open(dir.path());
    small(&db);
    let run = |f: Value| {
        let mut q = query(&[0.0, 0.0, 0.0], 100);
        q.filter = Some(Filter::from_vectorize(&f).expect("filter"));
        let mut got = ids(&db.query("k", "films", &q).expect("query"));
        got.sort();
        got.join("")
    };
    assert_eq!(run(json!({"genre": "drama"})), "ac");
    assert_eq!(run(json!({"genre": {"$ne": "drama"}})), "bde");
    assert_eq!(run(json!({"genre": {"$in": ["comedy", 7]}})), "bd");
    assert_eq!(run(json!({"genre": {"$nin": ["comedy", "drama"]}})), "de");
    assert_eq!(
        run(json!({"year": {"$gte": 2005}})),
        "bc",
        "a string '2015' is not a number"
    );
    assert_eq!(run(json!({"year": {"$gt": 1999, "$lt": 2015}})), "b");
    assert_eq!(run(json!({"year": {"$lte": 1999}})), "a");
    assert_eq!(run(json!({"year": {"$ne": 2015}})), "abde");
    assert_eq!(run(json!({"year": {"$nin": [1999, 2005]}})), "cde");
    assert_eq!(run(json!({"tv": true})), "b");
    assert_eq!(run(json!({"tv": {"$ne": true}})), "acde");
    assert_eq!(run(json!({"info.lang": "fr"})), "a");
    assert_eq!(run(json!({"genre": "drama", "year": {"$gt": 2000}})), "c");
    assert_eq!(run(json!({"genre": {"$gt": "d"}})), "a c".replace(' ', ""));
    // The closest match first, by euclidean distance (lower is closer).
    let got = db
        .query("k", "films", &query(&[1.0, 0.0, 0.0], 2))
        .expect("query");
    assert_eq!(ids(&got), ["c", "d"]);
    assert_eq!(got[0].score, 0.0);
    assert_eq!(got[1].score, 1.0);
}

/// Insert keeps, upsert replaces, deletes remove for good, and everything acknowledged
/// is there after a restart (the graph rebuilt from SQLite).
#[test]
fn writes_survive_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    {
        let db = open(dir.path());
        small(&db);
        let a2 = VectorRecord {
            id: "a".into(),
            values: vec![5.0, 5.0, 5.0],
            namespace: Some("new".into()),
            metadata: meta(json!({"year": 2020})),
        };
        let m = db
            .write("k", "films", std::slice::from_ref(&a2), WriteMode::Insert)
            .expect("insert");
        assert_eq!(m.count, 0, "insert keeps the stored vector");
        let m = db
            .write("k", "films", &[a2], WriteMode::Upsert)
            .expect("upsert");
        assert_eq!(m.count, 1);
        let d = db
            .delete_by_ids("k", "films", &["b".into(), "zz".into()])
            .expect("delete");
        assert_eq!(d.count, 1);
        assert_eq!(
            db.info("k", "films")
                .expect("info")
                .processed_up_to_mutation,
            Some(d.mutation_id)
        );
    }
    let db = open(dir.path());
    let info = db.info("k", "films").expect("info");
    assert_eq!((info.dimensions, info.vector_count), (3, 4));
    let got = db
        .get_by_ids("k", "films", &["a".into(), "b".into()])
        .expect("get");
    assert_eq!(got.len(), 1, "b is gone");
    assert_eq!(got[0].values, [5.0, 5.0, 5.0]);
    assert_eq!(got[0].namespace.as_deref(), Some("new"));
    let mut q = query(&[0.0, 1.0, 0.0], 10);
    q.return_metadata = ReturnMetadata::Indexed;
    let all = db.query("k", "films", &q).expect("query");
    assert!(
        !ids(&all).contains(&"b".to_string()),
        "a deleted vector is never returned"
    );
    let a = all.iter().find(|m| m.id == "a").expect("a");
    assert_eq!(
        a.metadata,
        meta(json!({"year": 2020})),
        "only indexed metadata"
    );
    let mut q = query(&[0.0, 1.0, 0.0], 10);
    q.filter = Some(Filter::from_vectorize(&json!({"year": 2020})).expect("filter"));
    assert_eq!(ids(&db.query("k", "films", &q).expect("query")), ["a"]);
    // A metadata index created later covers the vectors already stored.
    db.create_metadata_index("k", "films", "genre", MetaType::String)
        .expect("index genre");
    let mut q = query(&[0.0, 0.0, 0.0], 10);
    q.filter = Some(Filter::from_vectorize(&json!({"genre": "drama"})).expect("filter"));
    assert_eq!(ids(&db.query("k", "films", &q).expect("query")), ["c"]);
    db.delete_index("k", "films").expect("delete index");
    assert!(matches!(
        db.info("k", "films"),
        Err(VectorError::NoIndex(_))
    ));
}

/// Bad input is refused before anything is written, naming the field and the limit.
#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = VectorDb::open(dir.path(), Limits::default(), GraphParams::default()).expect("open");
    small(&db);
    let said = |r: Result<_, VectorError>| match r {
        Err(VectorError::Invalid { param, message }) => format!("{param}: {message}"),
        Err(e) => e.to_string(),
        Ok(_) => "ok".into(),
    };
    let rec = |id: &str, values: Vec<f32>, m: Value| VectorRecord {
        id: id.into(),
        values,
        namespace: None,
        metadata: meta(m),
    };
    let s = said(
        db.write(
            "k",
            "films",
            &[rec("x", vec![1.0; 4], json!({}))],
            WriteMode::Upsert,
        )
        .map(drop),
    );
    assert!(
        s.contains("vectors[0].values") && s.contains("has 4 dimensions; index 'films' has 3"),
        "{s}"
    );
    let big = json!({"text": "x".repeat(11 << 10)});
    let s = said(
        db.write(
            "k",
            "films",
            &[rec("x", vec![1.0; 3], big)],
            WriteMode::Upsert,
        )
        .map(drop),
    );
    assert!(
        s.contains("vectors[0].metadata") && s.contains("limit of 10240"),
        "{s}"
    );
    let s = said(db.query("k", "films", &query(&[1.0, 2.0], 5)).map(drop));
    assert!(
        s.contains("vector: the query vector has 2 dimensions"),
        "{s}"
    );
    let s = said(
        db.query("k", "films", &query(&[1.0, 2.0, 3.0], 101))
            .map(drop),
    );
    assert!(s.contains("topK") && s.contains("between 1 and 100"), "{s}");
    let mut q = query(&[1.0, 2.0, 3.0], 21);
    q.return_values = true;
    assert!(said(db.query("k", "films", &q).map(drop)).contains("between 1 and 20"));
    assert!(matches!(
        db.query("k", "nope", &query(&[1.0], 1)),
        Err(VectorError::NoIndex(_))
    ));
    let s = said(
        db.create_index("k", "Films!", 3, Metric::Cosine, None)
            .map(drop),
    );
    assert!(s.contains("not a valid index name"), "{s}");
    let s = said(
        db.create_index("k", "wide", 1537, Metric::Cosine, None)
            .map(drop),
    );
    assert!(s.contains("between 1 and 1536"), "{s}");
    assert!(matches!(
        db.create_index("k", "films", 3, Metric::Cosine, None),
        Err(VectorError::IndexExists(_))
    ));
    // A cosine index refuses vectors without length, stored or asked; others take them.
    db.create_index("k", "angles", 3, Metric::Cosine, None)
        .expect("create");
    let s = said(
        db.write(
            "k",
            "angles",
            &[
                rec("ok", vec![1.0, 0.0, 0.0], json!({})),
                rec("zero", vec![0.0; 3], json!({})),
            ],
            WriteMode::Upsert,
        )
        .map(drop),
    );
    assert!(
        s.contains("vectors[1].values") && s.contains("vector 'zero' is all zeros"),
        "{s}"
    );
    assert_eq!(db.info("k", "angles").expect("info").vector_count, 0);
    let s = said(db.query("k", "angles", &query(&[0.0; 3], 5)).map(drop));
    assert!(
        s.starts_with("vector: the query vector is all zeros"),
        "{s}"
    );
    db.create_index("k", "dots", 3, Metric::DotProduct, None)
        .expect("create");
    db.write(
        "k",
        "dots",
        &[rec("zero", vec![0.0; 3], json!({}))],
        WriteMode::Upsert,
    )
    .expect("a dot-product index takes a zero vector");
    db.query("k", "dots", &query(&[0.0; 3], 5))
        .expect("and a zero query");
    // Ids read or deleted are held to the stored ids' limits.
    let long = "i".repeat(65);
    let s = said(
        db.get_by_ids("k", "films", &["a".into(), long.clone()])
            .map(drop),
    );
    assert!(
        s.contains("ids[1]: a vector id must be 1 to 64 bytes"),
        "{s}"
    );
    let s = said(db.delete_by_ids("k", "films", &[long]).map(drop));
    assert!(s.contains("ids[0]"), "{s}");
    let many: Vec<String> = (0..5001).map(|i| i.to_string()).collect();
    assert!(said(db.get_by_ids("k", "films", &many).map(drop)).contains("at most 5000"));
    let s = said(
        db.create_metadata_index("k", "films", &"p".repeat(513), MetaType::String)
            .map(drop),
    );
    assert!(
        s.starts_with("propertyName:") && s.contains("at most 512 bytes"),
        "{s}"
    );
    // Another owner sees nothing of this one's.
    assert!(matches!(
        db.info("other", "films"),
        Err(VectorError::NoIndex(_))
    ));
    assert!(db.list_indexes("other").expect("list").is_empty());
    assert_eq!(
        db.info("k", "films").expect("info").vector_count,
        5,
        "nothing was written"
    );
}

/// A deleted index leaves nothing behind for the next index created: not its vectors,
/// not its graph.
#[test]
fn a_new_index_never_sees_a_deleted_ones_vectors() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = open(dir.path());
    let data = clustered(40, 8, 4, 7);
    let write = |name: &str, vectors: &[Vec<f32>]| {
        let records: Vec<VectorRecord> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| VectorRecord {
                id: format!("{name}-{i}"),
                values: v.clone(),
                namespace: None,
                metadata: None,
            })
            .collect();
        db.write("k", name, &records, WriteMode::Upsert)
            .expect("write");
    };
    for round in 0..3 {
        let old = format!("old{round}");
        db.create_index("k", &old, 8, Metric::Cosine, None)
            .expect("create");
        write(&old, &data[..30]);
        assert_eq!(
            db.query("k", &old, &query(&data[0], 20))
                .expect("query")
                .len(),
            20
        );
        db.delete_index("k", &old).expect("delete");
        let new = format!("new{round}");
        db.create_index("k", &new, 8, Metric::Cosine, None)
            .expect("create");
        write(&new, &data[30..32]);
        let got = ids(&db.query("k", &new, &query(&data[30], 20)).expect("query"));
        assert_eq!(got.len(), 2, "round {round}: {got:?}");
        assert!(got.iter().all(|id| id.starts_with(&new)), "{got:?}");
        db.delete_index("k", &new).expect("delete");
    }
}
