//! The Vectorize API end to end, on a real server process with real embeddings
//! (all-minilm-l6-v2): indexes and metadata indexes, NDJSON upserts, semantic queries
//! with filters, reads and deletes by id; a SIGKILL right after acknowledged writes
//! loses none of them; bad input gets a 400 (or 404) in Cloudflare's envelope naming the
//! problem; one key never sees another's indexes; after a SIGKILL an index answers its
//! first query from its saved graph (no rebuild), and a corrupt graph file is rebuilt.

mod support;

use std::path::Path;

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::*;

const MINILM: &str = "all-minilm-l6-v2";
const KEY: &str = "sk-vectors";
const BASE: &str = "/vectorize/v2/indexes";

const DOCS: &[(&str, &str, &str)] = &[
    (
        "cat",
        "animals",
        "Cats are small furry pets that purr and chase mice.",
    ),
    (
        "dog",
        "animals",
        "Dogs are loyal pets that love walks and playing fetch.",
    ),
    (
        "parrot",
        "animals",
        "Parrots are colourful birds that can mimic human speech.",
    ),
    (
        "pizza",
        "food",
        "Pizza is a baked flatbread topped with tomato and cheese.",
    ),
    (
        "sushi",
        "food",
        "Sushi is vinegared rice served with raw fish.",
    ),
    (
        "bread",
        "food",
        "Bread is baked from flour, water and yeast.",
    ),
    (
        "rust",
        "code",
        "Rust is a systems programming language focused on memory safety.",
    ),
    (
        "sql",
        "code",
        "SQL is a language for querying relational databases.",
    ),
];

fn serve(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy();
    start_model(
        MINILM,
        &[
            "--data-dir",
            &dir,
            "--api-key",
            KEY,
            "--api-key",
            "sk-other",
        ],
    )
}

async fn call(
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (u16, Value) {
    let url = format!("{base}{BASE}{path}");
    let c = reqwest::Client::new();
    let req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url),
    };
    let req = match body {
        Some(b) if path.ends_with("/insert") || path.ends_with("/upsert") => {
            req.header("content-type", "application/x-ndjson").body(b)
        }
        Some(b) => req.header("content-type", "application/json").body(b),
        None => req,
    };
    let resp = req.bearer_auth(key).send().await.expect("request");
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.expect("a JSON body");
    (status, v)
}

async fn ok(base: &str, method: &str, path: &str, body: Option<String>) -> Value {
    let (s, v) = call(base, KEY, method, path, body).await;
    assert_eq!(s, 200, "{method} {path}: {v}");
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["errors"], json!([]), "{v}");
    v["result"].clone()
}

/// A refused call: its status, and the message, after checking both error shapes.
async fn refused(
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (u16, String) {
    let (s, v) = call(base, key, method, path, body).await;
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["result"], Value::Null, "{v}");
    let message = v["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(v["errors"][0]["code"], s, "{v}");
    assert_eq!(
        v["error"]["message"],
        message.as_str(),
        "OpenAI's error object too: {v}"
    );
    (s, message)
}

async fn embed(base: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let v: Value = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .bearer_auth(KEY)
        .json(&json!({"model": MINILM, "input": texts}))
        .send()
        .await
        .expect("embed")
        .json()
        .await
        .expect("json");
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).expect("floats"))
        .collect()
}

fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

async fn query(base: &str, vector: &[f32], extra: Value) -> Vec<Value> {
    let mut body = json!({"vector": vector, "topK": 3, "returnMetadata": "all"});
    body.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let r = ok(base, "POST", "/docs/query", Some(body.to_string())).await;
    assert_eq!(r["count"], r["matches"].as_array().map_or(0, Vec::len));
    r["matches"].as_array().expect("matches").clone()
}

fn ids(matches: &[Value]) -> Vec<&str> {
    matches
        .iter()
        .map(|m| m["id"].as_str().unwrap_or(""))
        .collect()
}

fn j(v: Value) -> Option<String> {
    Some(v.to_string())
}

#[test]
fn vectorize_round_trip_survives_a_crash() {
    kiln_testkit::model_dir(MINILM);
    let data = tempfile::tempdir().expect("tmp");
    let server = serve(data.path());
    let base = server.base_url();
    let late = block_on(async {
        let created = ok(
            &base,
            "POST",
            "",
            j(json!({
            "name": "docs", "description": "test docs",
            "config": {"dimensions": 384, "metric": "cosine"}})),
        )
        .await;
        assert_eq!(
            created["config"],
            json!({"dimensions": 384, "metric": "cosine"})
        );
        assert!(
            created["created_on"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{created}"
        );
        ok(
            &base,
            "POST",
            "/docs/metadata_index/create",
            j(json!({"propertyName": "topic", "indexType": "string"})),
        )
        .await;
        let listed = ok(&base, "GET", "/docs/metadata_index/list", None).await;
        assert_eq!(
            listed["metadataIndexes"],
            json!([{"propertyName": "topic", "indexType": "string"}])
        );

        let texts: Vec<&str> = DOCS.iter().map(|d| d.2).collect();
        let vectors = embed(&base, &texts).await;
        let lines: Vec<Value> = DOCS
            .iter()
            .zip(&vectors)
            .enumerate()
            .map(|(i, ((id, topic, text), v))| {
                json!({
            "id": id, "values": v, "namespace": if i % 2 == 0 { "even" } else { "odd" },
            "metadata": {"topic": topic, "text": text, "n": i}})
            })
            .collect();
        let m = ok(&base, "POST", "/docs/upsert", Some(ndjson(&lines))).await;
        assert_eq!(m["count"], DOCS.len());
        assert!(
            m["mutationId"].as_str().is_some_and(|id| id.len() == 36),
            "{m}"
        );
        // Insert keeps what is stored.
        let again = ok(&base, "POST", "/docs/insert", Some(ndjson(&lines[..2]))).await;
        assert_eq!(again["count"], 0);

        // Semantic search over real embeddings.
        let q = embed(
            &base,
            &[
                "Which animal makes a good companion at home?",
                "What should I cook for dinner?",
            ],
        )
        .await;
        let hits = query(&base, &q[0], json!({})).await;
        assert!(["cat", "dog"].contains(&ids(&hits)[0]), "{hits:?}");
        assert_eq!(hits[0]["metadata"]["topic"], "animals");
        let scores: Vec<f64> = hits
            .iter()
            .map(|m| m["score"].as_f64().unwrap_or(9.0))
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]) && scores[0] <= 1.0001,
            "{scores:?}"
        );
        // Filters come before top-K: a food query restricted to code still finds 2.
        let code = query(
            &base,
            &q[1],
            json!({"topK": 5, "filter": {"topic": "code"}}),
        )
        .await;
        let mut got = ids(&code);
        got.sort();
        assert_eq!(got, ["rust", "sql"]);
        let food = query(
            &base,
            &q[1],
            json!({"topK": 2, "filter": {"topic": {"$in": ["food"]}, "n": {"$gte": 4}},
                                               "returnValues": true, "returnMetadata": "indexed"}),
        )
        .await;
        assert_eq!(ids(&food).len(), 2);
        assert!(
            ids(&food)
                .iter()
                .all(|id| ["pizza", "sushi", "bread"].contains(id)),
            "{food:?}"
        );
        assert_eq!(
            food[0]["metadata"],
            json!({"topic": "food"}),
            "only indexed metadata"
        );
        assert_eq!(food[0]["values"].as_array().map(Vec::len), Some(384));
        let odd = query(&base, &q[0], json!({"topK": 8, "namespace": "odd"})).await;
        assert_eq!(odd.len(), 4);
        assert!(
            odd.iter()
                .all(|m| m["metadata"]["n"].as_u64().is_some_and(|n| n % 2 == 1)),
            "{odd:?}"
        );

        let got = ok(
            &base,
            "POST",
            "/docs/get_by_ids",
            j(json!({"ids": ["sushi", "nope"]})),
        )
        .await;
        assert_eq!(got.as_array().map(Vec::len), Some(1));
        assert_eq!(got[0]["namespace"], "even");
        let del = ok(
            &base,
            "POST",
            "/docs/delete_by_ids",
            j(json!({"ids": ["cat"]})),
        )
        .await;
        assert_eq!(del["count"], 1);

        // Acknowledged just before the crash.
        let late = embed(&base, &["Hamsters are tiny rodents kept as pets."])
            .await
            .remove(0);
        let line = json!({"id": "hamster", "values": late, "metadata": {"topic": "animals"}});
        let m = ok(&base, "POST", "/docs/upsert", Some(ndjson(&[line]))).await;
        let info = ok(&base, "GET", "/docs/info", None).await;
        assert_eq!(info["vectorCount"], DOCS.len());
        assert_eq!(info["processedUpToMutation"], m["mutationId"]);
        late
    });
    drop(server); // SIGKILL

    let server = serve(data.path());
    let base = server.base_url();
    block_on(async {
        let info = ok(&base, "GET", "/docs/info", None).await;
        assert_eq!(info["vectorCount"], DOCS.len(), "{info}");
        let hits = query(
            &base,
            &late,
            json!({"topK": 8, "filter": {"topic": "animals"}}),
        )
        .await;
        assert_eq!(ids(&hits)[0], "hamster");
        assert!(
            !ids(&hits).contains(&"cat"),
            "a deleted vector stays deleted: {hits:?}"
        );
        let listed = ok(&base, "GET", "", None).await;
        assert_eq!(listed.as_array().map(Vec::len), Some(1));

        // Bad input, named.
        let short = json!({"vector": [0.1, 0.2], "topK": 3}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "/docs/query", Some(short)).await;
        assert!(
            s == 400 && m.contains("2 dimensions") && m.contains("has 384"),
            "{s} {m}"
        );
        let bad_line = ndjson(&[json!({"id": "x", "values": [1.0, 2.0]})]);
        let (s, m) = refused(&base, KEY, "POST", "/docs/upsert", Some(bad_line)).await;
        assert!(s == 400 && m.contains("'x' has 2 dimensions"), "{s} {m}");
        let (s, m) = refused(
            &base,
            KEY,
            "POST",
            "/docs/upsert",
            Some("{\"id\": 1}\n".into()),
        )
        .await;
        assert!(s == 400 && m.contains("line 1"), "{s} {m}");
        // A cosine index has no score for a vector without length: refused, stored or
        // asked, naming it.
        let zero = ndjson(&[
            json!({"id": "fine", "values": late}),
            json!({"id": "void", "values": vec![0.0; 384]}),
        ]);
        for op in ["insert", "upsert"] {
            let (s, v) = call(
                &base,
                KEY,
                "POST",
                &format!("/docs/{op}"),
                Some(zero.clone()),
            )
            .await;
            let m = v["errors"][0]["message"].as_str().unwrap_or_default();
            assert!(
                s == 400 && m.contains("vector 'void' is all zeros"),
                "{s} {v}"
            );
            assert_eq!(v["error"]["param"], "vectors[1].values", "{v}");
        }
        let void = json!({"vector": vec![0.0; 384], "topK": 3}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "/docs/query", Some(void)).await;
        assert!(
            s == 400 && m.contains("the query vector is all zeros"),
            "{s} {m}"
        );
        let long = j(json!({"ids": ["x".repeat(65)]}));
        let (s, m) = refused(&base, KEY, "POST", "/docs/get_by_ids", long).await;
        assert!(s == 400 && m.contains("1 to 64 bytes"), "{s} {m}");
        let big =
            ndjson(&[json!({"id": "x", "values": late, "metadata": {"t": "x".repeat(11000)}})]);
        let (s, m) = refused(&base, KEY, "POST", "/docs/upsert", Some(big)).await;
        assert!(s == 400 && m.contains("limit of 10240"), "{s} {m}");
        let bad_op = json!({"vector": late, "filter": {"topic": {"$regex": "a.*"}}}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "/docs/query", Some(bad_op)).await;
        assert!(s == 400 && m.contains("'$regex'"), "{s} {m}");
        let many = json!({"vector": late, "topK": 101}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "/docs/query", Some(many)).await;
        assert!(
            s == 400 && m.contains("`topK` must be between 1 and 100"),
            "{s} {m}"
        );
        let wide =
            json!({"name": "wide", "config": {"dimensions": 2000, "metric": "cosine"}}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "", Some(wide)).await;
        assert!(s == 400 && m.contains("between 1 and 1536"), "{s} {m}");
        let metric = json!({"name": "m", "config": {"dimensions": 3, "metric": "l2"}}).to_string();
        let (s, m) = refused(&base, KEY, "POST", "", Some(metric)).await;
        assert!(s == 400 && m.contains("unknown metric 'l2'"), "{s} {m}");
        let remote = json!({"name": "q", "config": {"dimensions": 3, "metric": "cosine", "backend": "qdrant"}})
            .to_string();
        let (s, m) = refused(&base, KEY, "POST", "", Some(remote)).await;
        assert!(s == 400 && m.contains("--qdrant-url"), "{s} {m}");
        let (s, m) = refused(&base, KEY, "GET", "/nope/info", None).await;
        assert!(s == 404 && m.contains("no index named 'nope'"), "{s} {m}");
        // Another key sees nothing of this one's.
        let (s, _) = refused(&base, "sk-other", "GET", "/docs", None).await;
        assert_eq!(s, 404);

        ok(&base, "DELETE", "/docs", None).await;
        let (s, _) = refused(&base, KEY, "GET", "/docs/info", None).await;
        assert_eq!(s, 404);
    });
}

/// SIGKILL while upserts are in flight: every upsert that was answered is there after
/// the restart, whole (all its vectors, with their values).
#[test]
fn a_kill_during_upserts_loses_nothing_acknowledged() {
    kiln_testkit::model_dir(MINILM);
    let data = tempfile::tempdir().expect("tmp");
    let server = serve(data.path());
    let base = server.base_url();
    let pid = server.pid().to_string();
    let acked: Vec<usize> = block_on(async {
        ok(
            &base,
            "POST",
            "",
            j(json!({"name": "crash", "config": {"dimensions": 16, "metric": "dot-product"}})),
        )
        .await;
        let writes = (0..200).map(|w| {
            let base = base.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(5 * w as u64)).await;
                let lines: Vec<Value> = (0..100)
                    .map(|i| json!({"id": format!("w{w}-{i}"), "values": vec![(w * 100 + i) as f32; 16]}))
                    .collect();
                let resp = reqwest::Client::new()
                    .post(format!("{base}{BASE}/crash/upsert"))
                    .bearer_auth(KEY)
                    .header("content-type", "application/x-ndjson")
                    .body(ndjson(&lines))
                    .send()
                    .await;
                match resp {
                    Ok(r) if r.status().as_u16() == 200 => Some(w),
                    _ => None,
                }
            }
        });
        let killer = async {
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            let status = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
            assert!(status.is_ok_and(|s| s.success()), "kill -9");
        };
        let (results, ()) = tokio::join!(futures_util::future::join_all(writes), killer);
        results.into_iter().flatten().collect()
    });
    drop(server);
    assert!(
        !acked.is_empty() && acked.len() < 200,
        "the kill should land mid-way: {} acked",
        acked.len()
    );

    let server = serve(data.path());
    let base = server.base_url();
    block_on(async {
        let info = ok(&base, "GET", "/crash/info", None).await;
        let count = info["vectorCount"].as_u64().unwrap_or(0) as usize;
        assert!(
            count >= acked.len() * 100,
            "{count} stored, {} acknowledged",
            acked.len() * 100
        );
        assert_eq!(count % 100, 0, "a write is whole or absent: {count}");
        for w in &acked {
            let ids: Vec<String> = (0..100).map(|i| format!("w{w}-{i}")).collect();
            let got = ok(&base, "POST", "/crash/get_by_ids", j(json!({"ids": ids}))).await;
            let got = got.as_array().expect("vectors");
            assert_eq!(got.len(), 100, "write {w} was acknowledged");
            assert_eq!(got[7]["values"][0], (w * 100 + 7) as f64);
        }
    });
}

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
