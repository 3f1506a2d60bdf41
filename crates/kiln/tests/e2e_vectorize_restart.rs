//! After a SIGKILL a Vectorize index answers its first query from its saved graph (a
//! load, never a rebuild, in the server's log), and a corrupt graph file is rebuilt.

mod support;
mod vectorize_common;

use serde_json::{json, Value};
use support::*;
use vectorize_common::*;

/// SIGKILL, restart: the index's first query is answered from the graph saved before
/// the kill, with the writes logged after it replayed, and the server logs a load,
/// never a build. A graph file corrupted while the server is down is refused and the
/// graph rebuilt (and saved); the answers stay the same.
#[test]
fn a_restarted_index_answers_from_its_saved_graph() {
    kiln_testkit::model_dir(MINILM);
    let data = tempfile::tempdir().expect("tmp");
    let vectors: Vec<Vec<f32>> = (0..1500u64)
        .map(|i| (0..32).map(|d| noise(i * 32 + d)).collect())
        .collect();
    let first_query = |base: String, probe: usize| {
        let vector = vectors[probe].clone();
        async move {
            let body = json!({"vector": vector, "topK": 3}).to_string();
            let r = ok(&base, "POST", "/warm/query", Some(body)).await;
            r["matches"][0]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let server = serve(data.path());
    block_on(async {
        let base = server.base_url();
        ok(
            &base,
            "POST",
            "",
            j(json!({"name": "warm", "config": {"dimensions": 32, "metric": "cosine"}})),
        )
        .await;
        for part in vectors.chunks(500).enumerate() {
            let lines: Vec<Value> = part
                .1
                .iter()
                .enumerate()
                .map(|(i, v)| json!({"id": format!("v{}", part.0 * 500 + i), "values": v}))
                .collect();
            ok(&base, "POST", "/warm/upsert", Some(ndjson(&lines))).await;
        }
        assert_eq!(first_query(base, 700).await, "v700");
    });
    assert_eq!(
        server.log_count("vector graph built"),
        1,
        "{}",
        server.log_tail()
    );
    drop(server); // SIGKILL

    let server = serve(data.path());
    let got = block_on(first_query(server.base_url(), 1234));
    assert_eq!(got, "v1234");
    assert_eq!(
        server.log_count("vector graph loaded"),
        1,
        "{}",
        server.log_tail()
    );
    assert_eq!(
        (
            server.log_count("vector graph built"),
            server.log_count("rebuilding")
        ),
        (0, 0),
        "no rebuild after a restart: {}",
        server.log_tail()
    );
    drop(server);

    let file = data.path().join("vectors").join("graphs").join("1.hnsw");
    let mut bytes = std::fs::read(&file).expect("the saved graph");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&file, &bytes).expect("corrupt it");
    let server = serve(data.path());
    let got = block_on(first_query(server.base_url(), 42));
    assert_eq!(got, "v42");
    assert_eq!(server.log_count("rebuilding"), 1, "{}", server.log_tail());
    assert_eq!(server.log_count("vector graph loaded"), 0);
    // The rebuilt graph is saved once whole; the next start loads it, nothing to replay.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.log_count("vector graph saved index=1 vectors=1500") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            server.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(server);
    let server = serve(data.path());
    assert_eq!(block_on(first_query(server.base_url(), 999)), "v999");
    assert_eq!(
        server.log_count("vector graph loaded index=1 vectors=1500 replayed=0"),
        1,
        "{}",
        server.log_tail()
    );
}

/// A value in [-1, 1) from `seed` (splitmix64): distinct vectors without a generator.
fn noise(seed: u64) -> f32 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}
