//! Vector stores and `file_search` end to end, on real server processes with real
//! embeddings (all-minilm-l6-v2) and a real chat model (qwen2.5-coder-0.5b-instruct):
//!
//! - the official `openai` SDK (`python/vector_store_checks.py`): upload, attach and
//!   poll, file batches, search with filters, chunking, paging, attribute updates,
//!   detach and delete, unreadable files, per-key isolation, 400s naming the field,
//!   and `file_search` in a response and in a chat completion;
//! - a crash (SIGKILL) in the middle of a file's ingestion: the restarted server
//!   ingests it again to the same chunks, and what was stored survives;
//! - deleting an uploaded file takes it out of its stores (list, file, content,
//!   search), and a delete cut by a SIGKILL is finished by the next start.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::python::{assert_checks_passed, run_script_with};
use support::*;

const MINILM: &str = "all-minilm-l6-v2";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const KEY: &str = "sk-stores";

#[test]
fn python_vector_store_checks_pass() {
    kiln_testkit::model_dir(QWEN);
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy();
    let server = start_model(
        MINILM,
        &[
            "--model",
            QWEN,
            "--data-dir",
            &dir,
            "--kv-cache-memory",
            "256MiB",
            "--api-key",
            KEY,
            "--api-key",
            "sk-other",
        ],
    );
    let out = run_script_with(
        "vector_store_checks.py",
        &server.base_url(),
        QWEN,
        &[KEY, "sk-other"],
        Duration::from_secs(1200),
    );
    assert_checks_passed(&out, "vector store", &server.log_tail());
}

fn serve(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy();
    start_model(MINILM, &["--data-dir", &dir, "--api-key", KEY])
}

async fn json_call(base: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let (status, v) = call(base, method, path, Some(KEY), body.as_ref()).await;
    assert_eq!(status, 200, "{path}: {v}");
    v
}

async fn upload(base: &str, name: &str, text: String) -> String {
    upload_file(base, KEY, name, "assistants", text).await
}

async fn file_status(base: &str, vs: &str, file: &str) -> Value {
    json_call(
        base,
        reqwest::Method::GET,
        &format!("/v1/vector_stores/{vs}/files/{file}"),
        None,
    )
    .await
}

async fn wait_done(base: &str, vs: &str, file: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let f = file_status(base, vs, file).await;
        if f["status"] != "in_progress" {
            return f;
        }
        assert!(Instant::now() < deadline, "ingestion stuck: {f}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A text long enough that its ingestion takes seconds: numbered facts about kilns.
fn long_text() -> String {
    (0..3000)
        .map(|i| {
            format!(
                "Kiln {i} is fired to {} degrees by crew {}.",
                900 + i,
                i % 17
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn search(base: &str, vs: &str, query: &str) -> Vec<Value> {
    let page = json_call(
        base,
        reqwest::Method::POST,
        &format!("/v1/vector_stores/{vs}/search"),
        Some(json!({"query": query, "max_num_results": 50})),
    )
    .await;
    page["data"].as_array().cloned().unwrap_or_default()
}

#[test]
fn ingestion_cut_by_a_crash_resumes_to_the_same_chunks() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve(data.path());
    let (vs, file, reference) = block_on(async {
        let base = server.base_url();
        let small = upload(&base, "small.md", "Ember is the salamander mascot.".into()).await;
        let store = json_call(
            &base,
            reqwest::Method::POST,
            "/v1/vector_stores",
            Some(json!({"name": "crash", "file_ids": [small]})),
        )
        .await;
        let vs = store["id"].as_str().expect("id").to_string();
        assert_eq!(wait_done(&base, &vs, &small).await["status"], "completed");
        // The same long file ingested once without a crash, in a store of its own, to
        // compare against.
        let twin = upload(&base, "twin.txt", long_text()).await;
        let other = json_call(
            &base,
            reqwest::Method::POST,
            "/v1/vector_stores",
            Some(json!({"name": "reference", "file_ids": [twin]})),
        )
        .await;
        let other = other["id"].as_str().expect("id").to_string();
        let reference = wait_done(&base, &other, &twin).await;
        assert_eq!(reference["status"], "completed", "{reference}");
        let file = upload(&base, "long.txt", long_text()).await;
        let f = json_call(
            &base,
            reqwest::Method::POST,
            &format!("/v1/vector_stores/{vs}/files"),
            Some(json!({"file_id": file})),
        )
        .await;
        assert_eq!(f["status"], "in_progress", "{f}");
        // Let it get going, then crash while it is still in progress.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let f = file_status(&base, &vs, &file).await;
        assert_eq!(
            f["status"], "in_progress",
            "ingestion ended too soon to crash: {f}"
        );
        (vs, file, reference)
    });
    drop(server);

    let server = serve(data.path());
    block_on(async {
        let base = server.base_url();
        let f = wait_done(&base, &vs, &file).await;
        assert_eq!(f["status"], "completed", "{f}");
        // The same chunks as the uncut ingestion: its usage counts text and vectors.
        assert_eq!(
            f["usage_bytes"], reference["usage_bytes"],
            "{f} vs {reference}"
        );
        let hits = search(&base, &vs, "Kiln 1234 is fired to 2134 degrees").await;
        let texts: Vec<&str> = hits
            .iter()
            .map(|h| h["content"][0]["text"].as_str().unwrap_or_default())
            .collect();
        let mut unique = texts.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            texts.len(),
            "a chunk came back twice: {texts:?}"
        );
        assert!(
            hits.iter()
                .all(|h| h["filename"] == "long.txt" || h["filename"] == "small.md"),
            "{hits:?}"
        );
        // What was stored before the crash is still there.
        let hits = search(&base, &vs, "Who is the mascot?").await;
        assert!(hits.iter().any(|h| h["filename"] == "small.md"), "{hits:?}");
        let store = json_call(
            &base,
            reqwest::Method::GET,
            &format!("/v1/vector_stores/{vs}"),
            None,
        )
        .await;
        assert_eq!(store["file_counts"]["completed"], 2, "{store}");
        assert_eq!(store["status"], "completed", "{store}");
    });
}

/// `POST /v1/files` with the form's fields in the order given (`file` carries `text`
/// as `name`): the status and body.
async fn upload_form(base: &str, name: &str, text: &str, fields: &[&str]) -> (u16, Value) {
    let mut form = reqwest::multipart::Form::new();
    for field in fields {
        form = match *field {
            "file" => form.part(
                "file",
                reqwest::multipart::Part::text(text.to_string()).file_name(name.to_string()),
            ),
            other => form.text(other.to_string(), "assistants"),
        };
    }
    let resp = client()
        .post(format!("{base}/v1/files"))
        .bearer_auth(KEY)
        .multipart(form)
        .send()
        .await
        .expect("upload");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json"))
}

async fn status_of(base: &str, method: reqwest::Method, path: &str) -> u16 {
    call(base, method, path, Some(KEY), None).await.0
}

/// The ids of the store's files.
async fn store_files(base: &str, vs: &str) -> Vec<String> {
    let page = json_call(
        base,
        reqwest::Method::GET,
        &format!("/v1/vector_stores/{vs}/files"),
        None,
    )
    .await;
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|f| f["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Everything of a deleted file is gone from the store: not listed, not found, no
/// content, no search hit, not counted; `left` is what the store should still hold.
async fn assert_gone(base: &str, vs: &str, file: &str, query: &str, left: &[&str]) {
    let get = reqwest::Method::GET;
    assert_eq!(
        status_of(base, get.clone(), &format!("/v1/files/{file}")).await,
        404
    );
    let mut listed = store_files(base, vs).await;
    listed.sort_unstable();
    let mut left = left.to_vec();
    left.sort_unstable();
    assert_eq!(listed, left);
    let at = format!("/v1/vector_stores/{vs}/files/{file}");
    assert_eq!(status_of(base, get.clone(), &at).await, 404);
    assert_eq!(status_of(base, get, &format!("{at}/content")).await, 404);
    let hits = search(base, vs, query).await;
    assert!(!hits.is_empty(), "the other files still answer");
    assert!(hits.iter().all(|h| h["file_id"] != file), "{hits:?}");
    let store = json_call(
        base,
        reqwest::Method::GET,
        &format!("/v1/vector_stores/{vs}"),
        None,
    )
    .await;
    assert_eq!(store["file_counts"]["total"], left.len(), "{store}");
}

/// `DELETE /v1/files/{id}` takes the file out of every vector store it was attached to;
/// a `kill -9` in the middle of such a delete is finished by the next start. Also the
/// upload form with `file` before `purpose`, and without `purpose`.
#[test]
fn deleting_a_file_takes_it_out_of_its_stores_even_across_a_crash() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve(data.path());
    let (vs, keep, cut) = block_on(async {
        let base = server.base_url();
        // `file` before `purpose`, as OpenAI takes it too.
        let lighthouse = "The lighthouse keeper polishes the great lamp every dusk.";
        let (s, v) = upload_form(&base, "gone.md", lighthouse, &["file", "purpose"]).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["purpose"], "assistants", "{v}");
        let gone = v["id"].as_str().expect("id").to_string();
        // No `purpose`: a 400 that names it.
        let (s, v) = upload_form(&base, "x.md", "x", &["file"]).await;
        assert_eq!((s, &v["error"]["param"]), (400, &json!("purpose")), "{v}");
        let keep = upload(&base, "keep.md", "Ember is the salamander mascot.".into()).await;
        let cut = upload(
            &base,
            "cut.md",
            "Bramble the badger guards the cellar door at night.".into(),
        )
        .await;
        let store = json_call(
            &base,
            reqwest::Method::POST,
            "/v1/vector_stores",
            Some(json!({"name": "deletes", "file_ids": [gone, keep, cut]})),
        )
        .await;
        let vs = store["id"].as_str().expect("id").to_string();
        for f in [&gone, &keep, &cut] {
            assert_eq!(wait_done(&base, &vs, f).await["status"], "completed");
        }
        let query = "Who polishes the lighthouse lamp?";
        let hits = search(&base, &vs, query).await;
        assert_eq!(hits[0]["file_id"], gone.as_str(), "{hits:?}");

        let (s, v) = call(
            &base,
            reqwest::Method::DELETE,
            &format!("/v1/files/{gone}"),
            Some(KEY),
            None,
        )
        .await;
        assert_eq!((s, &v["deleted"]), (200, &json!(true)), "{v}");
        assert_gone(&base, &vs, &gone, query, &[keep.as_str(), cut.as_str()]).await;
        (vs, keep, cut)
    });
    drop(server); // SIGKILL

    // A kill -9 right after a delete's first transaction: the tombstone written, the
    // file detached and its vectors queued, but the file and its vectors still there.
    let db = data
        .path()
        .join("vector_stores")
        .join("vector_stores.sqlite3");
    let db = rusqlite::Connection::open(db).expect("the vector-store database");
    db.execute_batch(&format!(
        "PRAGMA foreign_keys = ON;
         BEGIN;
         INSERT INTO file_deletes (owner, file_id)
             SELECT owner, file_id FROM store_files WHERE file_id = '{cut}';
         INSERT INTO removals (owner, store_id, file_seq, chunks)
             SELECT owner, store_id, seq, chunks FROM store_files WHERE file_id = '{cut}';
         DELETE FROM store_files WHERE file_id = '{cut}';
         COMMIT;"
    ))
    .expect("the state the delete's first transaction commits");
    drop(db);

    let server = serve(data.path());
    block_on(async {
        let base = server.base_url();
        let query = "Who guards the cellar door?";
        assert_gone(&base, &vs, &cut, query, &[keep.as_str()]).await;
    });
}
