//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use kiln_formats::{Error, GgufFile, SafetensorsFile};
use kiln_testkit::gguf_writer::GgufWriter;

/// A temporary file holding some bytes; deleted on drop.
pub struct TempFile {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn temp_file(name: &str, bytes: &[u8]) -> TempFile {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write temp file");
    TempFile { _dir: dir, path }
}

/// Opens `bytes` as a GGUF file and returns the error it must produce, with its message.
pub fn gguf_err(bytes: &[u8]) -> (Error, String) {
    let f = temp_file("t.gguf", bytes);
    let err = GgufFile::open(&f.path).expect_err("malformed file must be rejected");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", f.path.display())),
        "message must name the file: {msg}"
    );
    (err, msg)
}

pub fn gguf_err_of(w: &GgufWriter) -> (Error, String) {
    gguf_err(&w.build().0)
}

/// Opens `bytes` as a safetensors file and returns the error it must produce.
pub fn st_err(bytes: &[u8]) -> (Error, String) {
    let f = temp_file("t.safetensors", bytes);
    let err = SafetensorsFile::open(&f.path).expect_err("malformed file must be rejected");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", f.path.display())),
        "message must name the file: {msg}"
    );
    (err, msg)
}

/// Asserts a `Malformed` error at `offset` about `field`; returns the reason.
#[track_caller]
pub fn assert_malformed(err: &(Error, String), offset: u64, field: &str) -> String {
    match &err.0 {
        Error::Malformed {
            offset: o,
            field: f,
            reason,
            ..
        } => {
            assert_eq!((*o, f.as_str()), (offset, field), "in {:?}", err.1);
            assert!(
                err.1.contains(&format!("{field} at offset {offset}: ")),
                "message {:?} must show field and offset",
                err.1
            );
            reason.clone()
        }
        other => panic!("expected Malformed {field} at {offset}, got {other:?}"),
    }
}
