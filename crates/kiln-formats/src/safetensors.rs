//! safetensors reader over a memory map.
//!
//! Shapes here are row-major in safetensors (PyTorch) order: `shape[0]` is the outermost
//! dimension and the last one is contiguous. That is the reverse of GGUF's ggml order,
//! where `shape[0]` is contiguous: a `[30522, 384]` embedding table here would be
//! `[384, 30522]` in a GGUF file. Tensor data in safetensors carries no alignment
//! guarantee, so [`StView::data`] may start at any address.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::reader::Quoted;
use crate::safetensors_header::{self, StTensor};
use crate::{Error, Result, StDtype};

/// A borrowed view of one safetensors tensor's bytes inside the mapping.
#[derive(Debug, Clone, Copy)]
pub struct StView<'a> {
    pub name: &'a str,
    pub dtype: StDtype,
    /// Row-major, outermost dimension first (see the module docs for GGUF's order).
    pub shape: &'a [u64],
    /// Little-endian elements, `n_elements() * dtype.size_bytes()` bytes, unaligned.
    pub data: &'a [u8],
}

impl StView<'_> {
    /// Number of elements (product of the dimensions; 1 for a scalar).
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// The elements as f32 (decoded from F32, F16 or BF16), or `None` for another dtype.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        let data = self.data;
        Some(match self.dtype {
            StDtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            StDtype::BF16 => data
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            StDtype::F16 => data
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => return None,
        })
    }
}

/// An opened safetensors file: validated header, data left in the mapping.
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Mmap,
    tensors: Vec<StTensor>,
    by_name: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl SafetensorsFile {
    /// Maps and validates `path`.
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
        let header = safetensors_header::parse(&path, &mmap)?;
        Ok(Self {
            path,
            mmap,
            tensors: header.tensors,
            by_name: header.by_name,
            metadata: header.metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `__metadata__` map (empty if the file has none).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Tensor names in the order their data appears in the file.
    pub fn tensor_names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// A zero-copy view of a tensor.
    pub fn tensor(&self, name: &str) -> Result<StView<'_>> {
        let t = self
            .by_name
            .get(name)
            .and_then(|&i| self.tensors.get(i))
            .ok_or_else(|| Error::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        self.view(t)
    }

    /// Views of all tensors, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = Result<StView<'_>>> + '_ {
        self.tensors.iter().map(|t| self.view(t))
    }

    fn view<'a>(&'a self, t: &'a StTensor) -> Result<StView<'a>> {
        // Ranges were checked against the file length at open; `get` keeps this
        // panic-free regardless.
        let data = usize::try_from(t.start)
            .ok()
            .zip(usize::try_from(t.end).ok())
            .and_then(|(start, end)| self.mmap.get(start..end))
            .ok_or_else(|| Error::Malformed {
                path: self.path.clone(),
                offset: t.start,
                field: format!("tensor {} data", Quoted(&t.name)),
                reason: format!("bytes up to {} lie outside the mapping", t.end),
            })?;
        Ok(StView {
            name: &t.name,
            dtype: t.dtype,
            shape: &t.shape,
            data,
        })
    }
}
