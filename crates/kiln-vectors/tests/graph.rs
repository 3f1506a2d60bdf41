//! The persisted graph and the recall it holds: a restart loads the saved graph and
//! replays the writes logged after it (no rebuild); a corrupt or stale graph file is
//! detected and rebuilt, never used; recall@10 against brute force on random
//! Gaussian vectors holds on the graph itself and on the default search.

mod common;

use std::time::{Duration, Instant};

use common::{exact_top, gaussian, records};
use kiln_vectors::{
    GraphParams, GraphStats, Limits, Metric, Query, ReturnMetadata, VectorDb, WriteMode,
};

fn open_with(dir: &std::path::Path, params: GraphParams) -> VectorDb {
    VectorDb::open(dir, Limits::default(), params).expect("open")
}

fn write_all(db: &VectorDb, vectors: &[Vec<f32>]) {
    for (c, chunk) in vectors.chunks(5000).enumerate() {
        db.write(
            "k",
            "g",
            &records(chunk, c * 5000, |_| None),
            WriteMode::Upsert,
        )
        .expect("write");
    }
}

fn top(db: &VectorDb, q: &[f32], k: usize) -> Vec<String> {
    let query = Query {
        vector: q.to_vec(),
        top_k: k,
        namespace: None,
        filter: None,
        return_values: false,
        return_metadata: ReturnMetadata::None,
    };
    db.query("k", "g", &query)
        .expect("query")
        .into_iter()
        .map(|m| m.id)
        .collect()
}

/// recall@10 of `db` against brute force over `stored` (ids `v<i>`).
fn recall(db: &VectorDb, stored: &[Vec<f32>], queries: &[Vec<f32>]) -> f64 {
    let ids: Vec<String> = (0..stored.len()).map(|i| format!("v{i}")).collect();
    let hits: usize = queries
        .iter()
        .map(|q| {
            let want = exact_top(q, ids.iter().zip(stored), 10);
            top(db, q, 10).iter().filter(|id| want.contains(id)).count()
        })
        .sum();
    hits as f64 / (queries.len() * 10) as f64
}

fn stats(db: &VectorDb) -> GraphStats {
    db.graph_stats("k", "g")
        .expect("stats")
        .expect("graph in memory")
}

/// Waits for the graph worker to insert the tail and save the graph.
fn settled(db: &VectorDb) -> GraphStats {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = db.graph_stats("k", "g").expect("stats") {
            if s.pending == 0 && s.checkpoints > 0 {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "the tail was never drained");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn graph_only() -> GraphParams {
    GraphParams {
        exact_search_max: 0,
        ..GraphParams::default()
    }
}

/// 20,000 × 64 random Gaussian vectors, cosine: the graph walk at the ef the rule
/// picks finds ≥ 95% of the true top 10, and so does the default search after a
/// restart (which loads the saved graph rather than rebuilding it).
#[test]
fn recall_at_10_holds_at_20k_by_64() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut all = gaussian(20_100, 64, 33);
    let queries = all.split_off(20_000);
    {
        let db = open_with(dir.path(), graph_only());
        db.create_index("k", "g", 64, Metric::Cosine, None)
            .expect("create");
        write_all(&db, &all);
        let r = recall(&db, &all, &queries);
        eprintln!("graph recall@10 at 20k x 64: {r:.3}");
        assert!(r >= 0.95, "graph recall@10 {r:.3} < 0.95");
        let s = stats(&db);
        assert_eq!((s.in_graph, s.pending), (20_000, 0), "{s:?}");
    }
    let db = open_with(dir.path(), GraphParams::default());
    let r = recall(&db, &all, &queries);
    assert!(r >= 0.95, "recall@10 {r:.3} < 0.95 after a restart");
    let s = stats(&db);
    assert_eq!((s.loads, s.builds), (1, 0), "loaded, not rebuilt: {s:?}");
}

/// A restart loads the graph file and replays what was written after it: upserts,
/// deletes and new vectors are all as stored, the first query answered before the
/// worker has inserted the replayed tail.
#[test]
fn a_restart_loads_the_graph_and_replays_the_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let params = GraphParams {
        checkpoint_min_keys: 1000,
        ..graph_only()
    };
    let mut vectors = gaussian(3000, 16, 5);
    let queries = gaussian(20, 16, 6);
    {
        let db = open_with(dir.path(), params);
        db.create_index("k", "g", 16, Metric::Cosine, None)
            .expect("create");
        write_all(&db, &vectors[..2000]);
        let s = stats(&db);
        assert_eq!((s.builds, s.loads), (1, 0), "{s:?}");
        assert!(
            s.checkpoints >= 2,
            "saved when built and after 1000 keys: {s:?}"
        );
        // Logged after the last save: new vectors, replaced ones, deleted ones.
        db.write(
            "k",
            "g",
            &records(&vectors[2000..2500], 2000, |_| None),
            WriteMode::Upsert,
        )
        .expect("more");
        let moved = gaussian(100, 16, 7);
        vectors[..100].clone_from_slice(&moved);
        db.write("k", "g", &records(&moved, 0, |_| None), WriteMode::Upsert)
            .expect("replace");
        let gone: Vec<String> = (100..150).map(|i| format!("v{i}")).collect();
        db.delete_by_ids("k", "g", &gone).expect("delete");
        drop(db); // nothing is saved at close: as after a crash
    }
    let stored: Vec<Vec<f32>> = vectors[..2500].to_vec();
    let db = open_with(dir.path(), params);
    let ids: Vec<String> = (0..2500)
        .filter(|i| !(100..150).contains(i))
        .map(|i| format!("v{i}"))
        .collect();
    let live: Vec<&Vec<f32>> = ids
        .iter()
        .map(|id| &stored[id[1..].parse::<usize>().expect("id")])
        .collect();
    for q in &queries {
        let want = exact_top(q, ids.iter().zip(live.iter().copied()), 10);
        let got = top(&db, q, 10);
        let hits = got.iter().filter(|id| want.contains(id)).count();
        assert!(hits >= 8, "{got:?} vs {want:?}");
        assert!(
            got.iter().all(|id| !gone_id(id)),
            "a deleted vector: {got:?}"
        );
    }
    let s = stats(&db);
    assert_eq!((s.loads, s.builds), (1, 0), "loaded, not rebuilt: {s:?}");
    let s = settled(&db);
    assert_eq!(s.in_graph, 2450, "{s:?}");
    assert!(s.checkpoints >= 1, "saved once the tail was in: {s:?}");
}

fn gone_id(id: &str) -> bool {
    id[1..]
        .parse::<usize>()
        .is_ok_and(|i| (100..150).contains(&i))
}

/// A graph file with a flipped byte, or an older file put back over a newer one, is
/// refused and the graph rebuilt from SQLite; queries stay right throughout.
#[test]
fn a_corrupt_or_stale_graph_file_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tmp");
    let params = GraphParams {
        checkpoint_min_keys: 500,
        ..graph_only()
    };
    let vectors = gaussian(2000, 8, 9);
    let file = dir.path().join("graphs").join("1.hnsw");
    let old = {
        let db = open_with(dir.path(), params);
        db.create_index("k", "g", 8, Metric::Euclidean, None)
            .expect("create");
        write_all(&db, &vectors[..1000]);
        let old = std::fs::read(&file).expect("a graph file");
        write_all(&db, &vectors);
        old
    };
    let check = |db: &VectorDb| {
        let q = &vectors[1234];
        assert_eq!(top(db, q, 1), ["v1234"], "a stored vector finds itself");
    };

    let reopen = |expect: (u64, u64), why: &str| {
        let db = open_with(dir.path(), params);
        check(&db);
        let s = stats(&db);
        assert_eq!((s.loads, s.builds), expect, "{why}: {s:?}");
        db
    };
    let mut bytes = std::fs::read(&file).expect("graph file");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&file, &bytes).expect("corrupt it");
    let rebuilt = settled(&reopen((0, 1), "a corrupt file is not used"));
    assert_eq!(rebuilt.in_graph, 2000, "{rebuilt:?}");
    let s = stats(&reopen((1, 0), "the rebuilt graph was saved"));
    assert_eq!((s.in_graph, s.pending), (2000, 0), "{s:?}");
    std::fs::write(&file, &old).expect("put an older file back");
    drop(reopen((0, 1), "a stale file is not used"));
}
