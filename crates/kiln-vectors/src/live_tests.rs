//! The live graph beside its writers and its worker: queries never see a graph half
//! way through an insert, and a view of a graph file takes writes until it is thawed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::graph::Usearch;

/// Queries beside the worker inserting a tail walk a whole graph: each returns its
/// full candidate list. (Inserting beside queries let a walk reach a node linked on
/// its upper levels but not yet on the base one, and stop there with 1 candidate.)
#[test]
fn queries_beside_the_drain_see_a_whole_graph() {
    let params = GraphParams::default();
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store {
        conn: Mutex::new(kiln_db::open_in_memory(&crate::schema::SCHEMA).expect("db")),
        dir: dir.path().to_path_buf(),
        params,
        live: LiveSet::default(),
        drain: Mutex::new(None),
    };
    let shape = Shape {
        index_id: 1,
        dimensions: 16,
        metric: Metric::Cosine,
    };
    let mut rng = StdRng::seed_from_u64(3);
    let mut vector = || -> Vec<f32> { (0..16).map(|_| rng.random::<f32>() - 0.5).collect() };
    let ann = Usearch::new(16, shape.metric, &params).expect("graph");
    let tail = (0..20_000).map(|k| (k, vector())).collect();
    let queries: Vec<Vec<f32>> = (0..100).map(|_| vector()).collect();
    let live = LiveIndex::default();
    *live.graph.write().expect("lock") = Some(Graph {
        ann: Box::new(ann),
        tail,
        masked: HashSet::new(),
        shape,
    });
    let ef = params.expansion_search;
    assert!(live.drain(&store).expect("a first chunk") > 0 && DRAIN_CHUNK >= ef);
    let (mut asked, mut short) = (0, Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| while live.drain(&store).expect("drain") > 0 {});
        loop {
            let g = live.read(&store, &shape).expect("read");
            let graph = g.as_ref().expect("graph");
            let found = graph
                .ann
                .search(&queries[asked % queries.len()], ef, ef, None)
                .expect("search");
            if found.len() < ef {
                short.push(found.len());
            }
            asked += 1;
            if graph.tail.is_empty() {
                break;
            }
        }
    });
    assert!(
        short.is_empty(),
        "{} of {asked} searches found fewer than {ef}: {short:?}",
        short.len()
    );
}

/// A store over an in-memory database holding index 1 with `n` vectors of 8 dims.
fn store_with(dir: &Path, params: GraphParams, vectors: &[Vec<f32>]) -> Store {
    let conn = kiln_db::open_in_memory(&crate::schema::SCHEMA).expect("db");
    conn.execute(
        "INSERT INTO indexes (id, owner, name, dimensions, metric, created_at, modified_at)
         VALUES (1, 'k', 'g', 8, 'euclidean', 0, 0)",
        [],
    )
    .expect("index");
    for (k, v) in vectors.iter().enumerate() {
        conn.execute(
            "INSERT INTO vectors (key, index_id, id, vals) VALUES (?1, 1, ?2, ?3)",
            rusqlite::params![k as i64, format!("v{k}"), crate::schema::encode(v)],
        )
        .expect("vector");
    }
    Store {
        conn: Mutex::new(conn),
        dir: dir.to_path_buf(),
        params,
        live: LiveSet::default(),
        drain: Mutex::new(None),
    }
}

/// A graph loaded from its file is a read-only view until a write makes the worker thaw
/// it. Writes landing meanwhile are masked (a removal, an update's old vector) or held
/// in the tail (an addition, an update's new vector); no search returns a masked key;
/// the thaw leaves a writable graph of exactly the stored vectors.
#[test]
fn a_view_takes_writes_until_it_is_thawed() {
    let params = GraphParams {
        exact_search_max: 0,
        ..GraphParams::default()
    };
    let dir = tempfile::tempdir().expect("tmp");
    let mut rng = StdRng::seed_from_u64(4);
    let mut vector = || -> Vec<f32> { (0..8).map(|_| rng.random::<f32>() - 0.5).collect() };
    let vectors: Vec<Vec<f32>> = (0..300).map(|_| vector()).collect();
    let store = store_with(dir.path(), params, &vectors);
    let shape = Shape {
        index_id: 1,
        dimensions: 8,
        metric: Metric::Euclidean,
    };
    let built = LiveIndex::default();
    drop(built.read(&store, &shape).expect("built"));
    while built.drain(&store).expect("insert") > 0 {}
    assert_eq!(built.stats().checkpoints, 1, "saved once built");

    let live = LiveIndex::default();
    drop(live.read(&store, &shape).expect("loaded"));
    assert_eq!((live.stats().loads, live.stats().builds), (1, 0));
    assert_eq!(live.drain(&store).expect("nothing to drain"), 0);
    assert!(
        live.read(&store, &shape)
            .expect("read")
            .as_ref()
            .is_some_and(|g| g.ann.frozen()),
        "a view with nothing written stays a view"
    );
    let (moved, added) = (vector(), vector());
    live.apply(&store, &[5, 6], &[(6, &moved), (300, &added)]);
    {
        let g = live.read(&store, &shape).expect("read");
        let graph = g.as_ref().expect("graph");
        assert!(graph.ann.frozen(), "a loaded graph is a view");
        assert_eq!(graph.masked, HashSet::from([5, 6]));
        assert_eq!(graph.len(), 300);
        let near = |q: &[f32]| -> Vec<u64> {
            crate::search::nearest(graph, &params, shape.metric, q, 5, None)
                .expect("search")
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert!(
            !near(&vectors[5]).contains(&5),
            "a removed key is never found"
        );
        assert_eq!(
            near(&moved)[0],
            6,
            "an updated key is found at its new vector"
        );
        assert_eq!(near(&added)[0], 300, "an added key is found in the tail");
        let exact = graph.exact(&vectors[6], 5).expect("exact");
        assert!(exact.len() == 5 && exact.iter().all(|(k, _)| *k != 6));
        let mut out = vec![0f32; 8];
        assert!(!graph.get(5, &mut out) && graph.get(6, &mut out) && out == moved);
    }
    while live.drain(&store).expect("thaw and insert") > 0 {}
    let g = live.read(&store, &shape).expect("read");
    let graph = g.as_ref().expect("graph");
    assert!(!graph.ann.frozen() && graph.masked.is_empty() && graph.tail.is_empty());
    assert_eq!(graph.ann.len(), 300);
    let mut out = vec![0f32; 8];
    assert!(!graph.ann.contains(5) && graph.ann.get(6, &mut out) && out == moved);
    assert!(graph.ann.contains(300));
}
