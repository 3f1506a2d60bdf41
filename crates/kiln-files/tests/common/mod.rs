//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;

use kiln_files::{FileStore, Limits, StoredFile};

pub fn open(dir: &Path) -> FileStore {
    FileStore::open(dir, Limits::default()).expect("open")
}

pub fn open_with(dir: &Path, limits: Limits) -> FileStore {
    FileStore::open(dir, limits).expect("open")
}

/// Uploads `data` in one chunk and finishes.
pub fn put(store: &FileStore, owner: &str, name: &str, purpose: &str, data: &[u8]) -> StoredFile {
    let mut up = store.upload(owner, name, purpose).expect("upload");
    up.write(data).expect("write");
    up.finish().expect("finish")
}

/// The contents of `owner`'s file `id`, read through `open_content`.
pub fn read(store: &FileStore, owner: &str, id: &str) -> Vec<u8> {
    let (_, mut file) = store
        .open_content(owner, id)
        .expect("open_content")
        .expect("file exists");
    let mut out = Vec::new();
    file.read_to_end(&mut out).expect("read");
    out
}

/// Names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// What is in `files/incoming/`.
pub fn incoming(dir: &Path) -> Vec<String> {
    names(&dir.join("files/incoming"))
}

/// The content files in `files/` (not the upload directory or the lock file).
pub fn contents(dir: &Path) -> Vec<String> {
    names(&dir.join("files"))
        .into_iter()
        .filter(|n| n.starts_with("file-"))
        .collect()
}

/// A second connection to the store's database, to set up states the API cannot make.
pub fn raw_db(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("files.sqlite3")).expect("raw open");
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .expect("busy timeout");
    conn
}
