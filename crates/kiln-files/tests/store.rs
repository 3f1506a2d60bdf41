//! The store on real files: streamed uploads read back whole, listing, owner scoping,
//! size and owner caps, replacing by id, and abandoned uploads.

mod common;

use std::sync::Arc;

use common::{contents, incoming, open, open_with, put, raw_db, read};
use kiln_files::{FileError, FileStore, Limits, ListQuery, Order, StoredFile, Upload};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<FileStore>();
    send::<Upload>();
};

#[test]
fn a_chunked_upload_reads_back_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    // Chunks around the write buffer's size, an empty one, all byte values.
    let data: Vec<u8> = (0..300_007u32).map(|i| (i * 7 + i / 256) as u8).collect();
    let mut up = store
        .upload("alice", "C:\\data\\train.jsonl", "fine-tune")
        .expect("upload");
    let mut at = 0;
    for size in [1, 0, 65_535, 65_536, 100_000, 3] {
        up.write(&data[at..at + size]).expect("write");
        at += size;
        assert_eq!(up.bytes(), at as u64);
    }
    up.write(&data[at..]).expect("write rest");
    assert!(contents(dir.path()).is_empty(), "visible before finish");
    let f = up.finish().expect("finish");

    assert!(f.id.starts_with("file-") && f.id.len() == 29, "{}", f.id);
    assert_eq!(f.owner, "alice");
    assert_eq!(f.filename, "train.jsonl");
    assert_eq!(f.purpose, "fine-tune");
    assert_eq!(f.bytes, data.len() as u64);
    assert!(f.created_at > 1_600_000_000, "{}", f.created_at);
    assert_eq!(store.get("alice", &f.id).expect("get"), Some(f.clone()));
    assert_eq!(read(&store, "alice", &f.id), data);
    let (meta, path) = store
        .content_path("alice", &f.id)
        .expect("content_path")
        .expect("found");
    assert_eq!(meta, f);
    assert_eq!(path, dir.path().join("files").join(&f.id));
    assert_eq!(std::fs::read(&path).expect("read path"), data);
    assert!(incoming(dir.path()).is_empty());
}

/// A form may send the purpose after the file: the contents stream first, and the
/// purpose set before `finish` is the one stored.
#[test]
fn the_purpose_may_be_set_after_the_contents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut up = store.upload("alice", "late.jsonl", "").expect("upload");
    up.write(b"{}\n").expect("write");
    up.set_purpose("batch");
    let f = up.finish().expect("finish");
    assert_eq!(f.purpose, "batch");
    assert_eq!(
        store.get("alice", &f.id).expect("get").map(|g| g.purpose),
        Some("batch".to_string())
    );
}

#[test]
fn an_empty_file_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let up = store
        .upload("alice", "empty.txt", "user_data")
        .expect("upload");
    let f = up.finish().expect("finish");
    assert_eq!(f.bytes, 0);
    assert_eq!(
        store.get("alice", &f.id).expect("get").map(|g| g.bytes),
        Some(0)
    );
    assert!(read(&store, "alice", &f.id).is_empty());
    assert_eq!(contents(dir.path()), vec![f.id]);
}

#[test]
fn bad_file_names_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for bad in ["", "some/dir/", "..", "a\0b"] {
        let err = store.upload("alice", bad, "batch").expect_err(bad);
        assert!(matches!(err, FileError::InvalidName(_)), "{bad:?}: {err}");
        assert!(
            !err.to_string().contains(&*dir.path().to_string_lossy()),
            "{err}"
        );
    }
    assert!(incoming(dir.path()).is_empty());
}

fn all(store: &FileStore, owner: &str, purpose: Option<&str>, order: Order) -> Vec<StoredFile> {
    let page = store
        .list(
            owner,
            &ListQuery {
                purpose: purpose.map(str::to_string),
                order,
                ..ListQuery::default()
            },
        )
        .expect("list");
    assert!(!page.has_more);
    page.data
}

fn pages(store: &FileStore, owner: &str, limit: usize, order: Order) -> Vec<Vec<StoredFile>> {
    let mut out: Vec<Vec<StoredFile>> = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(
                owner,
                &ListQuery {
                    purpose: None,
                    after: after.clone(),
                    limit,
                    order,
                },
            )
            .expect("list");
        after = page.data.last().map(|f| f.id.clone());
        let more = page.has_more;
        out.push(page.data);
        if !more {
            return out;
        }
        assert!(out.len() < 20, "paging does not end");
    }
}

#[test]
fn list_filters_by_purpose_orders_by_time_then_id_and_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut files: Vec<StoredFile> = (0..7)
        .map(|i| {
            let purpose = if i % 2 == 0 { "batch" } else { "assistants" };
            put(&store, "alice", &format!("f{i}.jsonl"), purpose, b"x")
        })
        .collect();
    put(&store, "bob", "theirs.jsonl", "batch", b"y");
    // Times that disagree with upload order and with id order, with ties.
    let db = raw_db(dir.path());
    for (i, f) in files.iter_mut().enumerate() {
        f.created_at = 1_000 + (i as u64 * 5) % 3;
        db.execute(
            "UPDATE files SET created_at = ?1 WHERE id = ?2",
            rusqlite::params![f.created_at as i64, f.id],
        )
        .expect("set time");
    }
    files.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    let mut newest_first = files.clone();
    newest_first.reverse();

    assert_eq!(all(&store, "alice", None, Order::Asc), files);
    assert_eq!(all(&store, "alice", None, Order::Desc), newest_first);
    let batch: Vec<StoredFile> = files
        .iter()
        .filter(|f| f.purpose == "batch")
        .cloned()
        .collect();
    assert_eq!(batch.len(), 4);
    assert_eq!(all(&store, "alice", Some("batch"), Order::Asc), batch);
    assert!(all(&store, "alice", Some("vision"), Order::Asc).is_empty());

    let asc = pages(&store, "alice", 3, Order::Asc);
    assert_eq!(asc.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    assert_eq!(asc.concat(), files);
    let desc = pages(&store, "alice", 2, Order::Desc);
    assert_eq!(desc.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2, 1]);
    assert_eq!(desc.concat(), newest_first);
    // A page that ends exactly at the last file says no more follow.
    assert_eq!(pages(&store, "alice", 7, Order::Asc), vec![files.clone()]);
    let zero = store
        .list(
            "alice",
            &ListQuery {
                limit: 0,
                ..ListQuery::default()
            },
        )
        .expect("list");
    assert!(zero.data.is_empty() && zero.has_more);

    // The cursor is scoped too: another owner's id, or an unknown one, gives nothing.
    let bobs = all(&store, "bob", None, Order::Asc);
    assert_eq!(bobs.len(), 1);
    for after in [bobs[0].id.clone(), "file-unknown".into(), "../x".into()] {
        let page = store
            .list(
                "alice",
                &ListQuery {
                    after: Some(after.clone()),
                    ..ListQuery::default()
                },
            )
            .expect("list");
        assert!(page.data.is_empty() && !page.has_more, "{after}");
    }
}

#[test]
fn another_owners_file_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let f = put(&store, "alice", "a.txt", "batch", b"secret");
    assert_eq!(store.get("bob", &f.id).expect("get"), None);
    assert!(store.open_content("bob", &f.id).expect("open").is_none());
    assert!(store.content_path("bob", &f.id).expect("path").is_none());
    assert!(all(&store, "bob", None, Order::Asc).is_empty());
    assert!(!store.delete("bob", &f.id).expect("delete"));
    let err = store
        .upload_as(&f.id, "bob", "b.txt", "batch")
        .expect_err("taken");
    assert!(matches!(err, FileError::IdTaken(_)), "{err}");
    assert_eq!(read(&store, "alice", &f.id), b"secret");

    assert!(store.delete("alice", &f.id).expect("delete"));
    assert_eq!(store.get("alice", &f.id).expect("get"), None);
    assert!(
        contents(dir.path()).is_empty(),
        "contents left after delete"
    );
    assert!(!store.delete("alice", &f.id).expect("delete again"));
}

fn small(file: u64, bytes: u64, files: u64) -> Limits {
    Limits {
        max_file_bytes: file,
        max_bytes_per_owner: bytes,
        max_files_per_owner: files,
    }
}

#[test]
fn too_large_removes_the_partial_file_and_stores_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(dir.path(), small(10, 1_000, 100));
    assert_eq!(store.limits().max_file_bytes, 10);
    let exact = put(&store, "alice", "ten.bin", "batch", &[1; 10]);
    assert_eq!(exact.bytes, 10);

    let mut up = store.upload("alice", "big.bin", "batch").expect("upload");
    up.write(&[2; 6]).expect("first chunk");
    assert_eq!(incoming(dir.path()).len(), 1);
    let err = up.write(&[2; 5]).expect_err("past the limit");
    assert!(matches!(err, FileError::TooLarge { limit: 10 }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("10 bytes") && !msg.contains(&*dir.path().to_string_lossy()),
        "{msg}"
    );
    assert!(incoming(dir.path()).is_empty(), "partial file left");
    assert!(matches!(up.write(b"x"), Err(FileError::TooLarge { .. })));
    assert!(matches!(up.finish(), Err(FileError::TooLarge { .. })));
    assert_eq!(all(&store, "alice", None, Order::Asc), vec![exact.clone()]);
    assert_eq!(contents(dir.path()), vec![exact.id]);
}

#[test]
fn owner_caps_count_files_and_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(dir.path(), small(100, 10, 2));
    put(&store, "alice", "a", "batch", &[0; 6]);
    // Over the byte cap: refused at finish, nothing left behind.
    let mut up = store.upload("alice", "b", "batch").expect("upload");
    up.write(&[0; 5]).expect("write");
    let err = up.finish().expect_err("bytes cap");
    assert!(
        matches!(
            err,
            FileError::OwnerFull {
                what: "bytes",
                limit: 10
            }
        ),
        "{err}"
    );
    assert!(
        !err.to_string().contains(&*dir.path().to_string_lossy()),
        "{err}"
    );
    assert!(incoming(dir.path()).is_empty());
    assert_eq!(contents(dir.path()).len(), 1);
    // Exactly at the cap is fine; other owners have their own.
    put(&store, "alice", "c", "batch", &[0; 4]);
    put(&store, "bob", "d", "batch", &[0; 10]);

    // Two files is the cap: a third is refused when it starts...
    let err = store.upload("alice", "e", "batch").expect_err("files cap");
    assert!(
        matches!(
            err,
            FileError::OwnerFull {
                what: "files",
                limit: 2
            }
        ),
        "{err}"
    );
    // ...and, when two uploads race for the last place, at finish.
    let racing = open_with(&dir.path().join("race"), small(100, 100, 2));
    put(&racing, "alice", "a", "batch", b"1");
    let first = racing.upload("alice", "b", "batch").expect("upload");
    let second = racing.upload("alice", "c", "batch").expect("upload");
    first.finish().expect("first takes the place");
    let err = second.finish().expect_err("no place left");
    assert!(
        matches!(
            err,
            FileError::OwnerFull {
                what: "files",
                limit: 2
            }
        ),
        "{err}"
    );
    assert_eq!(all(&racing, "alice", None, Order::Asc).len(), 2);
    assert!(incoming(&dir.path().join("race")).is_empty());
}

#[test]
fn concurrent_uploads_never_pass_the_file_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open_with(dir.path(), small(100, 1_000, 10)));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let ups: Vec<Upload> = (0..5)
                    .filter_map(|i| store.upload("alice", &format!("{t}-{i}"), "batch").ok())
                    .collect();
                ups.into_iter()
                    .map(Upload::finish)
                    .filter(Result::is_ok)
                    .count()
            })
        })
        .collect();
    let stored: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    assert_eq!(stored, 10);
    assert_eq!(all(&store, "alice", None, Order::Asc).len(), 10);
    assert_eq!(contents(dir.path()).len(), 10);
    assert!(incoming(dir.path()).is_empty());
}

#[test]
fn upload_as_twice_replaces_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One file and 10 bytes: the replaced file must not count against either.
    let store = open_with(dir.path(), small(100, 10, 1));
    let id = "file-batch_abc123-output";
    let mut up = store
        .upload_as(id, "alice", "out.jsonl", "batch_output")
        .expect("upload_as");
    up.write(b"first!").expect("write");
    assert_eq!(up.finish().expect("finish").bytes, 6);

    let mut up = store
        .upload_as(id, "alice", "out2.jsonl", "batch_output")
        .expect("again");
    up.write(b"second!!").expect("write");
    let f = up.finish().expect("replace");
    assert_eq!(
        (f.id.as_str(), f.bytes, f.filename.as_str()),
        (id, 8, "out2.jsonl")
    );
    assert_eq!(all(&store, "alice", None, Order::Asc), vec![f.clone()]);
    assert_eq!(read(&store, "alice", id), b"second!!");
    assert_eq!(contents(dir.path()), vec![id.to_string()]);

    // A replacement past the byte cap is refused and the stored file is untouched.
    let mut up = store
        .upload_as(id, "alice", "big.jsonl", "batch_output")
        .expect("third");
    up.write(&[0; 11]).expect("write");
    let err = up.finish().expect_err("over the cap");
    assert!(
        matches!(err, FileError::OwnerFull { what: "bytes", .. }),
        "{err}"
    );
    assert_eq!(store.get("alice", id).expect("get"), Some(f));
    assert_eq!(read(&store, "alice", id), b"second!!");

    for bad in ["batch_abc", "file-../x", "file-"] {
        let err = store.upload_as(bad, "alice", "x", "batch").expect_err(bad);
        assert!(matches!(err, FileError::InvalidId(_)), "{bad}: {err}");
    }
}

#[test]
fn a_dropped_upload_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut up = store.upload("alice", "a.txt", "batch").expect("upload");
    let id = up.id().to_string();
    up.write(&[7; 100_000]).expect("write");
    assert_eq!(incoming(dir.path()).len(), 1);
    drop(up);
    assert!(incoming(dir.path()).is_empty(), "partial file left");
    assert!(contents(dir.path()).is_empty());
    assert_eq!(store.get("alice", &id).expect("get"), None);
    assert!(all(&store, "alice", None, Order::Asc).is_empty());
}
