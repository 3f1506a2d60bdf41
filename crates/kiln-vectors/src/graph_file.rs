//! A saved HNSW graph: `graphs/<index id>.hnsw` beside `vectors.sqlite3`.
//!
//! Crash safety: a graph file is derived state, never the truth. It is written whole
//! to `graphs/<id>.hnsw.tmp`, fsynced, renamed over `graphs/<id>.hnsw`, and the
//! directory fsynced; only then does SQLite record the checkpoint and drop the log
//! rows it covers. A crash at any point leaves either the previous file or the new one
//! (a torn `.tmp` is swept at the next open), and the log still holds every write after
//! whichever file survived. A file is used only if its BLAKE3 (over the header and
//! the graph) verifies, the padding between them is zeros, its header names the same
//! index, dimensions, metric and connectivity, and its checkpoint sequence is one
//! SQLite's log can replay from; otherwise it is ignored, logged, and the graph
//! rebuilt from SQLite.
//!
//! Read by mapping, not copying: a start verifies the mapped file on every core (while
//! another thread replays the log after it) and serves queries from a view of it at
//! once (`graph::Usearch::view`); a 1M × 384 graph is 1.7 GB, which a read, a
//! one-thread hash and usearch's copy took seconds over. The graph starts at
//! [`PAYLOAD_AT`], a cache-line boundary, so the view's vectors and neighbour lists
//! keep their natural alignment. A file is never rewritten in place (a checkpoint
//! renames a new one over it), so a mapping stays valid for as long as it is held.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

/// The directory of graph files inside the index directory.
pub(crate) const DIR: &str = "graphs";
const MAGIC: &[u8; 8] = b"KILNHNSW";
/// Bumped whenever the header, the checksum or the graph's encoding changes
/// (2: BLAKE3 instead of SHA-256, the graph at [`PAYLOAD_AT`]).
const VERSION: u32 = 2;
/// Magic, version, dims, index id, seq, vectors, metric + 3 pad, connectivity,
/// payload length, then the BLAKE3, then zeros up to [`PAYLOAD_AT`].
const HEADER: usize = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8;
const SUM: usize = 32;
/// Where the graph's bytes start in the file.
const PAYLOAD_AT: usize = 128;

/// What a graph file says it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub index_id: i64,
    pub dimensions: u32,
    /// The metric's code ([`crate::Metric`] order).
    pub metric: u8,
    pub connectivity: u32,
    /// The last log sequence number the graph includes.
    pub seq: i64,
    /// Vectors in the graph.
    pub vectors: u64,
}

/// Why a graph file was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("no graph file")]
    Missing,
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a usable graph file: {why}")]
    Corrupt { path: PathBuf, why: String },
}

pub(crate) fn path(dir: &Path, index_id: i64) -> PathBuf {
    dir.join(DIR).join(format!("{index_id}.hnsw"))
}

fn encode(h: &Header, payload_len: u64) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    let mut at = 0;
    let mut put = |b: &[u8]| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(MAGIC);
    put(&VERSION.to_le_bytes());
    put(&h.dimensions.to_le_bytes());
    put(&h.index_id.to_le_bytes());
    put(&h.seq.to_le_bytes());
    put(&h.vectors.to_le_bytes());
    put(&[h.metric, 0, 0, 0]);
    put(&h.connectivity.to_le_bytes());
    put(&payload_len.to_le_bytes());
    out
}

fn decode(b: &[u8; HEADER]) -> Option<(Header, u64)> {
    let u32_at = |i: usize| b.get(i..i + 4)?.try_into().ok().map(u32::from_le_bytes);
    let u64_at = |i: usize| b.get(i..i + 8)?.try_into().ok().map(u64::from_le_bytes);
    if &b[..8] != MAGIC || u32_at(8)? != VERSION {
        return None;
    }
    let header = Header {
        dimensions: u32_at(12)?,
        index_id: u64_at(16)? as i64,
        seq: u64_at(24)? as i64,
        vectors: u64_at(32)?,
        metric: b[40],
        connectivity: u32_at(44)?,
    };
    Some((header, u64_at(48)?))
}

/// BLAKE3 of the header and the graph, on every core (rayon's pool).
fn checksum(header: &[u8], payload: &[u8]) -> [u8; SUM] {
    let mut h = blake3::Hasher::new();
    h.update(header);
    h.update_rayon(payload);
    *h.finalize().as_bytes()
}

/// A verified graph file, mapped; the graph's bytes are [`Mapped::payload`].
pub(crate) struct Mapped {
    map: Mmap,
}

impl Mapped {
    pub(crate) fn payload(&self) -> &[u8] {
        &self.map[PAYLOAD_AT..]
    }
}

/// Writes the graph file for `header.index_id` atomically (see the module doc).
pub(crate) fn write(dir: &Path, header: &Header, payload: &[u8]) -> std::io::Result<()> {
    let graphs = dir.join(DIR);
    fs::create_dir_all(&graphs)?;
    let path = path(dir, header.index_id);
    let tmp = path.with_extension("hnsw.tmp");
    let head = encode(header, payload.len() as u64);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&head)?;
        f.write_all(&checksum(&head, payload))?;
        f.write_all(&[0u8; PAYLOAD_AT - HEADER - SUM])?;
        f.write_all(payload)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, &path)?;
    File::open(&graphs)?.sync_all()
}

/// A mapped graph file whose header passed [`open`]'s checks but whose checksum is not
/// verified yet: nothing may read its graph before [`Unverified::verify`] (a corrupt
/// graph read through a view could send usearch out of bounds). Split from `open` so a
/// start can replay the log from the header's sequence while the hash runs.
pub(crate) struct Unverified {
    map: Mmap,
    path: PathBuf,
}

impl Unverified {
    /// Checks the BLAKE3 of the header and the graph (on every core).
    pub(crate) fn verify(self) -> Result<Arc<Mapped>, FileError> {
        let map = self.map;
        if checksum(&map[..HEADER], &map[PAYLOAD_AT..]) != map[HEADER..HEADER + SUM] {
            return Err(FileError::Corrupt {
                path: self.path,
                why: "checksum mismatch".into(),
            });
        }
        Ok(Arc::new(Mapped { map }))
    }
}

/// Maps the graph file of `index_id` and checks its header: length, magic and version,
/// the zeros before the graph, and the index it names.
pub(crate) fn open(dir: &Path, index_id: i64) -> Result<(Header, Unverified), FileError> {
    let path = path(dir, index_id);
    let io = |source: std::io::Error| FileError::Io {
        path: path.clone(),
        source,
    };
    let corrupt = |why: &str| FileError::Corrupt {
        path: path.clone(),
        why: why.to_string(),
    };
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FileError::Missing),
        Err(e) => return Err(io(e)),
    };
    // SAFETY: graph files are only ever replaced by rename, never written in place
    // (module doc), so the mapped bytes cannot change while the map lives.
    let map = unsafe { Mmap::map(&f) }.map_err(io)?;
    if map.len() < PAYLOAD_AT {
        return Err(corrupt("shorter than its header"));
    }
    let mut head = [0u8; HEADER];
    head.copy_from_slice(&map[..HEADER]);
    let (header, len) = decode(&head).ok_or_else(|| corrupt("bad magic or version"))?;
    if len != (map.len() - PAYLOAD_AT) as u64 {
        return Err(corrupt(
            "its length does not match its header (torn write?)",
        ));
    }
    // The checksum does not cover the zeros before the graph; a flipped bit there is
    // damage all the same, and a file with any is not one this code wrote.
    if map[HEADER + SUM..PAYLOAD_AT].iter().any(|&b| b != 0) {
        return Err(corrupt("the padding before its graph is not zero"));
    }
    if header.index_id != index_id {
        return Err(corrupt("it names another index"));
    }
    Ok((header, Unverified { map, path }))
}

/// Removes the graph file of `index_id`, if any.
pub(crate) fn remove(dir: &Path, index_id: i64) {
    let _ = fs::remove_file(path(dir, index_id));
}

/// Removes partial files and the files of indexes that no longer exist.
pub(crate) fn sweep(dir: &Path, exists: impl Fn(i64) -> bool) {
    let Ok(entries) = fs::read_dir(dir.join(DIR)) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let keep = name
            .strip_suffix(".hnsw")
            .and_then(|id| id.parse::<i64>().ok())
            .is_some_and(&exists);
        if !keep {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            index_id: 7,
            dimensions: 3,
            metric: 1,
            connectivity: 16,
            seq: 42,
            vectors: 2,
        }
    }

    fn read(dir: &Path, index_id: i64) -> Result<(Header, Arc<Mapped>), FileError> {
        let (h, unverified) = open(dir, index_id)?;
        Ok((h, unverified.verify()?))
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(matches!(read(dir.path(), 7), Err(FileError::Missing)));
        write(dir.path(), &header(), b"graph bytes").expect("write");
        let (h, mapped) = read(dir.path(), 7).expect("read");
        assert_eq!((h, mapped.payload()), (header(), &b"graph bytes"[..]));
        assert_eq!(
            mapped.payload().as_ptr() as usize % 64,
            0,
            "graph bytes aligned"
        );

        let p = path(dir.path(), 7);
        let mut bytes = fs::read(&p).expect("bytes");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&p, &bytes).expect("flip");
        assert!(
            matches!(read(dir.path(), 7), Err(FileError::Corrupt { why, .. }) if why.contains("checksum"))
        );
        bytes[last] ^= 1;
        bytes[HEADER + SUM + 1] = 0x10;
        fs::write(&p, &bytes).expect("flip a padding bit");
        assert!(
            matches!(read(dir.path(), 7), Err(FileError::Corrupt { why, .. }) if why.contains("padding"))
        );
        fs::write(&p, &bytes[..bytes.len() - 3]).expect("tear");
        assert!(
            matches!(read(dir.path(), 7), Err(FileError::Corrupt { why, .. }) if why.contains("torn"))
        );
        write(dir.path(), &header(), b"graph bytes").expect("write");
        fs::copy(&p, path(dir.path(), 8)).expect("copy");
        assert!(
            matches!(read(dir.path(), 8), Err(FileError::Corrupt { why, .. }) if why.contains("another index"))
        );

        fs::write(dir.path().join(DIR).join("9.hnsw.tmp"), b"x").expect("tmp file");
        sweep(dir.path(), |id| id == 7);
        let left: Vec<_> = fs::read_dir(dir.path().join(DIR))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["7.hnsw"]);
    }
}
