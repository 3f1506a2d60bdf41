//! The vector-store service over a real file store and vector index, with an embedder
//! of word hashes that can be slowed down: files ingested and searched; a file
//! detached, a store deleted or a batch cancelled while it is ingested keeps no
//! vectors; a service cut mid-file resumes it to the same chunks.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use kiln_api::vector_stores::{AttachFile, CreateFileBatch, CreateVectorStore};
use kiln_api::Caller;
use kiln_files::FileStore;
use kiln_rag::{index_of, EmbedError, Embedder, EmbedderInfo, Search, VectorStores};
use kiln_vectors::{GraphParams, Limits, VectorDb};

const DIMS: usize = 32;

/// Words hashed into `DIMS` buckets, normalised; `delay` per call to `embed`.
struct Hashing {
    delay: Duration,
    calls: AtomicUsize,
}

impl Embedder for Hashing {
    fn info(&self) -> BoxFuture<'static, Result<EmbedderInfo, EmbedError>> {
        Box::pin(async {
            Ok(EmbedderInfo {
                model: "hashing".into(),
                dimensions: DIMS,
                max_text_tokens: 200,
            })
        })
    }

    fn token_spans(
        &self,
        text: Arc<str>,
    ) -> BoxFuture<'static, Result<Vec<Range<usize>>, EmbedError>> {
        Box::pin(async move {
            let mut spans = Vec::new();
            let mut start = None;
            for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
                match (c.is_whitespace(), start) {
                    (false, None) => start = Some(i),
                    (true, Some(s)) => {
                        spans.push(s..i);
                        start = None;
                    }
                    _ => {}
                }
            }
            Ok(spans)
        })
    }

    fn embed(
        &self,
        _: &Caller,
        texts: Vec<String>,
        _: bool,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(texts.iter().map(|t| hash(t)).collect())
        })
    }
}

fn hash(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIMS];
    for w in text.split_whitespace() {
        let h = w
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        v[h as usize % DIMS] += 1.0;
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

struct Node {
    stores: VectorStores,
    vectors: VectorDb,
    files: Arc<FileStore>,
    embedder: Arc<Hashing>,
}

fn open(dir: &Path, delay: Duration) -> Node {
    let vectors = VectorDb::open(
        &dir.join("vectors"),
        Limits::default(),
        GraphParams::default(),
    )
    .expect("vectors");
    let files = Arc::new(FileStore::open(dir, Default::default()).expect("files"));
    let embedder = Arc::new(Hashing {
        delay,
        calls: AtomicUsize::new(0),
    });
    let stores = VectorStores::open(
        &dir.join("stores"),
        vectors.clone(),
        files.clone(),
        embedder.clone(),
        Default::default(),
    )
    .expect("stores");
    stores.start();
    Node {
        stores,
        vectors,
        files,
        embedder,
    }
}

fn caller() -> Caller {
    Caller {
        key_id: "key_a".into(),
        label: None,
    }
}

fn upload(files: &FileStore, name: &str, text: &str) -> String {
    let mut up = files.upload("key_a", name, "assistants").expect("upload");
    up.write(text.as_bytes()).expect("write");
    up.finish().expect("finish").id
}

/// `words` words: numbered facts, so every chunk differs.
fn long_text(words: usize) -> String {
    (0..words / 4)
        .map(|i| format!("fact {i} is true."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn vector_count(node: &Node, store: &str) -> u64 {
    let (owner, name) = index_of("key_a", store);
    node.vectors
        .info(&owner, &name)
        .map(|i| i.vector_count)
        .unwrap_or(0)
}

async fn wait_status(node: &Node, store: &str, file: &str, not: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = node.stores.get_file("key_a", store, file).expect("file");
        if f.status != not {
            return f.status;
        }
        assert!(Instant::now() < deadline, "stuck at {not}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_calls(node: &Node, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.embedder.calls.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "the embedder was never called");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn new_store(node: &Node) -> String {
    node.stores
        .create(&caller(), CreateVectorStore::default())
        .await
        .expect("store")
        .id
}

async fn attach(node: &Node, store: &str, file: &str) {
    let req = AttachFile {
        file_id: Some(file.into()),
        ..AttachFile::default()
    };
    node.stores
        .attach(&caller(), store, req)
        .await
        .expect("attach");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_chunked_embedded_and_found() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = open(dir.path(), Duration::ZERO);
    let store = new_store(&node).await;
    let cats = upload(&node.files, "cats.txt", "cats purr and chase mice");
    let long = upload(&node.files, "long.txt", &long_text(1000));
    attach(&node, &store, &cats).await;
    attach(&node, &store, &long).await;
    assert_eq!(
        wait_status(&node, &store, &long, "in_progress").await,
        "completed"
    );
    assert_eq!(
        wait_status(&node, &store, &cats, "in_progress").await,
        "completed"
    );
    // 1000 words in windows of 200 stepping 150: 7 chunks, and 1 for the cats.
    assert_eq!(vector_count(&node, &store), 8);
    let search =
        Search::parse(Some(&"chase mice".into()), None, Some(3), None, "").expect("search");
    let hits = node
        .stores
        .search(&caller(), std::slice::from_ref(&store), &search)
        .await
        .expect("hits");
    assert_eq!(hits[0].filename, "cats.txt", "{hits:?}");
    node.stores
        .detach("key_a", &store, &long)
        .await
        .expect("detach");
    assert_eq!(vector_count(&node, &store), 1);
}

/// Waits until the ingest worker has stopped or finished every attached file.
async fn idle(node: &Node) {
    tokio::time::timeout(Duration::from_secs(60), node.stores.ingest_idle())
        .await
        .expect("the ingest worker catches up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_file_while_it_is_ingested_leaves_no_vectors() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = open(dir.path(), Duration::from_millis(30));
    // Detached mid-file.
    let store = new_store(&node).await;
    let file = upload(&node.files, "a.txt", &long_text(20_000));
    attach(&node, &store, &file).await;
    wait_calls(&node, 3).await;
    node.stores
        .detach("key_a", &store, &file)
        .await
        .expect("detach");
    idle(&node).await;
    assert_eq!(vector_count(&node, &store), 0);
    // Cancelled mid-batch: the file being ingested and those waiting.
    let files: Vec<String> = (0..3)
        .map(|i| upload(&node.files, &format!("b{i}.txt"), &long_text(20_000)))
        .collect();
    let calls = node.embedder.calls.load(Ordering::SeqCst);
    let batch = node
        .stores
        .create_batch(
            &caller(),
            &store,
            CreateFileBatch {
                file_ids: Some(files.clone()),
                ..Default::default()
            },
        )
        .await
        .expect("batch");
    wait_calls(&node, calls + 3).await;
    let cancelled = node
        .stores
        .cancel_batch("key_a", &store, &batch.id)
        .await
        .expect("cancel");
    assert_eq!(cancelled.status, "cancelled");
    assert_eq!(cancelled.file_counts.cancelled, 3, "{cancelled:?}");
    idle(&node).await;
    assert_eq!(vector_count(&node, &store), 0);
    // A store deleted mid-file: its index is gone, and a new store starts empty.
    let file = upload(&node.files, "c.txt", &long_text(20_000));
    attach(&node, &store, &file).await;
    let calls = node.embedder.calls.load(Ordering::SeqCst);
    wait_calls(&node, calls + 3).await;
    node.stores.delete("key_a", &store).await.expect("delete");
    let fresh = new_store(&node).await;
    let small = upload(&node.files, "d.txt", "one small file");
    attach(&node, &fresh, &small).await;
    assert_eq!(
        wait_status(&node, &fresh, &small, "in_progress").await,
        "completed"
    );
    assert_eq!(vector_count(&node, &fresh), 1);
    let (owner, name) = index_of("key_a", &store);
    assert!(
        node.vectors.info(&owner, &name).is_err(),
        "the deleted store's index is gone"
    );
}

#[test]
fn a_service_cut_mid_file_resumes_it_to_the_same_chunks() {
    let dir = tempfile::tempdir().expect("tmp");
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("rt")
    };
    let first = rt();
    let (store, file) = first.block_on(async {
        let node = open(dir.path(), Duration::from_millis(300));
        let store = new_store(&node).await;
        let file = upload(&node.files, "a.txt", &long_text(6_000));
        attach(&node, &store, &file).await;
        // Cut inside the second of its two embedding batches.
        wait_calls(&node, 2).await;
        assert_eq!(
            node.stores
                .get_file("key_a", &store, &file)
                .expect("file")
                .status,
            "in_progress"
        );
        (store, file)
    });
    // The cut: every task stops where it is; the service and its files close.
    drop(first);
    rt().block_on(async {
        let node = open(dir.path(), Duration::ZERO);
        assert_eq!(
            wait_status(&node, &store, &file, "in_progress").await,
            "completed"
        );
        // 6,000 words in windows of 200 stepping 150: 40 chunks, each once.
        assert_eq!(vector_count(&node, &store), 40);
    });
}

async fn search_files(node: &Node, stores: &[String], query: &str) -> Vec<String> {
    let search = Search::parse(Some(&query.into()), None, Some(50), None, "").expect("search");
    node.stores
        .search(&caller(), stores, &search)
        .await
        .expect("hits")
        .into_iter()
        .map(|h| h.file_id)
        .collect()
}

/// The Files API's delete: the file leaves every store it was attached to (rows, text,
/// vectors), including one still being ingested, and cannot be attached again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_uploaded_file_removes_it_from_every_store() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = open(dir.path(), Duration::from_millis(30));
    let (one, two) = (new_store(&node).await, new_store(&node).await);
    let cats = upload(&node.files, "cats.txt", "cats purr and chase mice");
    let dogs = upload(&node.files, "dogs.txt", "dogs bark and chase cats");
    for store in [&one, &two] {
        attach(&node, store, &cats).await;
        attach(&node, store, &dogs).await;
        for f in [&cats, &dogs] {
            assert_eq!(
                wait_status(&node, store, f, "in_progress").await,
                "completed"
            );
        }
        assert_eq!(vector_count(&node, store), 2);
    }
    let both = [one.clone(), two.clone()];
    assert!(search_files(&node, &both, "purr").await.contains(&cats));

    assert!(node
        .stores
        .delete_uploaded_file("key_a", &cats)
        .await
        .expect("delete"));
    assert!(node.files.get("key_a", &cats).expect("get").is_none());
    for store in [&one, &two] {
        assert!(node.stores.get_file("key_a", store, &cats).is_err());
        assert!(node.stores.file_content("key_a", store, &cats).is_err());
        let (listed, _) = node
            .stores
            .list_files("key_a", store, None, &Default::default())
            .expect("list");
        let ids: Vec<&str> = listed.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, [dogs.as_str()]);
        assert_eq!(
            vector_count(&node, store),
            1,
            "only the dogs' chunk is left"
        );
    }
    let found = search_files(&node, &both, "cats purr and chase mice").await;
    assert!(!found.is_empty() && !found.contains(&cats), "{found:?}");
    // Gone means gone: a second delete finds nothing, and it can't be attached again.
    assert!(!node
        .stores
        .delete_uploaded_file("key_a", &cats)
        .await
        .expect("delete"));
    let req = AttachFile {
        file_id: Some(cats.clone()),
        ..AttachFile::default()
    };
    assert!(node.stores.attach(&caller(), &one, req).await.is_err());

    // Deleted while it is being ingested: nothing of it stays.
    let slow = open_slow_file(&node, &one).await;
    assert!(node
        .stores
        .delete_uploaded_file("key_a", &slow)
        .await
        .expect("delete"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(vector_count(&node, &one), 1);
    assert!(node.stores.get_file("key_a", &one, &slow).is_err());
}

/// A long file attached to `store`, its ingestion under way; its id.
async fn open_slow_file(node: &Node, store: &str) -> String {
    let file = upload(&node.files, "slow.txt", &long_text(20_000));
    let calls = node.embedder.calls.load(Ordering::SeqCst);
    attach(node, store, &file).await;
    wait_calls(node, calls + 2).await;
    file
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt")
}

/// A store with `cats.txt` ingested and `dogs.txt` beside it, on a service that is then
/// shut down; the store's and the cats file's ids.
fn ingested_then_stopped(dir: &Path) -> (String, String) {
    runtime().block_on(async {
        let node = open(dir, Duration::ZERO);
        let store = new_store(&node).await;
        let cats = upload(&node.files, "cats.txt", "cats purr and chase mice");
        let dogs = upload(&node.files, "dogs.txt", "dogs bark and chase cats");
        attach(&node, &store, &cats).await;
        attach(&node, &store, &dogs).await;
        for f in [&cats, &dogs] {
            assert_eq!(
                wait_status(&node, &store, f, "in_progress").await,
                "completed"
            );
        }
        assert_eq!(vector_count(&node, &store), 2);
        (store, cats)
    })
}

/// After the reopen: `cats` is gone from the file store, the store and its index; the
/// dogs file is untouched.
fn assert_only_dogs_left(dir: &Path, store: &str, cats: &str) {
    runtime().block_on(async {
        let node = open(dir, Duration::ZERO);
        assert!(node.files.get("key_a", cats).expect("get").is_none());
        let (listed, _) = node
            .stores
            .list_files("key_a", store, None, &Default::default())
            .expect("list");
        let names: Vec<String> = listed
            .iter()
            .map(|f| {
                node.files
                    .get("key_a", &f.id)
                    .expect("get")
                    .expect("file")
                    .filename
            })
            .collect();
        assert_eq!(names, ["dogs.txt"]);
        assert_eq!(vector_count(&node, store), 1, "the cats' vector is gone");
        let found = search_files(&node, &[store.to_string()], "cats purr").await;
        assert!(!found.contains(&cats.to_string()), "{found:?}");
        let db =
            rusqlite::Connection::open(dir.join("stores").join(kiln_rag::DB_FILE)).expect("db");
        let left: i64 = db
            .query_row(
                "SELECT (SELECT COUNT(*) FROM removals) + (SELECT COUNT(*) FROM file_deletes)",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(left, 0, "nothing stays queued");
    });
}

/// A `kill -9` right after a delete's first transaction (tombstone written, the file
/// detached, its vectors queued) and before the file or its vectors went: the next open
/// finishes the delete.
#[test]
fn a_file_delete_cut_by_a_crash_is_finished_at_the_next_open() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, cats) = ingested_then_stopped(dir.path());
    // The state that transaction commits, written as it writes it.
    let db =
        rusqlite::Connection::open(dir.path().join("stores").join(kiln_rag::DB_FILE)).expect("db");
    db.execute_batch("PRAGMA foreign_keys = ON").expect("fk");
    db.execute(
        "INSERT INTO file_deletes (owner, file_id) VALUES ('key_a', ?1)",
        [&cats],
    )
    .expect("tombstone");
    db.execute(
        "INSERT INTO removals (owner, store_id, file_seq, chunks)
         SELECT owner, store_id, seq, chunks FROM store_files WHERE file_id = ?1",
        [&cats],
    )
    .expect("queue");
    db.execute("DELETE FROM store_files WHERE file_id = ?1", [&cats])
        .expect("detach");
    drop(db);
    assert_only_dogs_left(dir.path(), &store, &cats);
}

/// A file deleted from the file store alone (as a kiln before this one did) leaves its
/// attachments behind; the next open detaches them.
#[test]
fn attachments_of_a_file_deleted_elsewhere_are_removed_at_open() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, cats) = ingested_then_stopped(dir.path());
    let files = FileStore::open(dir.path(), Default::default()).expect("files");
    assert!(files.delete("key_a", &cats).expect("delete"));
    drop(files);
    assert_only_dogs_left(dir.path(), &store, &cats);
}
