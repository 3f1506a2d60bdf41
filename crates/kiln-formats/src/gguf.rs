//! GGUF v2/v3 reader over a memory map.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::gguf_header;
use crate::metadata::{MetaArray, MetaValue};
use crate::reader::Quoted;
use crate::{Error, GgmlType, Result, TensorView};

/// Where one tensor lives in the file, validated against the file's size.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: GgmlType,
    /// ggml order: `shape[0]` is the contiguous dimension.
    pub shape: Vec<u64>,
    /// Absolute byte offset in the file (a multiple of the file's alignment).
    pub offset: u64,
    /// Bytes of data.
    pub size: u64,
}

/// An opened GGUF file: parsed metadata and tensor directory, data left in the mapping.
pub struct GgufFile {
    path: PathBuf,
    mmap: Mmap,
    version: u32,
    metadata: BTreeMap<String, MetaValue>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the mapping is read-only; like every mmap-based loader we rely on the
        // file not being truncated underneath us while it is open.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(path, mmap)
    }

    fn parse(path: PathBuf, mmap: Mmap) -> Result<Self> {
        let header = gguf_header::parse(&path, &mmap)?;
        Ok(Self {
            path,
            mmap,
            version: header.version,
            metadata: header.metadata,
            tensors: header.tensors,
            by_name: header.by_name,
        })
    }

    /// Tells the OS the mapped bytes `offset..offset + len` won't be read for now, so
    /// their pages leave the resident set (best effort; whole pages inside the range
    /// only). Used for weights that were repacked into memory at load: keeping both
    /// copies resident would double their footprint. A later read simply faults the
    /// pages back in from the file.
    pub fn release_range(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        {
            const PAGE: usize = 4096;
            let start = offset.div_ceil(PAGE) * PAGE;
            let end = offset.saturating_add(len).min(self.mmap.len()) / PAGE * PAGE;
            if end > start {
                // SAFETY: the mapping is read-only and file-backed and Kiln never writes
                // to it, so MADV_DONTNEED only drops clean pages; any later read sees
                // the same bytes, faulted in again from the file.
                let _ = unsafe {
                    self.mmap.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn metadata(&self) -> &BTreeMap<String, MetaValue> {
        &self.metadata
    }

    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The raw value of a key, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    fn missing(&self, key: &str) -> Error {
        Error::MissingKey {
            path: self.path.clone(),
            key: key.to_string(),
        }
    }

    fn wrong(&self, key: &str, expected: &'static str, found: &MetaValue) -> Error {
        Error::WrongType {
            path: self.path.clone(),
            key: key.to_string(),
            expected,
            found: found.type_name(),
        }
    }

    /// A string value; `Ok(None)` if absent, an error if present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(MetaValue::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "string", v)),
        }
    }

    /// A non-negative integer value of any width.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "unsigned integer", v)),
        }
    }

    /// A numeric value of any type, as f64.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "number", v)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "bool", v)),
        }
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&MetaArray>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.wrong(key, "array", v)),
        }
    }

    /// Like [`get_str`](Self::get_str) but absent is an error.
    pub fn require_str(&self, key: &str) -> Result<&str> {
        self.get_str(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn require_f64(&self, key: &str) -> Result<f64> {
        self.get_f64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The directory entry of a tensor (type, shape, absolute offset and size).
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A zero-copy view of a tensor's bytes.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self
            .by_name
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        // Offsets and sizes were checked against the file length at parse time; `get`
        // keeps this panic-free regardless.
        let data = usize::try_from(info.offset)
            .ok()
            .zip(usize::try_from(info.size).ok())
            .and_then(|(start, len)| self.mmap.get(start..start.checked_add(len)?))
            .ok_or_else(|| Error::Malformed {
                path: self.path.clone(),
                offset: info.offset,
                field: format!("tensor {} data", Quoted(&info.name)),
                reason: format!("{} bytes lie outside the mapping", info.size),
            })?;
        Ok(TensorView {
            name: &info.name,
            dtype: info.dtype,
            shape: &info.shape,
            data,
        })
    }
}

/// The whole mapped file, so owners of an `Arc<GgufFile>` can borrow a tensor's bytes by
/// its [`TensorInfo::offset`] and [`TensorInfo::size`] (validated at open).
impl AsRef<[u8]> for GgufFile {
    fn as_ref(&self) -> &[u8] {
        &self.mmap
    }
}
