//! The vector index's benchmark: N vectors of D dimensions written through
//! `VectorDb::write` (SQLite, then the graph), the database closed and reopened as
//! after a restart and the first query timed, then recall@10 against brute force and
//! query latency, unfiltered and with a selective (1%) and a broad (50%) metadata
//! filter. `graph` as the fourth argument turns off whole-index exact search, to
//! measure the graph walk itself.
//!
//! `cargo run --release -p kiln-vectors --example vector_bench -- N D clustered|uniform|gaussian [graph]`
//!
//! `VECTOR_BENCH_DIR=<dir>` keeps the database there and reuses it when it already
//! holds the index (a 1M-vector index takes many minutes to write);
//! `VECTOR_BENCH_RESTARTS=<r>` times the first query after each of `r` restarts;
//! `VECTOR_BENCH_REWRITE=<k>` upserts the first `k` vectors again (same values) before
//! each restart, so the restart replays what was logged after the graph's last save.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::{cosine, records, unit};

use kiln_vectors::{
    Filter, GraphParams, Limits, MetaType, Metric, Query, ReturnMetadata, VectorDb, VectorError,
    WriteMode,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

fn data(n: usize, dims: usize, kind: &str, seed: u64) -> Vec<Vec<f32>> {
    if kind == "gaussian" {
        return common::gaussian(n, dims, seed);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let clustered = kind == "clustered";
    let centres: Vec<Vec<f32>> = (0..1000).map(|_| unit(&mut rng, dims, None, 1.0)).collect();
    (0..n)
        .map(|i| {
            if clustered {
                unit(&mut rng, dims, Some(&centres[(i * 7919) % 1000]), 0.08)
            } else {
                unit(&mut rng, dims, None, 1.0)
            }
        })
        .collect()
}

fn exact(q: &[f32], all: &[Vec<f32>], admit: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut s: Vec<(f32, usize)> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| admit(*i))
        .map(|(i, v)| (cosine(q, v), i))
        .collect();
    s.sort_by(|a, b| b.0.total_cmp(&a.0));
    s.into_iter().take(10).map(|x| x.1).collect()
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The metadata of vector `i`: a bucket of `i % 100`, which the filters select on.
fn bucket(i: usize) -> Option<serde_json::Map<String, serde_json::Value>> {
    json!({"bucket": i % 100}).as_object().cloned()
}

/// A query case: its name, its filter, and which vector indexes pass it.
type Case = (&'static str, Option<serde_json::Value>, fn(usize) -> bool);

fn main() {
    // `RUST_LOG=kiln_vectors=info` shows the graph's loads, thaws and saves.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let dims: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(384);
    let kind = args.get(3).map_or("clustered", String::as_str);
    let temp = tempfile::tempdir().expect("tmp");
    let kept = std::env::var_os("VECTOR_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temp.path());
    let restarts: usize = std::env::var("VECTOR_BENCH_RESTARTS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let rewrite: usize = std::env::var("VECTOR_BENCH_REWRITE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut params = GraphParams::default();
    if args.get(4).is_some_and(|a| a == "graph") {
        params.exact_search_max = 0;
    }
    // Queries come from the same distribution (the same topics), not in the index.
    let mut all = data(n + 200, dims, kind, 1);
    let queries = all.split_off(n);
    let db = VectorDb::open(dir, Limits::default(), params).expect("open");
    let created = db.create_index("k", "bench", dims, Metric::Cosine, None);
    if matches!(created, Err(VectorError::IndexExists(_))) {
        println!("reusing the {n} x {dims} index in {}", dir.display());
    } else {
        created.expect("create");
        db.create_metadata_index("k", "bench", "bucket", MetaType::Number)
            .expect("meta");
        let t = Instant::now();
        for (c, chunk) in all.chunks(5000).enumerate() {
            db.write(
                "k",
                "bench",
                &records(chunk, c * 5000, bucket),
                WriteMode::Upsert,
            )
            .expect("write");
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "write {n} x {dims}: {s:.1} s ({:.0} vectors/s, committed and in the graph)",
            n as f64 / s
        );
    }
    let id = |m: &kiln_vectors::Match| m.id[1..].parse::<usize>().unwrap_or(usize::MAX);
    let q0 = |v: &[f32], filter: Option<Filter>| Query {
        vector: v.to_vec(),
        top_k: 10,
        namespace: None,
        filter,
        return_values: false,
        return_metadata: ReturnMetadata::None,
    };
    drop(db);
    let mut firsts = Vec::new();
    let mut reopened = None;
    for r in 0..restarts {
        if rewrite > 0 {
            let db = reopened
                .take()
                .unwrap_or_else(|| VectorDb::open(dir, Limits::default(), params).expect("open"));
            let mut slowest = 0f64;
            for (c, chunk) in all[..rewrite].chunks(5000).enumerate() {
                let t = Instant::now();
                db.write(
                    "k",
                    "bench",
                    &records(chunk, c * 5000, bucket),
                    WriteMode::Upsert,
                )
                .expect("rewrite");
                slowest = slowest.max(t.elapsed().as_secs_f64());
            }
            println!(
                "rewrote {rewrite} vectors, slowest write of 5000 {slowest:.2} s: {:?}",
                db.graph_stats("k", "bench")
            );
            reopened = Some(db);
        }
        drop(reopened.take()); // nothing is saved at close: as after a crash
        let t = Instant::now();
        let db = VectorDb::open(dir, Limits::default(), params).expect("reopen");
        let opened = t.elapsed().as_secs_f64();
        let t = Instant::now();
        db.query("k", "bench", &q0(&queries[r % queries.len()], None))
            .expect("first query");
        let first = t.elapsed().as_secs_f64();
        firsts.push(first);
        println!("restart {r}: open {opened:.3} s, first query {first:.3} s");
        // Recall below is of the settled graph: wait for the worker to insert the
        // replayed tail (searched exactly meanwhile).
        let t = Instant::now();
        loop {
            match db.graph_stats("k", "bench").expect("stats") {
                Some(s) if s.pending == 0 => {
                    println!(
                        "graph {s:?}, settled {:.1} s after the first query",
                        t.elapsed().as_secs_f64()
                    );
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
        reopened = Some(db);
    }
    println!(
        "first query after a restart over {restarts}: p50 {:.3} s, max {:.3} s",
        pct(firsts.clone(), 0.5),
        pct(firsts, 1.0)
    );
    let Some(db) = reopened else { return };
    let cases: [Case; 3] = [
        ("unfiltered", None, |_| true),
        ("filter 1% (bucket = 3)", Some(json!({"bucket": 3})), |i| {
            i % 100 == 3
        }),
        (
            "filter 50% (bucket < 50)",
            Some(json!({"bucket": {"$lt": 50}})),
            |i| i % 100 < 50,
        ),
    ];
    for (name, f, admit) in cases {
        let (mut lat, mut hits) = (Vec::new(), 0);
        for q in &queries {
            let filter = f
                .as_ref()
                .map(|f| Filter::from_vectorize(f).expect("filter"));
            let t = Instant::now();
            let got = db.query("k", "bench", &q0(q, filter)).expect("query");
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            let want = exact(q, &all, admit);
            hits += got.iter().filter(|m| want.contains(&id(m))).count();
        }
        println!(
            "{name}: recall@10 {:.3}, p50 {:.2} ms, p99 {:.2} ms",
            hits as f64 / (queries.len() * 10) as f64,
            pct(lat.clone(), 0.5),
            pct(lat, 0.99)
        );
    }
}
