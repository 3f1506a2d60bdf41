//! The Vectorize API end to end, on a real server process with real embeddings
//! (all-minilm-l6-v2): indexes and metadata indexes, NDJSON upserts, semantic queries
//! with filters, reads and deletes by id; a SIGKILL right after acknowledged writes
//! loses none of them; bad input gets a 400 (or 404) in Cloudflare's envelope naming the
//! problem; one key never sees another's indexes. (A restart's saved graph:
//! `e2e_vectorize_restart`.)

mod support;
mod vectorize_common;

use serde_json::{json, Value};
use support::*;
use vectorize_common::*;
// This suite's `call` (Cloudflare's envelope), not the shared support one.
use vectorize_common::call;

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
