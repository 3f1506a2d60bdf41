//! The Rust conversion of NanoGuard's checkpoint and tokenizer against the reference
//! conversion with torch (`scripts/fixtures/nanoguard_convert.py`).

mod common;

use std::path::{Path, PathBuf};

use common::{as_array, as_str, as_usize, fixture, sha256_hex};
use kiln_encoder::nanoguard::{convert, is_converted, OUTPUTS, SOURCES};
use kiln_encoder::{Classifier, Error};
use kiln_formats::SafetensorsFile;

fn package_dir() -> PathBuf {
    kiln_testkit::model_dir("nanoguard-prompt-injection")
}

fn copy_sources(to: &Path) {
    for s in SOURCES {
        std::fs::copy(package_dir().join(s.file), to.join(s.file)).expect("copy source");
    }
}

#[test]
fn conversion_reproduces_the_reference_files() {
    let fx = fixture("nanoguard_conversion.json");
    // The pinned hashes in the code are the fixture's.
    for s in SOURCES {
        assert_eq!(s.sha256, as_str(&fx["inputs"][s.file]), "{}", s.file);
    }
    for o in OUTPUTS {
        assert_eq!(
            o.sha256,
            as_str(&fx["outputs"][o.file]["sha256"]),
            "{}",
            o.file
        );
        assert_eq!(
            o.size,
            fx["outputs"][o.file]["size"].as_u64().unwrap_or(0),
            "{}",
            o.file
        );
    }
    let catalog = kiln_catalog::find("@kiln/nanoguard").expect("catalogue entry");
    for s in SOURCES {
        assert_eq!(
            catalog.require_file(s.file).expect("listed").sha256,
            Some(s.sha256)
        );
    }

    let out = tempfile::tempdir().expect("temp dir");
    convert(&package_dir(), out.path()).expect("converts");
    assert!(is_converted(out.path()));
    for o in OUTPUTS {
        let data = std::fs::read(out.path().join(o.file)).expect("output written");
        assert_eq!(data.len() as u64, o.size, "{}", o.file);
        assert_eq!(sha256_hex(&data), o.sha256, "{}", o.file);
    }
    // Tensor by tensor too, so a mismatch would name the tensor.
    let st = SafetensorsFile::open(out.path().join("model.safetensors")).expect("reads back");
    let tensors = as_array(&fx["tensors"]);
    assert_eq!(st.len(), tensors.len());
    for t in tensors {
        let view = st.tensor(as_str(&t["name"])).expect("tensor present");
        let dtype = match as_str(&t["dtype"]) {
            "float32" => "F32",
            "bfloat16" => "BF16",
            other => panic!("fixture dtype {other}"),
        };
        let shape: Vec<u64> = as_array(&t["shape"])
            .iter()
            .map(|d| as_usize(d) as u64)
            .collect();
        assert_eq!(
            (view.dtype.name(), view.shape),
            (dtype, shape.as_slice()),
            "{}",
            view.name
        );
        assert_eq!(sha256_hex(view.data), as_str(&t["sha256"]), "{}", view.name);
    }
}

#[test]
fn first_load_converts_beside_the_sources() {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_sources(dir.path());
    assert!(!is_converted(dir.path()));
    let c = Classifier::load(dir.path()).expect("converts and loads");
    assert!(is_converted(dir.path()));
    assert_eq!(c.labels(), ["safe", "injection"]);
    assert_eq!(c.max_tokens(), 512);
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".partial")), "{names:?}");
    // A stale conversion (here: a config.json from elsewhere) is redone.
    let config = dir.path().join("config.json");
    std::fs::write(&config, b"{}").expect("overwrite config");
    assert!(!is_converted(dir.path()));
    Classifier::load(dir.path()).expect("reconverts");
    assert_eq!(
        sha256_hex(&std::fs::read(&config).expect("config")),
        OUTPUTS[2].sha256
    );
    // Without the sources, the converted files alone are loaded.
    for s in SOURCES {
        std::fs::remove_file(dir.path().join(s.file)).expect("remove source");
    }
    Classifier::load(dir.path()).expect("loads converted files");
}

#[test]
fn unknown_sources_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_sources(dir.path());
    let pt = dir.path().join("model.pt");
    let mut data = std::fs::read(&pt).expect("read");
    let last = data.len() - 1;
    data[last] ^= 1;
    std::fs::write(&pt, data).expect("write");
    match Classifier::load(dir.path()) {
        Err(Error::SourceMismatch { path, expected, .. }) => {
            assert_eq!((path, expected), (pt, SOURCES[0].sha256));
        }
        other => panic!("expected SourceMismatch, got {other:?}"),
    }
    assert!(OUTPUTS.iter().all(|o| !dir.path().join(o.file).exists()));
}

#[test]
fn an_empty_directory_names_what_is_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let msg = Classifier::load(dir.path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("model.safetensors") && msg.contains("model.pt"),
        "{msg}"
    );
}
