//! Weight tensors read from a safetensors file into f32.
//!
//! The file is read through kiln-formats' memory map without copying; each tensor is then
//! decoded once into an owned, aligned `Vec<f32>` (safetensors promises no alignment, the
//! GEMM wants `&[f32]`, and bf16 / f16 weights are widened here). Encoder weights are
//! small (tens of MB), so the mapping is dropped after loading.

use std::path::Path;

use kiln_formats::SafetensorsFile;

use crate::error::{Error, Result};

/// An opened safetensors file whose tensors are decoded on request.
pub(crate) struct Tensors {
    file: SafetensorsFile,
    /// Prepended to every name (e.g. `bert.` when a checkpoint keeps the task wrapper's).
    prefix: String,
}

impl Tensors {
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            file: SafetensorsFile::open(path)?,
            prefix: String::new(),
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Reads names under `prefix` when the file has `probe` only under it.
    pub fn with_prefix_if_needed(mut self, probe: &str, prefix: &str) -> Self {
        if !self.file.has_tensor(probe) && self.file.has_tensor(&format!("{prefix}{probe}")) {
            self.prefix = prefix.to_owned();
        }
        self
    }

    /// Tensor `name` as f32, checked to have exactly `shape` (row-major, outermost first).
    pub fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = format!("{}{name}", self.prefix);
        let view = self.file.tensor(&full)?;
        let want: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        if view.shape != want.as_slice() {
            return Err(self.tensor_error(
                &full,
                format!("shape {want:?}"),
                format!("{:?}", view.shape),
            ));
        }
        view.to_f32().ok_or_else(|| {
            self.tensor_error(
                &full,
                "dtype F32, BF16 or F16".into(),
                view.dtype.name().into(),
            )
        })
    }

    fn tensor_error(&self, name: &str, expected: String, found: String) -> Error {
        Error::Tensor {
            path: self.path().to_path_buf(),
            name: name.to_owned(),
            expected,
            found,
        }
    }
}
