//! A cache of the backend's prepared (repacked) weights: a start maps the copy an earlier
//! start made instead of repacking every matrix, and processes on one host share its
//! pages.
//!
//! **Never wrong.** A cache file is named by the fingerprint of everything its bytes
//! derive from: the backend's layout name, the digest of the model file's whole content
//! (never its path or mtime; computed once per load, or remembered by the file's identity
//! in `digests/` (see `digest_memo.rs`), and shared with the engine's KV disk tier) and,
//! per prepared matrix, its tensor name, type and shape. A changed byte, another
//! quantization or a new layout version is another name, so a stale copy is never
//! found, let alone read. The header repeats the
//! fingerprint and is hashed; a file whose header does not check out is ignored (and
//! replaced).
//!
//! **Crash ordering.** A file is written whole under a temporary name, synced, then
//! renamed into place: a reader sees no file or a complete one, never a torn one. The
//! entries' bytes are not hashed again at load (that would read every weight a second
//! time); the rename is what keeps them whole.
//!
//! Format (little endian): `KILNPACK`, format version (u32), fingerprint (32 bytes),
//! entry count (u32), per entry its offset and length (u64 each; length 0: the backend
//! made no copy of that matrix), a BLAKE3 hash of all of that, then the entries, each at
//! a page-aligned offset so the mapping hands the kernels page-aligned groups.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use kiln_backend::WeightBytes;
use memmap2::Mmap;

use crate::digest_memo::DigestMemo;

const MAGIC: &[u8; 8] = b"KILNPACK";
const FORMAT_VERSION: u32 = 1;
const ALIGN: u64 = 4096;
const TMP_SUFFIX: &str = ".tmp";

/// A fingerprint of the prepared copies' origin (see the module docs).
pub type Fingerprint = [u8; 32];

/// Where prepared copies are kept (one file per fingerprint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackCache {
    dir: PathBuf,
}

/// One matrix's part of the fingerprint: its tensor (its bytes are in the file's
/// content digest).
pub(crate) struct SourceMatrix<'a> {
    pub name: &'a str,
    pub dtype: String,
    pub shape: &'a [u64],
}

/// How a load's prepared weights met the cache.
pub(crate) enum PackOutcome {
    /// No cache (or the backend prepares nothing worth keeping).
    Off,
    /// Mapped from a file an earlier load wrote: nothing was prepared.
    Mapped,
    /// Prepared now; this thread writes them for the next load.
    Writing(JoinHandle<std::io::Result<()>>),
}

/// A cache file that checked out: its entries, ready to hand to the backend.
pub(crate) struct CachedPack {
    map: Arc<Mmap>,
    entries: Vec<(u64, u64)>,
}

impl PackCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Model files' content digests, remembered beside the copies made from them.
    pub(crate) fn digest_memo(&self) -> DigestMemo {
        DigestMemo::new(self.dir.join("digests"))
    }

    fn path_of(&self, key: &Fingerprint) -> PathBuf {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}.kpack"))
    }

    /// The fingerprint of `layout`'s copies of `matrices` of a model file whose
    /// content digest is `content` (see [`crate::content_digest`]).
    pub(crate) fn fingerprint(
        layout: &str,
        matrices: &[SourceMatrix<'_>],
        content: &[u8; 32],
    ) -> Fingerprint {
        let mut key = blake3::Hasher::new();
        let mut field = |bytes: &[u8]| {
            key.update(&(bytes.len() as u64).to_le_bytes());
            key.update(bytes);
        };
        field(layout.as_bytes());
        field(content);
        for m in matrices {
            field(m.name.as_bytes());
            field(m.dtype.as_bytes());
            for d in m.shape {
                field(&d.to_le_bytes());
            }
        }
        *key.finalize().as_bytes()
    }

    /// The file for `key`, if there is one whose header checks out for `n` entries.
    /// `Err` describes a file that was there but unusable.
    pub(crate) fn open(&self, key: &Fingerprint, n: usize) -> Result<Option<CachedPack>, String> {
        // A start is when a writer killed mid-write (`kill -9`) is found out.
        self.remove_orphans();
        let path = self.path_of(key);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        // SAFETY: the file is only ever replaced by rename, never written in place, so
        // the mapped bytes cannot change under us.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| format!("{}: {e}", path.display()))?;
        let entries =
            parse_header(&map, key, n).map_err(|why| format!("{}: {why}", path.display()))?;
        Ok(Some(CachedPack {
            map: Arc::new(map),
            entries,
        }))
    }

    /// Writes `copies` (one per matrix; `None`: no copy) as the file for `key` on a
    /// thread of its own: a first load serves at once, and the next load maps the file.
    pub(crate) fn write_in_background(
        &self,
        key: Fingerprint,
        copies: Vec<Option<WeightBytes>>,
    ) -> std::io::Result<JoinHandle<std::io::Result<()>>> {
        let cache = self.clone();
        std::thread::Builder::new()
            .name("kiln-pack-cache".into())
            .spawn(move || {
                let slices: Vec<Option<&[u8]>> = copies
                    .iter()
                    .map(|c| c.as_ref().map(WeightBytes::bytes))
                    .collect();
                cache.write(&key, &slices)
            })
    }

    /// Writes `copies` (one per matrix; `None`: no copy) as the file for `key`.
    pub(crate) fn write(&self, key: &Fingerprint, copies: &[Option<&[u8]>]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let header_len = 8 + 4 + 32 + 4 + 16 * copies.len() as u64 + 32;
        let mut entries = Vec::with_capacity(copies.len());
        let mut at = header_len.next_multiple_of(ALIGN);
        for c in copies {
            let len = c.map_or(0, |c| c.len() as u64);
            entries.push((if len == 0 { 0 } else { at }, len));
            at = (at + len).next_multiple_of(ALIGN);
        }
        let mut header = Vec::with_capacity(header_len as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(key);
        header.extend_from_slice(&(copies.len() as u32).to_le_bytes());
        for (off, len) in &entries {
            header.extend_from_slice(&off.to_le_bytes());
            header.extend_from_slice(&len.to_le_bytes());
        }
        let hash = *blake3::hash(&header).as_bytes();
        header.extend_from_slice(&hash);

        let tmp = self.dir.join(format!(
            ".{}.{}{TMP_SUFFIX}",
            std::process::id(),
            key.iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ));
        let result = (|| {
            let file = File::create(&tmp)?;
            let mut w = BufWriter::with_capacity(1 << 20, &file);
            w.write_all(&header)?;
            let mut pos = header.len() as u64;
            for (c, (off, _)) in copies.iter().zip(&entries) {
                let Some(c) = c.filter(|c| !c.is_empty()) else {
                    continue;
                };
                w.write_all(&vec![0u8; (off - pos) as usize])?;
                w.write_all(c)?;
                pos = off + c.len() as u64;
            }
            w.flush()?;
            drop(w);
            file.sync_all()?;
            fs::rename(&tmp, self.path_of(key))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

impl PackCache {
    /// Removes the temporary files of writers that died mid-write (`kill -9`): each
    /// names its process, and a process that is gone will never finish it.
    fn remove_orphans(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_suffix(TMP_SUFFIX))
                .and_then(|n| n.strip_prefix('.'))
                .and_then(|n| n.split('.').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !process_alive(pid) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Whether process `pid` still runs (Linux's `/proc`; elsewhere assumed alive, so
/// nothing of a live writer's is ever removed).
fn process_alive(pid: u32) -> bool {
    !Path::new("/proc/self").exists() || Path::new(&format!("/proc/{pid}")).exists()
}

impl CachedPack {
    /// Entry `i`'s bytes as weight bytes in the mapping, if the file holds a copy.
    pub(crate) fn entry(&self, i: usize) -> Option<WeightBytes> {
        let &(offset, len) = self.entries.get(i)?;
        (len > 0).then(|| WeightBytes::Mapped {
            source: self.map.clone(),
            offset: offset as usize,
            len: len as usize,
        })
    }
}

/// The entries of a cache file, if its header is whole, matches `key` and `n`, and
/// every entry lies inside the file.
fn parse_header(map: &[u8], key: &Fingerprint, n: usize) -> Result<Vec<(u64, u64)>, String> {
    let header_len = 8 + 4 + 32 + 4 + 16 * n;
    let header = map
        .get(..header_len + 32)
        .ok_or("shorter than its header")?;
    let (body, hash) = header.split_at(header_len);
    if &body[..8] != MAGIC {
        return Err("not a Kiln pack file".into());
    }
    if body[8..12] != FORMAT_VERSION.to_le_bytes() {
        return Err("another format version".into());
    }
    if body[12..44] != key[..] {
        return Err("another fingerprint".into());
    }
    if body[44..48] != (n as u32).to_le_bytes() {
        return Err("another number of matrices".into());
    }
    if blake3::hash(body).as_bytes()[..] != hash[..] {
        return Err("header hash mismatch".into());
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[at..at + 8]);
        u64::from_le_bytes(b)
    };
    (0..n)
        .map(|i| {
            let (off, len) = (u64_at(48 + 16 * i), u64_at(56 + 16 * i));
            let inside = off
                .checked_add(len)
                .is_some_and(|end| end <= map.len() as u64);
            if inside {
                Ok((off, len))
            } else {
                Err(format!("entry {i} runs past the end"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(shape: &[u64]) -> Vec<SourceMatrix<'_>> {
        ["a", "b", "c"]
            .into_iter()
            .map(|name| SourceMatrix {
                name,
                dtype: "q4_K".into(),
                shape,
            })
            .collect()
    }

    #[test]
    fn a_written_pack_reads_back_and_any_change_is_another_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = PackCache::new(dir.path().join("packed"));
        let (content, shape) = ([1u8; 32], [16u64, 4]);
        let key = PackCache::fingerprint("layout v1", &sources(&shape), &content);
        assert!(cache.open(&key, 3).expect("no file yet").is_none());
        let copies = [Some(&[9u8; 300][..]), None, Some(&[7u8; 5000][..])];
        cache.write(&key, &copies).expect("written");
        let pack = cache.open(&key, 3).expect("readable").expect("found");
        assert_eq!(
            pack.entry(0).map(|b| b.bytes().to_vec()),
            Some(vec![9u8; 300])
        );
        assert!(pack.entry(1).is_none());
        let e2 = pack.entry(2).expect("entry 2");
        assert_eq!(e2.bytes(), &[7u8; 5000][..]);
        // Page-aligned, so the kernels' groups start aligned.
        assert!(matches!(e2, WeightBytes::Mapped { offset, .. } if offset % 4096 == 0));

        // The file's content, the layout or a shape changes it.
        assert_ne!(
            PackCache::fingerprint("layout v1", &sources(&shape), &[2; 32]),
            key
        );
        assert_ne!(
            PackCache::fingerprint("layout v2", &sources(&shape), &content),
            key
        );
        assert_ne!(
            PackCache::fingerprint("layout v1", &sources(&[4, 16]), &content),
            key
        );
        // Asked for another number of matrices: refused, not misread.
        assert!(cache.open(&key, 2).is_err());
    }

    #[test]
    fn a_damaged_header_or_a_torn_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = PackCache::new(dir.path());
        let key = [5u8; 32];
        cache
            .write(&key, &[Some(&[1u8; 10_000][..])])
            .expect("written");
        let path = cache.path_of(&key);
        let good = fs::read(&path).expect("read");
        let mut bad = good.clone();
        bad[50] ^= 0x80; // inside the entry table
        fs::write(&path, &bad).expect("write");
        assert!(cache.open(&key, 1).is_err());
        fs::write(&path, &good[..good.len() - 1]).expect("write");
        assert!(cache.open(&key, 1).is_err(), "the entry runs past the end");
        fs::write(&path, &good[..20]).expect("write");
        assert!(cache.open(&key, 1).is_err());
        fs::write(&path, &good).expect("write");
        assert!(cache.open(&key, 1).expect("whole").is_some());
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path()).expect("dir").collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_dead_writers_temporary_file_is_removed_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = PackCache::new(dir.path());
        // No process has a pid this large (Linux's limit is 2^22).
        let dead = dir.path().join(format!(".4294967000.00ff{TMP_SUFFIX}"));
        let live = dir.path().join(format!(".1.00ff{TMP_SUFFIX}"));
        fs::write(&dead, b"torn").expect("write");
        fs::write(&live, b"in progress").expect("write");
        assert!(cache.open(&[1u8; 32], 1).expect("no file").is_none());
        assert!(!dead.exists());
        assert!(live.exists(), "pid 1 is alive");
    }
}
