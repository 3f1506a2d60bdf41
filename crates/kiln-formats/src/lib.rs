//! Model file formats: GGUF (v2, v3) and safetensors, read over a memory map.
//!
//! Tensor data is never copied: [`TensorView`]s (GGUF) and [`StView`]s (safetensors)
//! borrow straight from the mapping. Every count, offset, size and string in a header is
//! validated before use, so a malformed or truncated file yields an [`Error`] naming the
//! file, the byte offset and the field; never a panic, and never an allocation beyond a
//! small multiple of the header's own size.
//!
//! Shape order differs between the formats: GGUF uses ggml order (`shape[0]` is the
//! contiguous dimension), safetensors uses row-major order (the last one is contiguous).

mod error;
mod ggml_type;
pub mod gguf;
mod gguf_header;
mod metadata;
mod reader;
mod replace;
pub mod safetensors;
mod safetensors_header;
mod st_dtype;

pub use error::{Error, Result};
pub use ggml_type::GgmlType;
pub use gguf::{GgufFile, TensorInfo};
pub use metadata::{MetaArray, MetaValue};
pub use replace::write_atomically;
pub use safetensors::{SafetensorsFile, StView};
pub use st_dtype::StDtype;

/// A borrowed view of one GGUF tensor's bytes inside the mapped file.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: GgmlType,
    /// Dimensions in ggml order: `shape[0]` is the innermost (contiguous) one.
    pub shape: &'a [u64],
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// Number of elements (product of the dimensions).
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Length of one row (the innermost dimension).
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(1) as usize
    }

    /// Number of rows (product of all but the innermost dimension).
    pub fn n_rows(&self) -> usize {
        self.shape.iter().skip(1).product::<u64>() as usize
    }
}
