//! Copying a real GGUF with some tensors replaced by F32 values (for tests that need a
//! model variant: weights merged with an adapter, a matrix dequantized).

use std::path::Path;

use kiln_formats::{GgmlType, GgufFile, MetaArray, MetaValue, TensorInfo};

use crate::gguf_writer::{Array, GgufWriter, Value};

/// A metadata value as the writer spells it.
pub fn meta_value(v: &MetaValue) -> Value {
    match v {
        MetaValue::U8(x) => Value::U8(*x),
        MetaValue::I8(x) => Value::I8(*x),
        MetaValue::U16(x) => Value::U16(*x),
        MetaValue::I16(x) => Value::I16(*x),
        MetaValue::U32(x) => Value::U32(*x),
        MetaValue::I32(x) => Value::I32(*x),
        MetaValue::U64(x) => Value::U64(*x),
        MetaValue::I64(x) => Value::I64(*x),
        MetaValue::F32(x) => Value::F32(*x),
        MetaValue::F64(x) => Value::F64(*x),
        MetaValue::Bool(x) => Value::Bool(*x),
        MetaValue::String(s) => Value::str(s),
        MetaValue::Array(a) => Value::Array(meta_array(a)),
    }
}

fn meta_array(a: &MetaArray) -> Array {
    let raw = |item_type: u32, count: usize, payload: Vec<u8>| Array::Raw {
        item_type,
        count: count as u64,
        payload,
    };
    use crate::gguf_writer::ty;
    match a {
        MetaArray::U8(v) => Array::U8(v.clone()),
        MetaArray::I8(v) => raw(ty::I8, v.len(), v.iter().map(|x| *x as u8).collect()),
        MetaArray::U16(v) => raw(
            ty::U16,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        MetaArray::I16(v) => raw(
            ty::I16,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        MetaArray::U32(v) => Array::U32(v.clone()),
        MetaArray::I32(v) => Array::I32(v.clone()),
        MetaArray::U64(v) => Array::U64(v.clone()),
        MetaArray::I64(v) => raw(
            ty::I64,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        MetaArray::F32(v) => Array::F32(v.clone()),
        MetaArray::F64(v) => raw(
            ty::F64,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        MetaArray::Bool(v) => Array::Bool(v.clone()),
        MetaArray::String(v) => Array::Str(v.iter().map(|s| s.as_bytes().to_vec()).collect()),
        MetaArray::Array(v) => Array::Array(v.iter().map(meta_array).collect()),
    }
}

/// New values for a tensor, and the float type to store them in.
pub enum Replacement {
    F32(Vec<f32>),
    /// Rounded to F16.
    F16(Vec<f32>),
}

/// Writes `src` to `dst` with the same metadata and tensors, except that each tensor for
/// which `replace` returns values is stored with those values (same shape).
pub fn copy_replacing(
    src: &GgufFile,
    dst: &Path,
    mut replace: impl FnMut(&TensorInfo) -> Option<Replacement>,
) -> std::io::Result<()> {
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        // The writer lays the file out with its own (default) alignment.
        if k != "general.alignment" {
            w.kv(k, meta_value(v));
        }
    }
    for info in src.tensor_infos() {
        match replace(info) {
            Some(Replacement::F32(values)) => {
                w.tensor_f32(&info.name, &info.shape, &values);
            }
            Some(Replacement::F16(values)) => {
                let data = values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect();
                w.tensor(&info.name, &info.shape, GgmlType::F16.id(), data);
            }
            None => {
                let data = src
                    .tensor(&info.name)
                    .map_err(std::io::Error::other)?
                    .data
                    .to_vec();
                w.tensor(&info.name, &info.shape, info.dtype.id(), data);
            }
        }
    }
    w.write(dst).map(drop)
}
