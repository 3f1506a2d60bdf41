//! What survives reopening and what is swept then, the directory lock, and ids that
//! try to name something outside the contents directory.

mod common;

use std::path::Path;

use common::{contents, incoming, open, put, raw_db, read};
use kiln_files::{FileError, FileStore, Limits};

#[test]
fn files_survive_reopening_and_crash_leftovers_are_swept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = {
        let store = open(dir.path());
        let kept = put(&store, "alice", "keep.jsonl", "batch", b"kept contents");
        // Another process cannot use the directory while this store has it.
        let err = FileStore::open(dir.path(), Limits::default()).expect_err("locked");
        assert!(matches!(err, FileError::Lock(_)), "{err}");
        kept
    };
    let files = dir.path().join("files");
    // A crash mid-upload, one between writing contents and their row, and one between
    // deleting a row and its contents.
    std::fs::write(files.join("incoming/file-abc.part"), b"half").expect("stray");
    std::fs::create_dir(files.join("incoming/junk")).expect("stray dir");
    std::fs::write(files.join("incoming/junk/x"), b"x").expect("stray in dir");
    std::fs::write(files.join("file-orphan123"), b"no row").expect("orphan");
    // Something that is not an id is not the store's to remove.
    std::fs::write(files.join("README"), b"mine").expect("foreign");

    let store = open(dir.path());
    assert_eq!(
        store.get("alice", &kept.id).expect("get"),
        Some(kept.clone())
    );
    assert_eq!(read(&store, "alice", &kept.id), b"kept contents");
    assert!(
        incoming(dir.path()).is_empty(),
        "{:?}",
        incoming(dir.path())
    );
    assert_eq!(contents(dir.path()), vec![kept.id.clone()]);
    assert!(files.join("README").exists());
    // New uploads still work after the sweep.
    let more = put(&store, "alice", "more.txt", "batch", b"more");
    assert_eq!(read(&store, "alice", &more.id), b"more");
}

#[test]
fn a_row_whose_contents_went_missing_is_an_io_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let f = put(&store, "alice", "a", "batch", b"abc");
    std::fs::remove_file(dir.path().join("files").join(&f.id)).expect("remove");
    let err = store.open_content("alice", &f.id).expect_err("missing");
    assert!(matches!(err, FileError::Io { .. }), "{err}");
}

/// Rows with ids the API never makes, as a tampered or buggy database could hold, with
/// something for each to reach if it were used as a path.
fn plant(dir: &Path, ids: &[&str]) {
    let db = raw_db(dir);
    for id in ids {
        db.execute(
            "INSERT INTO files (id, owner, filename, purpose, bytes, created_at)
             VALUES (?1, 'alice', 'x', 'batch', 1, 1)",
            [id],
        )
        .expect("plant");
    }
}

#[test]
fn ids_that_are_not_file_ids_are_never_found_or_used_as_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let real = put(&store, "alice", "a", "batch", b"real");
    std::fs::create_dir(dir.path().join("files/file-..")).expect("dir");
    std::fs::write(dir.path().join("x"), b"outside").expect("outside");
    let bad = [
        "../files.sqlite3",
        "file-../../x",
        "file-../../files.sqlite3",
        "files.sqlite3",
        "incoming",
        "file-a/../../x",
        "",
    ];
    plant(dir.path(), &bad);
    for id in bad {
        assert_eq!(store.get("alice", id).expect("get"), None, "{id:?}");
        assert!(
            store.open_content("alice", id).expect("open").is_none(),
            "{id:?}"
        );
        assert!(
            store.content_path("alice", id).expect("path").is_none(),
            "{id:?}"
        );
        assert!(!store.delete("alice", id).expect("delete"), "{id:?}");
    }
    assert!(dir.path().join("files.sqlite3").exists());
    assert_eq!(
        std::fs::read(dir.path().join("x")).expect("outside"),
        b"outside"
    );
    assert_eq!(read(&store, "alice", &real.id), b"real");
}
