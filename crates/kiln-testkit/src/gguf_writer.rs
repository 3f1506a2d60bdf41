//! A raw GGUF byte writer for tests.
//!
//! It builds well-formed GGUF v2/v3 files from typed metadata and tensors, and, through
//! public overrides and raw escape hatches, deliberately malformed ones: wrong magic,
//! version or counts, unknown value or tensor types, lying string lengths and array
//! counts, invalid UTF-8 keys, bad offsets. [`Layout`] reports where every section landed
//! so tests can assert the byte offsets named in error messages.
//!
//! ```
//! use kiln_testkit::gguf_writer::{ggml, GgufWriter, Value};
//! let mut w = GgufWriter::new();
//! w.kv("general.architecture", Value::str("llama"));
//! w.tensor("norm.weight", &[4], ggml::F32, vec![0; 16]);
//! let (bytes, layout) = w.build();
//! assert_eq!(&bytes[..4], b"GGUF");
//! assert_eq!(layout.data_start % 32, 0);
//! ```

use std::path::Path;

/// GGUF metadata value type ids.
pub mod ty {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// A few ggml tensor type ids.
pub mod ggml {
    pub const F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const Q4_0: u32 = 2;
    pub const Q4_1: u32 = 3;
    pub const Q8_0: u32 = 8;
    pub const Q4_K: u32 = 12;
    pub const Q6_K: u32 = 14;
    pub const BF16: u32 = 30;
}

/// One metadata value. Strings are bytes so that invalid UTF-8 can be written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(Vec<u8>),
    Array(Array),
    /// Any type id followed by arbitrary payload bytes (e.g. a bool byte of 2, a string
    /// whose length lies).
    Raw {
        type_id: u32,
        payload: Vec<u8>,
    },
}

impl Value {
    pub fn str(s: &str) -> Self {
        Value::Str(s.as_bytes().to_vec())
    }

    /// The type id written before the value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => ty::U8,
            Value::I8(_) => ty::I8,
            Value::U16(_) => ty::U16,
            Value::I16(_) => ty::I16,
            Value::U32(_) => ty::U32,
            Value::I32(_) => ty::I32,
            Value::U64(_) => ty::U64,
            Value::I64(_) => ty::I64,
            Value::F32(_) => ty::F32,
            Value::F64(_) => ty::F64,
            Value::Bool(_) => ty::BOOL,
            Value::Str(_) => ty::STRING,
            Value::Array(_) => ty::ARRAY,
            Value::Raw { type_id, .. } => *type_id,
        }
    }

    /// Appends the value's payload (without its type id).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.extend(v.to_le_bytes()),
            Value::U16(v) => out.extend(v.to_le_bytes()),
            Value::I16(v) => out.extend(v.to_le_bytes()),
            Value::U32(v) => out.extend(v.to_le_bytes()),
            Value::I32(v) => out.extend(v.to_le_bytes()),
            Value::U64(v) => out.extend(v.to_le_bytes()),
            Value::I64(v) => out.extend(v.to_le_bytes()),
            Value::F32(v) => out.extend(v.to_le_bytes()),
            Value::F64(v) => out.extend(v.to_le_bytes()),
            Value::Bool(v) => out.push(u8::from(*v)),
            Value::Str(s) => encode_string(out, s),
            Value::Array(a) => a.encode(out),
            Value::Raw { payload, .. } => out.extend(payload),
        }
    }
}

/// A homogeneous array value.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<Vec<u8>>),
    Array(Vec<Array>),
    /// Any item type and count, followed by arbitrary item bytes: for counts that lie.
    Raw {
        item_type: u32,
        count: u64,
        payload: Vec<u8>,
    },
}

impl Array {
    pub fn strs(items: &[&str]) -> Self {
        Array::Str(items.iter().map(|s| s.as_bytes().to_vec()).collect())
    }

    /// Appends item type, count and items.
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn items<T>(
            out: &mut Vec<u8>,
            item_type: u32,
            v: &[T],
            mut f: impl FnMut(&mut Vec<u8>, &T),
        ) {
            out.extend(item_type.to_le_bytes());
            out.extend((v.len() as u64).to_le_bytes());
            for x in v {
                f(out, x);
            }
        }
        match self {
            Array::U8(v) => items(out, ty::U8, v, |o, x| o.push(*x)),
            Array::I32(v) => items(out, ty::I32, v, |o, x| o.extend(x.to_le_bytes())),
            Array::U32(v) => items(out, ty::U32, v, |o, x| o.extend(x.to_le_bytes())),
            Array::U64(v) => items(out, ty::U64, v, |o, x| o.extend(x.to_le_bytes())),
            Array::F32(v) => items(out, ty::F32, v, |o, x| o.extend(x.to_le_bytes())),
            Array::Bool(v) => items(out, ty::BOOL, v, |o, x| o.push(u8::from(*x))),
            Array::Str(v) => items(out, ty::STRING, v, |o, x| encode_string(o, x)),
            Array::Array(v) => items(out, ty::ARRAY, v, |o, x| x.encode(o)),
            Array::Raw {
                item_type,
                count,
                payload,
            } => {
                out.extend(item_type.to_le_bytes());
                out.extend(count.to_le_bytes());
                out.extend(payload);
            }
        }
    }
}

/// Appends a GGUF string: u64 length then the bytes.
pub fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// One tensor; every field is public so tests can make any of them lie.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: Vec<u8>,
    /// ggml order: `dims[0]` is the contiguous dimension.
    pub dims: Vec<u64>,
    /// Written instead of `dims.len()` when set.
    pub n_dims: Option<u32>,
    pub type_id: u32,
    /// Written instead of the computed offset (relative to the data section) when set;
    /// the data is still placed at the computed one.
    pub offset: Option<u64>,
    pub data: Vec<u8>,
}

/// Where each part of a built file lies (absolute byte offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub version_at: usize,
    pub tensor_count_at: usize,
    pub kv_count_at: usize,
    /// Start of each key/value (its key length field).
    pub kv_at: Vec<usize>,
    /// Start of each value's type id.
    pub kv_type_at: Vec<usize>,
    /// Start of each tensor info (its name length field).
    pub tensor_info_at: Vec<usize>,
    /// Offset of each tensor info's n_dims, type and offset fields.
    pub tensor_n_dims_at: Vec<usize>,
    pub tensor_type_at: Vec<usize>,
    pub tensor_offset_at: Vec<usize>,
    /// End of the tensor directory, before alignment padding.
    pub tensor_infos_end: usize,
    /// Start of the data section (tensor offsets are relative to it).
    pub data_start: usize,
    /// Absolute start of each tensor's data.
    pub tensor_data_at: Vec<usize>,
}

/// Builds GGUF bytes; see the module docs.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    pub magic: [u8; 4],
    pub version: u32,
    /// Used for padding only: write `general.alignment` yourself to declare it.
    pub alignment: usize,
    /// Written instead of the real counts when set.
    pub tensor_count: Option<u64>,
    pub kv_count: Option<u64>,
    pub kvs: Vec<(Vec<u8>, Value)>,
    pub tensors: Vec<TensorSpec>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file with the default 32-byte alignment.
    pub fn new() -> Self {
        Self {
            magic: *b"GGUF",
            version: 3,
            alignment: 32,
            tensor_count: None,
            kv_count: None,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    pub fn kv(&mut self, key: &str, value: Value) -> &mut Self {
        self.kv_raw_key(key.as_bytes(), value)
    }

    /// A key given as raw bytes (e.g. invalid UTF-8).
    pub fn kv_raw_key(&mut self, key: &[u8], value: Value) -> &mut Self {
        self.kvs.push((key.to_vec(), value));
        self
    }

    /// Adds a tensor and returns it for further overrides.
    pub fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: Vec<u8>,
    ) -> &mut TensorSpec {
        self.tensors.push(TensorSpec {
            name: name.as_bytes().to_vec(),
            dims: dims.to_vec(),
            n_dims: None,
            type_id,
            offset: None,
            data,
        });
        let last = self.tensors.len() - 1;
        &mut self.tensors[last]
    }

    /// An F32 tensor holding `values` (whose length the caller matches to `dims`).
    pub fn tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut TensorSpec {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, ggml::F32, data)
    }

    /// The file's bytes and where each part lies.
    pub fn build(&self) -> (Vec<u8>, Layout) {
        let mut out = Vec::new();
        out.extend(self.magic);
        let version_at = out.len();
        out.extend(self.version.to_le_bytes());
        let tensor_count_at = out.len();
        let n_tensors = self.tensor_count.unwrap_or(self.tensors.len() as u64);
        out.extend(n_tensors.to_le_bytes());
        let kv_count_at = out.len();
        out.extend(self.kv_count.unwrap_or(self.kvs.len() as u64).to_le_bytes());

        let (mut kv_at, mut kv_type_at) = (Vec::new(), Vec::new());
        for (key, value) in &self.kvs {
            kv_at.push(out.len());
            encode_string(&mut out, key);
            kv_type_at.push(out.len());
            out.extend(value.type_id().to_le_bytes());
            value.encode(&mut out);
        }

        let align = self.alignment.max(1);
        let mut data_offsets = Vec::new();
        let mut next = 0usize;
        for t in &self.tensors {
            data_offsets.push(next);
            next = (next + t.data.len()).div_ceil(align) * align;
        }

        let mut layout = Layout {
            version_at,
            tensor_count_at,
            kv_count_at,
            kv_at,
            kv_type_at,
            tensor_info_at: Vec::new(),
            tensor_n_dims_at: Vec::new(),
            tensor_type_at: Vec::new(),
            tensor_offset_at: Vec::new(),
            tensor_infos_end: 0,
            data_start: 0,
            tensor_data_at: Vec::new(),
        };
        for (t, &auto) in self.tensors.iter().zip(&data_offsets) {
            layout.tensor_info_at.push(out.len());
            encode_string(&mut out, &t.name);
            layout.tensor_n_dims_at.push(out.len());
            out.extend(t.n_dims.unwrap_or(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            layout.tensor_type_at.push(out.len());
            out.extend(t.type_id.to_le_bytes());
            layout.tensor_offset_at.push(out.len());
            out.extend(t.offset.unwrap_or(auto as u64).to_le_bytes());
        }
        layout.tensor_infos_end = out.len();
        layout.data_start = out.len().div_ceil(align) * align;
        // Tensor-less files end right after the directory, as real writers do.
        if !self.tensors.is_empty() {
            out.resize(layout.data_start, 0);
        }
        for (t, &auto) in self.tensors.iter().zip(&data_offsets) {
            let at = layout.data_start + auto;
            layout.tensor_data_at.push(at);
            out.resize(at, 0);
            out.extend(&t.data);
        }
        (out, layout)
    }

    /// Builds the file and writes it to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<Layout> {
        let (bytes, layout) = self.build();
        std::fs::write(path, bytes)?;
        Ok(layout)
    }
}
